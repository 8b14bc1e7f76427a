"""``inspect``: describe a checkpoint from its header alone, without reading array data."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._core.instance import printable
from .folding import fold
from .header import SaveRecord, read_header
from .inflight import written
from .nodes import Describer
from .opening import file_errors, open_checkpoint


@dataclass(frozen=True)
class FieldInfo:
    """One stored array as :func:`namedschema.inspect` reports it.

    Attributes:
        path: dotted field path, such as ``Traj.obs.pos``.
        shape: the array's shape.
        dtype: numpy dtype name (``torch.*`` for tensors).
        nbytes: bytes of the array's elements.
        block: tensor name of the block holding it (None for empty arrays).
        view_of: path of an earlier array whose memory it overlaps (it is a
            view of that one, or both of one base), or None; its bytes are
            stored once, with that array.
        codec: ``"zstd"`` when its block is stored compressed, else None
            (then ``block_bytes`` and ``stored_bytes`` are None too).
        block_bytes: raw bytes of its compressed block (the array's and any
            arrays sharing it).
        stored_bytes: bytes its compressed block takes in the file.
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    block: str | None
    view_of: str | None = None
    codec: str | None = None
    block_bytes: int | None = None
    stored_bytes: int | None = None

    @property
    def ratio(self) -> float | None:
        """``block_bytes / stored_bytes`` of a compressed block, else None."""
        if self.block_bytes is None or not self.stored_bytes:
            return None
        return self.block_bytes / self.stored_bytes


@dataclass(frozen=True)
class CheckpointInfo:
    """What :func:`namedschema.inspect` found in a checkpoint's header; ``str()`` is a tree.

    Attributes:
        path: the file inspected.
        format_version: the file's format version, ``"1.0"``.
        file_size: size of the file in bytes.
        data_bytes: bytes of all blocks (what loading reads).
        needs_pickle: whether ``load`` needs ``allow_pickle=True``.
        pickle_reason: the first object that is not data, or None.
        fields: a :class:`FieldInfo` per stored array.
        checkpoint_id: the file's random id.
        tree: the structure as indented text.
        last_save: a :class:`~namedschema.checkpoint.header.SaveRecord`, what
            the save that wrote the current state wrote: ``kind`` (``"full"``
            or ``"incremental"``), ``bytes_written``, ``ranges``. Files from
            plain saves carry no record: they were written in full.
        metadata: the ``str -> str`` pairs given to ``save(..., metadata=)``
            (plain data: reading them loads nothing).
        stored_bytes: bytes the blocks take in the file: ``data_bytes``
            unless the file is compressed (``save(..., compression=)``).
    """

    path: str
    format_version: str
    file_size: int
    data_bytes: int
    needs_pickle: bool
    pickle_reason: str | None
    fields: tuple[FieldInfo, ...]
    checkpoint_id: str
    tree: str
    last_save: SaveRecord | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    stored_bytes: int | None = None

    @property
    def compressed(self) -> bool:
        """Whether any block is stored compressed."""
        return any(f.codec is not None for f in self.fields)

    def __str__(self) -> str:
        return self.text()

    def text(self, *, full: bool = False) -> str:
        """The description ``str()`` gives; generator states and long tuples of numbers
        take one line each unless ``full`` (``namedschema inspect --full``)."""
        # Every string from the file is escaped (the tree's lines already are):
        # control characters must not reach a terminal.
        lines = [f"{printable(self.path)}: namedschema checkpoint, format "
                 f"{printable(self.format_version)}, {len(self.fields)} arrays, "
                 f"{_human(self.data_bytes)} of data, file {_human(self.file_size)}"
                 + (_stored_text(self.data_bytes, self.stored_bytes) if self.compressed
                    else "")]
        if self.needs_pickle:
            lines.append(f"needs allow_pickle=True: {printable(self.pickle_reason)}")
        lines.append(printable(_last_save_line(self.last_save, self.data_bytes)))
        tree, folded = (self.tree, 0) if full else fold(self.tree)
        lines.append(printable(tree, keep_newlines=True))
        if folded:
            lines.append(f"({folded:,} lines of generator states and long tuples folded; "
                         "namedschema inspect --full shows them)")
        return "\n".join(lines)


def describe(report, *, full: bool = False) -> str:
    """The text ``namedschema inspect`` prints for a ``namedschema.inspect`` result.

    Adds whether loading needs ``allow_pickle`` (decided by the report's
    ``needs_pickle``, never by searching text a file could forge). Control
    characters from the file are escaped, so the output cannot rewrite the
    terminal. Generator states and long tuples take one line each unless
    ``full``.
    """
    shown = report.text(full=full) if isinstance(report, CheckpointInfo) else str(report)
    text = printable(shown, keep_newlines=True)
    needs_pickle = getattr(report, "needs_pickle", None)
    if needs_pickle is False or (
            needs_pickle and not text.partition("\n")[2].startswith("needs allow_pickle")):
        text += ("\nloading needs allow_pickle=True: "
                 + ("yes (the file holds pickled objects)" if needs_pickle else "no"))
    return text


