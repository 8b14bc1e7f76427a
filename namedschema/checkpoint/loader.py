"""``load``: read and check the header, read or map the blocks, rebuild the graph."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, cast, overload

from .._core.instance import printable
from ..errors import (
    MissingClassError,
    MissingModuleError,
    SchemaEvolutionError,
    UnexpectedKindError,
    UnsafeLoadError,
)
from . import compression, pickled
from .arrays import make_arrays
from .blocks import MMAP_ACCESS, Progress, map_blocks, read_blocks, verify
from .blocks import verify as verify_blocks_crc
from .header import fail, read_header
from .inflight import reading, recover, written
from .metadata import check_metadata_argument
from .nodes import Decoder
from .opening import file_errors, open_checkpoint

if TYPE_CHECKING:  # evolution loads only with ``schemas=``
    from ..evolution import CastingChoice, ExtraChoice, SchemaSpec, UpgradeReport

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
            truncated, corrupt or of an unknown version.
        UnsafeLoadError: the file needs pickle and ``allow_pickle`` is false.
        UnexpectedKindError: (a FormatError) the file's metadata lack a pair
            of ``expect_metadata``; nothing was loaded.
        OSError: the file cannot be read.
        TypeError: ``path`` is neither a path nor a seekable binary file
            object, or a file object with ``mmap_mode``.
        SchemaEvolutionError: with ``schemas``, the saved data does not map
            onto today's schemas (a missing or extra field, a dtype or shape
            that differs), or the new fields, whose leading shape
            comes from the file, would take more bytes than the file's size
            (at least 64 MiB; ``FillLimitError``); nothing is returned.
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

    def __init__(self, f: Any):
        self.f, self.start = f, f.tell()
        self.size = f.seek(0, os.SEEK_END) - self.start
        f.seek(self.start)
        self.shown = f"<{type(f).__name__} {getattr(f, 'name', 'object')}>"

    def read(self, n: int) -> bytes:
        return self.f.read(n)

    def readinto(self, view: Any) -> int:
        into = getattr(self.f, "readinto", None)
        if callable(into):
            return into(view)
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
            compression.read_blocks(window, header, blocks_data, check, bar)
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
            compression.read_blocks(f, header, blocks_data, check, bar)
        else:
            blocks_data = map_blocks(f, header, mmap_mode)
            if check:
                verify(header, blocks_data, _bar(header, "verifying", progress))
    return _rebuild(header, blocks_data, name)


def load_for_restore(path: str | os.PathLike[str], *, allow_pickle: bool = False,
                     verify: bool = False, expect_metadata: Mapping[str, str] | None = None,
                     defer: Callable[[str], bool] = lambda path: False) -> Any:
    """A checkpoint loaded to be copied into a run's own objects (a restore's load).

    Raw blocks are mapped read-only, as with ``mmap_mode="r"``: copies out of them
    (``mapped.copy_from_map``) read the file straight into their targets. A large
    compressed array (``compression.deferrable``) whose path ``defer`` accepts comes
    back as a ``compression.Deferred``, which ``copy_from_map`` decompresses straight
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
        if not any(b.table is not None for b in header.blocks):
            blocks_data = map_blocks(f, header, "r")
            if verify:
                verify_blocks_crc(header, blocks_data, None)
            return _rebuild(header, blocks_data, name)
        blocks_data = map_blocks(f, header, "r", stored=True)
        if verify:
            verify_blocks_crc(header, blocks_data, None)
        candidates = compression.deferrable(header)
        deferred: dict[int, Any] = {}
        for index, b in enumerate(header.blocks):
            if b.table is None:
                continue
            entry = candidates.get(index)
            if entry is not None and defer(entry.path):
                compression.check_stored(blocks_data[index], header, index, verify)
                deferred[index] = compression.Deferred(blocks_data[index], header, index,
                                                       entry, verify)
            else:
                blocks_data[index] = compression.read_block(f, header, index, verify)
    return _rebuild(header, blocks_data, name, deferred)


def _bar(header: Any, label: str, enabled: bool) -> Progress:
    return Progress(sum(int(b.nbytes) for b in header.blocks), label, enabled)


def _refuse(header: Any, name: str, allow_pickle: bool, expected: dict[str, str]) -> None:
    """Refuse, on the header alone, a file of another kind, or pickled without permission."""
    found = header.description.metadata
    wrong = {k: v for k, v in expected.items() if found.get(k) != v}
    if wrong:
        have = {k: found.get(k) for k in wrong}
        raise UnexpectedKindError(
            printable(f"{name!r} is a namedschema checkpoint, but not of the kind expected: "
                      f"its metadata have {have!r:.300}, expected {wrong!r:.300}; nothing "
                      "was loaded"), found, expected)
    if header.description.pickle is not None and not allow_pickle:
        reason = printable(header.description.pickle.reason[:200])
        raise UnsafeLoadError(
            printable(f"{name!r} holds pickled objects ({reason} is not plain "
                      "data); loading it runs code chosen by whoever wrote the "
                      "file. Pass allow_pickle=True only if you trust it."))


def _rebuild(header: Any, blocks_data: list, name: str,
             deferred: dict[int, Any] | None = None) -> Any:
    with file_errors(name):
        arrays = make_arrays(header.arrays, blocks_data, name, deferred)
        if header.description.pickle is not None:
            try:
                return pickled.loads(blocks_data[header.description.pickle.block], arrays)
            except (MissingModuleError, MissingClassError) as exc:  # this process, not the file
                exc.file = name
                exc.add_note(f"while loading {name!r}")
                raise
            except Exception as exc:  # anything a bad pickle raises
                fail(name, f"pickled structure cannot be loaded: {type(exc).__name__}: "
                     f"{exc}", exc)
        decoder = Decoder(name, header.description.schemas, header.arrays, arrays)
        return decoder.decode(header.description.structure)
