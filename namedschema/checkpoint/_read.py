"""Reading a checkpoint: opening a file, ``load``, ``inspect`` and ``verify``."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, cast, overload

import numpy as np

from .._core.instance import printable
from ..errors import (
    FormatError,
    MissingClassError,
    MissingModuleError,
    SchemaEvolutionError,
)
from . import _graph
from ._graph import Decoder, Describer, fold, make_arrays
from ._header import ArrayEntry, Header, SaveRecord, check_metadata_argument, fail, read_header
from ._save import reading, recover
from ._storage import (
    MMAP_ACCESS,
    Progress,
    map_blocks,
    read_blocks,
)
from ._storage import (
    verify as verify_blocks,
)
from ._storage import (
    verify as verify_blocks_crc,
)
from ._write import file_kind, written

if TYPE_CHECKING:
    from types import ModuleType

    from ..evolution import CastingChoice, ExtraChoice, SchemaSpec, UpgradeReport

__all__ = ["verify"]


def _codec(header: Header) -> ModuleType | None:
    """The compression module when ``header``'s file has compressed blocks, else None:
    files without compression never import the codec (a plain load's import count)."""
    if not any(b.table is not None for b in header.blocks):
        return None
    from . import _compression
    return _compression


# ---------------------------------------- opening
#
# Opening a path as an untrusted checkpoint, and the one place read failures become FormatError.
#
# open_checkpoint   open a regular file for reading (or ``r+``) without ever blocking:
#                   FIFOs, devices, sockets and directories are refused
# file_errors       ``with file_errors(name):`` turns any failure of reading the
#                   file into a FormatError naming it (OSError and MemoryError excepted)
#
# ``load`` and ``inspect`` both open through ``open_checkpoint`` and run inside
# ``file_errors``, so they refuse the same files in the same words.

def open_checkpoint(name: str, writable: bool = False) -> BinaryIO:
    """The unbuffered file ``name``, checked to be a regular file before any read.

    Opened with ``O_NONBLOCK`` (so a FIFO with no writer cannot block the
    open), checked with ``fstat`` on the open descriptor (no race with a
    rename), then switched back to blocking reads.
    """
    flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_NONBLOCK \
        | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(name, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            fail(name, f"is not a regular file ({file_kind(mode)}); checkpoints are "
                 "regular files")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return open(fd, "r+b" if writable else "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def file_errors(name: str) -> Iterator[None]:
    """Re-raise every failure inside as a FormatError naming ``name``.

    Header checks raise FormatError themselves; this catches what they cannot
    foresee (an exception from numpy, torch or a schema built from the file)
    so that no other exception type escapes ``load`` or ``inspect`` for a bad
    file. OSError (the file cannot be read), MemoryError and the errors of
    this process rather than the file (a module or class missing when
    unpickling, a codec's package missing: ModuleNotFoundError) pass unchanged.
    """
    try:
        yield
    except (FormatError, OSError, MemoryError, MissingModuleError, MissingClassError,
            ModuleNotFoundError):
        raise
    except RecursionError as exc:
        fail(name, "structure is nested too deeply", exc)
    except Exception as exc:  # the point: every failure of a bad file
        fail(name, f"cannot be loaded: {type(exc).__name__}: {exc}", exc)


# ---------------------------------------- loader
#
# ``load``: read and check the header, read or map the blocks, rebuild the graph.

_Path = str | os.PathLike[str] | BinaryIO
_MmapMode = Literal["r", "r+", "c"] | None


@overload
def load(path: _Path, *, mmap_mode: _MmapMode = ..., allow_pickle: bool = ...,
         verify: bool = ..., schemas: SchemaSpec | None = ..., extra: ExtraChoice = ...,
         casting: CastingChoice = ..., defaults: Mapping[str, Any] | None = ...,
         report: Literal[False] = ..., expect_metadata: Mapping[str, str] | None = ...,
         progress: bool = ...) -> Any: ...
@overload
def load(path: _Path, *, mmap_mode: _MmapMode = ..., allow_pickle: bool = ...,
         verify: bool = ..., schemas: SchemaSpec, extra: ExtraChoice = ...,
         casting: CastingChoice = ..., defaults: Mapping[str, Any] | None = ...,
         report: Literal[True], expect_metadata: Mapping[str, str] | None = ...,
         progress: bool = ...) -> tuple[Any, UpgradeReport]: ...
@overload
def load(path: _Path, *, mmap_mode: _MmapMode = ..., allow_pickle: bool = ...,
         verify: bool = ..., schemas: SchemaSpec | None = ..., extra: ExtraChoice = ...,
         casting: CastingChoice = ..., defaults: Mapping[str, Any] | None = ...,
         report: bool, expect_metadata: Mapping[str, str] | None = ...,
         progress: bool = ...) -> Any: ...


def load(path: _Path, *, mmap_mode: _MmapMode = None, allow_pickle: bool = False,
         verify: bool = False, schemas: SchemaSpec | None = None,
         extra: ExtraChoice = "error", casting: CastingChoice = "no",
         defaults: Mapping[str, Any] | None = None, report: bool = False,
         expect_metadata: Mapping[str, str] | None = None, progress: bool = False) -> Any:
    """Load a checkpoint written by :func:`save`.

    Arrays that were views of one another come back as views of one block.
    With ``mmap_mode`` the blocks are memory-mapped instead of read, so
    opening takes milliseconds whatever the size and reads nothing until
    used; the arrays stay valid after the file is replaced by a new save.

    Args:
        path: the checkpoint file, or a binary file object that is
            seekable (``io.BytesIO``, ``open(..., "rb")``) and holds one
            checkpoint from its current position to its end.
        mmap_mode: None to read everything into memory, or as in ``np.load``:
            ``'r'`` read-only, ``'r+'`` writes go to the file, ``'c'``
            copy-on-write (writes stay in memory). Torch tensors cannot be
            read-only, so with ``'r'`` their blocks are mapped copy-on-write.
        allow_pickle: allow files whose structure was pickled. Unpickling
            runs code chosen by whoever wrote the file: only allow it for
            files you trust.
        verify: check every block's CRC-32 (reads all data, even when mapped).
        schemas: today's schemas (a module, classes, a mapping of saved
            typename to schema, or a list of these): every saved schema
            instance is then rebuilt as an instance of its current schema by
            the rules of :func:`namedschema.upgrade` (docs: "Schema
            evolution"). With ``mmap_mode`` the unchanged fields stay mapped
            and only new (and cast) fields are made in memory.
        extra, casting, defaults, report: as for :func:`namedschema.upgrade`;
            used only with ``schemas``.
        expect_metadata: a mapping of ``str`` to ``str`` that the file's
            metadata (``save(..., metadata=)``) must hold; checked on the
            header, before any data is read or anything unpickled. Pass it
            with ``allow_pickle=True`` so that only files of the kind you
            wrote are ever unpickled.
        progress: show a progress bar on stderr (counting the bytes read, or
            checked with ``mmap_mode`` and ``verify``), as ``save`` does.

    Returns:
        The saved object graph; with ``report=True`` (and ``schemas``)
        ``(graph, UpgradeReport)``.

    Raises:
        FormatError: (a ValueError) the file is not a checkpoint, is
            truncated, corrupt or of an unknown version, or it needs pickle and
            ``allow_pickle`` is false (the message says so; nothing was unpickled);
            or the file's metadata lack a pair of ``expect_metadata`` (its
            ``metadata`` and ``expected`` are then set; nothing was loaded).
        OSError: the file cannot be read.
        TypeError: ``path`` is neither a path nor a seekable binary file
            object, or a file object with ``mmap_mode``.
        SchemaEvolutionError: with ``schemas``, the saved data does not map
            onto today's schemas (a missing or extra field, a dtype or shape
            that differs), or the new fields, whose leading shape
            comes from the file, would take more bytes than the file's size
            (at least 64 MiB; ``SizeLimitError``); nothing is returned.
    """
    expected = check_metadata_argument(expect_metadata, "load: expect_metadata")
    if schemas is None:
        if report:
            raise TypeError("load: report=True needs schemas=")
        return _load(_source(path, mmap_mode), mmap_mode, allow_pickle, verify, expected,
                     progress)
    from ..evolution import upgrader  # only here: plain loads need nothing of evolution

    evolve = upgrader(schemas, extra=extra, casting=casting, defaults=defaults)
    source = _source(path, mmap_mode)
    graph = _load(source, mmap_mode, allow_pickle, verify, expected, progress)
    # New fields take their leading shape from the file: bounded by what it holds.
    size = source.size if isinstance(source, _Window) else os.stat(source).st_size
    try:
        return evolve(graph, report=report, fill_budget=max(MIN_FILL_BUDGET, size))
    except SchemaEvolutionError as exc:
        exc.add_note(f"while loading {_shown(source)!r} into today's schemas")
        raise


#: New fields made by ``load(schemas=)`` may take the file's size in bytes, or this.
MIN_FILL_BUDGET = 64 * 2**20


def _source(path: Any, mmap_mode: str | None) -> Any:
    """``path`` as a str, or a window onto the seekable binary file object it is."""
    if mmap_mode is not None and mmap_mode not in MMAP_ACCESS:
        raise ValueError(f"mmap_mode must be None, 'r', 'r+' or 'c', got {mmap_mode!r}")
    if isinstance(path, str | bytes | os.PathLike):
        name = os.fsdecode(os.fspath(path))
        written(name)   # this process's background save of it, if one is running
        return name
    if not callable(getattr(path, "read", None)):
        raise TypeError(f"load: path must be a str, an os.PathLike or a binary file "
                        f"object, not {type(path).__name__}")
    if isinstance(path, io.TextIOBase):
        raise TypeError("load: the file object is open in text mode; open it in binary "
                        "mode ('rb') or pass a path")
    seekable = getattr(path, "seekable", None)
    if not callable(seekable) or not seekable():
        raise TypeError(f"load: a {type(path).__name__} that cannot seek; a checkpoint "
                        "is read out of order: read it into io.BytesIO first, or pass a path")
    if mmap_mode is not None:
        raise TypeError("load: mmap_mode needs a path; a file object can only be read")
    return _Window(path)


def _shown(source: Any) -> str:
    return source.shown if isinstance(source, _Window) else source


class _Window:
    """A binary file object seen from its current position, as a checkpoint file is."""

    def __init__(self, f: BinaryIO):
        self.f, self.start = f, f.tell()
        self.size = f.seek(0, os.SEEK_END) - self.start
        f.seek(self.start)
        self.shown = f"<{type(f).__name__} {getattr(f, 'name', 'object')}>"

    def read(self, n: int) -> bytes:
        return self.f.read(n)

    def readinto(self, view: Any) -> int:
        into = getattr(self.f, "readinto", None)
        if callable(into):
            got: int = into(view)
            return got
        data = self.f.read(len(view))
        view[:len(data)] = data
        return len(data)

    def seek(self, position: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            return self.f.seek(self.start + position) - self.start
        return self.f.seek(position, whence) - self.start


def _load(source: Any, mmap_mode: str | None, allow_pickle: bool, check: bool,
          expected: dict[str, str], progress: bool = False) -> Any:
    if isinstance(source, _Window):
        name = source.shown
        with file_errors(name):
            window = cast(BinaryIO, source)  # reads and seeks as a file does
            header = read_header(window, name, source.size)
            _refuse(header, name, allow_pickle, expected)
            bar = _bar(header, "loading", progress)
            blocks_data = read_blocks(window, header, check, bar)
            codec = _codec(header)
            if codec is not None:
                codec.read_blocks(window, header, blocks_data, check, bar)
        source.seek(source.size)  # after the checkpoint, as np.load leaves a file
        return _rebuild(header, blocks_data, name)
    name = source
    recover(name)  # an incremental save that was interrupted is finished first
    with file_errors(name), open_checkpoint(name, writable=mmap_mode == "r+") as f, \
            reading(f, name):
        header = read_header(f, name, os.fstat(f.fileno()).st_size)
        _refuse(header, name, allow_pickle, expected)
        if mmap_mode is None:
            bar = _bar(header, "loading", progress)
            blocks_data = read_blocks(f, header, check, bar)
            codec = _codec(header)
            if codec is not None:
                codec.read_blocks(f, header, blocks_data, check, bar)
        else:
            blocks_data = map_blocks(f, header, mmap_mode)
            if check:
                verify_blocks_crc(header, blocks_data, _bar(header, "verifying", progress))
    return _rebuild(header, blocks_data, name)


def load_for_restore(path: str | os.PathLike[str], *, allow_pickle: bool = False,
                     verify: bool = False, expect_metadata: Mapping[str, str] | None = None,
                     defer: Callable[[str], bool] = lambda path: False) -> Any:
    """A checkpoint loaded to be copied into a run's own objects (a restore's load).

    Raw blocks are mapped read-only, as with ``mmap_mode="r"``: copies out of them
    (``_storage.copy_from_map``) read the file straight into their targets. A large
    compressed array (``_compression.deferrable``) whose path ``defer`` accepts comes
    back as a ``_compression.Deferred``, which ``copy_from_map`` decompresses straight
    into its target, chunk by chunk: restoring a compressed replay buffer costs no
    second copy of it. Other compressed blocks are decompressed into memory.

    Before this returns, what can be checked without writing anywhere is: with
    ``verify``, every raw block's CRC-32, every compressed block read in memory, and
    every stored chunk of a deferred block (its CRC-32, and the size a compressed
    frame declares); without, still each deferred block's compressed chunks (as every
    load of a compressed chunk checks them). So a file damaged since it was written is
    refused before the restore changes anything, as an uncompressed one is. The one
    check left for the copy is a deferred block's raw CRC-32 (with ``verify``), which
    only a file written wrong fails: the copy then raises, saying its target was
    partly overwritten.
    """
    name = os.fsdecode(os.fspath(path))
    written(name)
    expected = check_metadata_argument(expect_metadata, "load: expect_metadata")
    recover(name)
    with file_errors(name), open_checkpoint(name) as f, reading(f, name):
        header = read_header(f, name, os.fstat(f.fileno()).st_size)
        _refuse(header, name, allow_pickle, expected)
        codec = _codec(header)
        if codec is None:
            blocks_data = map_blocks(f, header, "r")
            if verify:
                verify_blocks_crc(header, blocks_data, None)
            return _rebuild(header, blocks_data, name)
        blocks_data = map_blocks(f, header, "r", stored=True)
        if verify:
            verify_blocks_crc(header, blocks_data, None)
        candidates = codec.deferrable(header)
        deferred: dict[int, Any] = {}
        for index, b in enumerate(header.blocks):
            if b.table is None:
                continue
            entry = candidates.get(index)
            if entry is not None and defer(entry.path):
                codec.check_stored(blocks_data[index], header, index, verify)
                deferred[index] = codec.Deferred(blocks_data[index], header, index, entry,
                                                 verify)
            else:
                blocks_data[index] = codec.read_block(f, header, index, verify)
    return _rebuild(header, blocks_data, name, deferred)


def _bar(header: Any, label: str, enabled: bool) -> Progress:
    return Progress(sum(int(b.nbytes) for b in header.blocks), label, enabled)


def _refuse(header: Any, name: str, allow_pickle: bool, expected: dict[str, str]) -> None:
    """Refuse, on the header alone, a file of another kind, or pickled without permission."""
    found = header.description.metadata
    wrong = {k: v for k, v in expected.items() if found.get(k) != v}
    if wrong:
        have = {k: found.get(k) for k in wrong}
        raise FormatError(
            printable(f"{name!r} is a namedschema checkpoint, but not of the kind expected: "
                      f"its metadata have {have!r:.300}, expected {wrong!r:.300}; nothing "
                      "was loaded"), found, expected)
    if header.description.pickle is not None and not allow_pickle:
        reason = printable(header.description.pickle.reason[:200])
        raise FormatError(
            printable(f"{name!r} holds pickled objects ({reason} is not plain "
                      "data); loading it runs code chosen by whoever wrote the "
                      "file. Pass allow_pickle=True only if you trust it."))


def _rebuild(header: Any, blocks_data: list[np.ndarray], name: str,
             deferred: dict[int, Any] | None = None) -> Any:
    with file_errors(name):
        arrays = make_arrays(header.arrays, blocks_data, name, deferred)
        if header.description.pickle is not None:
            try:
                return _graph.loads(blocks_data[header.description.pickle.block], arrays)
            except (MissingModuleError, MissingClassError) as exc:  # this process, not the file
                exc.file = name
                exc.add_note(f"while loading {name!r}")
                raise
            except Exception as exc:  # anything a bad pickle raises
                fail(name, f"pickled structure cannot be loaded: {type(exc).__name__}: "
                     f"{exc}", exc)
        decoder = Decoder(name, header.description.schemas, header.arrays, arrays)
        return decoder.decode(header.description.structure)


# ---------------------------------------- inspector
#
# ``inspect``: describe a checkpoint from its header alone, without reading array data.

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
        last_save: a :class:`~namedschema.checkpoint._header.SaveRecord`, what
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


def describe(report: object, *, full: bool = False) -> str:
    """The text ``namedschema inspect`` prints for a ``namedschema.inspect`` result
    (a ``CheckpointInfo``; any other object is shown as its ``str``).

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


def _view_of(arrays: Iterable[ArrayEntry]) -> list[str | None]:
    """For each array, the path of the first earlier one it overlaps in its block."""
    spans_by_block: dict[int, list[tuple[int, int, str]]] = {}
    result: list[str | None] = []
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


# ---------------------------------------- verifier
#
# Check a whole checkpoint against its checksums without loading (or unpickling) it.
#
# ``inspect`` reads only the header, so a flipped data byte goes unnoticed there; ``load(...,
# verify=True)`` checks every block but also builds the object (and unpickles, for files that
# need it). ``verify`` reads every block through a read-only map and checks each CRC-32, and
# never unpickles: it is safe on untrusted files. ``namedschema verify FILE`` runs it.
#
# verify   every block's checksum; the file's description as ``inspect`` returns it

def verify(path: str | os.PathLike[str], *, progress: bool = False) -> CheckpointInfo:
    """Check every data block of the checkpoint at ``path`` against its stored CRC-32.

    A compressed block is checked chunk by chunk: each chunk's CRC-32, what it
    decompresses to (its size) and the CRC-32 of the whole decompressed block.

    Like :func:`namedschema.load`, it first finishes an incremental save that was
    interrupted (its journal), then checks the file as ``load`` would read it.

    Args:
        path: the checkpoint file.
        progress: show a progress bar on stderr (counting the bytes checked).

    Returns:
        The file's :class:`CheckpointInfo` (as :func:`namedschema.inspect` gives).

    Raises:
        FormatError: the file is not a checkpoint, is truncated, or a block's checksum
            does not match (the message names the first field of that block).
        OSError: the file cannot be read.

    >>> import numpy as np, tempfile, os, namedschema
    >>> from namedschema.checkpoint import verify
    >>> path = os.path.join(tempfile.mkdtemp(), 'a.nsb')
    >>> namedschema.save({'x': np.arange(1000)}, path)
    >>> verify(path).data_bytes
    8000
    >>> with open(path, 'r+b') as f:
    ...     _ = f.seek(-3, os.SEEK_END); _ = f.write(b'!')
    >>> verify(path)
    Traceback (most recent call last):
        ...
    namedschema.errors.FormatError: '...a.nsb': field 'x' is corrupt: checksum ... does not match the stored ...
    """
    name = os.fspath(path)
    written(name)   # this process's background save of it, if one is running
    recover(name)
    with file_errors(name), open_checkpoint(name) as f, reading(f, name):
        header = read_header(f, name, os.fstat(f.fileno()).st_size)
        blocks = map_blocks(f, header, "r", stored=True)
        bar = Progress(sum(int(b.nbytes) for b in header.blocks), "verifying", progress)
        verify_blocks(header, blocks, bar)
        codec = _codec(header)
        if codec is not None:
            codec.verify_blocks(header, blocks, bar)
        del blocks
    return inspect(name)