def _last_save_line(record: SaveRecord | None, data_bytes: int) -> str:
    if record is None:
        return f"last save: full, wrote all {_human(data_bytes)}"
    share = record.bytes_written / max(record.data_bytes, 1)
    return (f"last save: {record.kind}, wrote {_human(record.bytes_written)} of "
            f"{_human(record.data_bytes)} ({share:.2%}) in {record.ranges} "
            + ("range" if record.ranges == 1 else "ranges"))


def _human(n: float) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            break
    return f"{n:.1f} {unit}"


def _stored_text(raw: int, stored: int | None) -> str:
    if stored is None:
        return ""
    return f", compressed to {_human(stored)} ({raw / max(stored, 1):.1f}x)"


def _array_line(info: FieldInfo) -> str:
    text = f"{info.dtype} {info.shape} {_human(info.nbytes)}"
    if info.view_of is not None:
        return f"{text}, view of {info.view_of}"
    if info.codec is not None and info.block_bytes is not None:
        shared = "" if info.block_bytes == info.nbytes else f" (block of {_human(info.block_bytes)})"
        text += (f", {info.codec}{shared} {_human(info.stored_bytes or 0)} stored, "
                 f"{info.ratio:.1f}x")
    return text


def _view_of(arrays) -> list[Any]:
    """For each array, the path of the first earlier one it overlaps in its block."""
    spans_by_block: dict[str, Any] = {}
    result = []
    for a in arrays:
        found = None
        if a.block is not None and a.nbytes:
            lo = hi = a.offset
            for n, s in zip(a.shape, a.strides, strict=True):
                lo, hi = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
            hi += np.dtype(a.dtype).itemsize
            spans = spans_by_block.setdefault(a.block, [])
            found = next((path for slo, shi, path in spans[:1000] if lo < shi and slo < hi),
                         None)
            spans.append((lo, hi, a.path))
        result.append(found)
    return result


def inspect(path: str | os.PathLike[str]) -> CheckpointInfo:
    """Describe a checkpoint from its header, without reading array data.

    Args:
        path: the checkpoint file.

    Returns:
        A :class:`~namedschema.checkpoint.CheckpointInfo`; ``print`` it for a tree of the structure
        with every field's dtype, shape and size.

    Raises:
        FormatError: the file is not a valid checkpoint header.

    >>> import numpy as np, tempfile, os, namedschema
    >>> P = namedschema.NamedTupleSchema('P', 'pos vel')
    >>> path = os.path.join(tempfile.mkdtemp(), 'p.nsb')
    >>> namedschema.save(P(np.zeros((3, 2), np.float32), np.ones(3)), path)
    >>> info = namedschema.inspect(path)
    >>> info.needs_pickle, [f.path for f in info.fields]
    (False, ['P.pos', 'P.vel'])
    >>> print(info.tree)
    P (NamedTupleSchema)
      pos: float32 (3, 2) 24 B
      vel: float64 (3,) 24 B
    """
    name = os.fspath(path)
    written(name)   # this process's background save of it, if one is running
    with file_errors(name):
        return _inspect(name)


def mappable(path: str | os.PathLike[str],
             mode: Literal["r", "r+", "c"] = "r") -> Literal["r", "r+", "c"] | None:
    """``mode``, or None when the checkpoint at ``path`` has compressed blocks.

    For the readers of whole checkpoints (resume, restore) that map a file to
    copy out of it: a compressed file cannot be mapped, so it is read (and
    decompressed) instead. ``FormatError`` if the header is not valid.
    """
    return None if inspect(path).compressed else mode


def _inspect(name: str) -> CheckpointInfo:
    with open_checkpoint(name) as f:
        header = read_header(f, name, os.fstat(f.fileno()).st_size)
    desc = header.description
    none: tuple[str | None, int | None, int | None] = (None, None, None)
    tables = [none if b.table is None else (b.table.codec, b.nbytes, b.table.stored)
              for b in desc.blocks]
    fields = tuple(
        FieldInfo(a.path, a.shape,
                  f"torch.{a.torch}" if a.torch else np.dtype(a.dtype).name, a.nbytes,
                  None if a.block is None else desc.blocks[a.block].tensor, view,
                  *(none if a.block is None else tables[a.block]))
        for a, view in zip(desc.arrays, _view_of(desc.arrays), strict=True))
    if desc.pickle is not None:
        lines = ["<pickled object graph>"]
        lines.extend(f"  {printable(fi.path)}: {_array_line(fi)}" for fi in fields)
    else:
        describer = Describer(name, desc.schemas, desc.arrays,
                              [_array_line(fi) for fi in fields])
        describer.describe(desc.structure)
        lines = describer.lines
    return CheckpointInfo(
        path=name, format_version=header.version, file_size=header.file_size,
        data_bytes=header.data_bytes, needs_pickle=desc.pickle is not None,
        pickle_reason=None if desc.pickle is None else desc.pickle.reason,
        fields=fields, checkpoint_id=desc.checkpoint_id, tree="\n".join(lines),
        last_save=desc.saved, metadata=dict(desc.metadata),
        stored_bytes=sum(b.stored for b in desc.blocks))
