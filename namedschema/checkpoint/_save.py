"""``save``, and the journal check that loads share with it: the plain format's doors
to the upper floors.

``save`` checks its target, encodes the graph and lays out its blocks, then hands them
to ``_write``'s one writer (a plain save), to ``_incremental`` or to ``_background``,
importing those only when a save asks for them. ``recover`` and ``reading`` finish the
journal an interrupted incremental save left before a file is read (one ``lstat`` when
there is none). They live above ``_write`` because they import the incremental floor,
which itself writes through ``_write``: no module imports back.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

from . import _storage
from ._graph import encode_graph
from ._header import check_metadata_argument
from ._write import PLAIN, check_target, final_target, is_file, journal_path, serialized, write

if TYPE_CHECKING:
    from ._background import BackgroundSave
    from ._compression import Compression

__all__ = ["save", "recover", "reading"]

# --------------------------------------------------------------------------
# The journal of an interrupted incremental save
# --------------------------------------------------------------------------

def recover(path: str) -> None:
    """Finish (or discard) the journal an interrupted incremental save of ``path`` left.

    One ``lstat`` when there is none. Only a regular file at the journal's
    path is a journal (``_incremental.recover`` reads and settles it, and
    waits first for this process's own save of ``path`` still finishing,
    whose journal is there until it has).

    Raises:
        FormatError: there is a journal to finish but the file is not writable.
    """
    if is_file(journal_path(path)):
        from . import _incremental
        _incremental.recover(path)


@contextlib.contextmanager
def reading(f: Any, path: str) -> Iterator[None]:
    """Hold off incremental saves of the open checkpoint ``f`` while a loader reads it.

    Settles any journal first. Incremental saves lock the file exclusively
    while they change it in place, so a loader inside this block reads one
    consistent state. The lock is released on leaving the block (a map of
    the file keeps the descriptor open, so closing it would not).
    """
    locked = False
    for _ in range(3):
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
        except OSError:
            break  # file systems without locks: nothing to wait for
        locked = True
        if not is_file(journal_path(path)):
            break
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        locked = False
        recover(path)
    try:
        yield
    finally:
        if locked:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)



# ---------------------------------------- saver
#
# ``save``: check the target, encode the graph, lay out its blocks, hand them to a writer.
#
# Plain saves go to ``writer`` (``PLAIN`` layout), incremental ones to
# ``incremental``, background ones through ``background``.

_Path = str | os.PathLike[str] | io.RawIOBase | io.BufferedIOBase


@overload
def save(obj: Any, path: _Path, *, allow_pickle: bool = ..., progress: bool = ...,
         incremental: bool = ..., background: Literal[False] = ...,
         metadata: Mapping[str, str] | None = ...,
         compression: str | tuple[str, int] | None = ...) -> None: ...
@overload
def save(obj: Any, path: _Path, *, allow_pickle: bool = ..., progress: bool = ...,
         incremental: bool = ..., background: Literal[True],
         metadata: Mapping[str, str] | None = ...,
         compression: str | tuple[str, int] | None = ...) -> BackgroundSave: ...
@overload
def save(obj: Any, path: _Path, *, allow_pickle: bool = ..., progress: bool = ...,
         incremental: bool = ..., background: bool,
         metadata: Mapping[str, str] | None = ...,
         compression: str | tuple[str, int] | None = ...) -> BackgroundSave | None: ...


def save(obj: Any, path: str | os.PathLike[str] | io.RawIOBase | io.BufferedIOBase, *,
         allow_pickle: bool = False, progress: bool = False,
         incremental: bool = False, background: bool = False,
         metadata: Mapping[str, str] | None = None,
         compression: str | tuple[str, int] | None = None) -> BackgroundSave | None:
    """Save an object graph, writing every array raw (or compressed) and once, atomically.

    Arrays (numpy, and torch CPU tensors) anywhere in ``obj`` are written
    straight from their memory, one block per underlying buffer, so views of
    one array come back as views of one array. A graph of schemas, stdlib
    namedtuples, tuples, lists, str-keyed dicts, None, bool, int, float, str,
    numpy scalars and arrays is stored as data. Anything else (a ``set``, a
    lock, an object of your own class) can only be pickled: ``save`` refuses
    it unless ``allow_pickle=True``, and such a file then needs
    ``load(..., allow_pickle=True)``. The file is written to a temporary file
    in the same directory, synced and renamed over ``path``, so an existing
    file at ``path`` is never damaged. Temporary files that earlier savers of
    ``path`` left when they were killed are removed first (the rule is in the
    package documentation); those of live savers are kept.
    The new file keeps the permission bits (and, where allowed, the owner)
    of the file it replaces; when ``path`` is a symbolic link, the file it
    points to is replaced (in its own directory) and the link is kept.
    Only regular files are ever replaced: when ``path`` is a directory, a
    FIFO, a socket or a device node (``/dev/null``), ``save`` refuses before
    writing anything (also with ``incremental``).

    Args:
        obj: the object graph to save.
        path: destination file (str or path-like), or a binary file object
            open for writing (``io.BytesIO``, ``open(..., "wb")``, a socket
            file): the checkpoint is written to a temporary file first, then
            copied to it from its current position (no need to seek).
        allow_pickle: pickle the whole graph (its arrays still written raw)
            when it holds a value that is not data. False by default, so that
            a graph needing pickle fails here, in the saving process, rather
            than at load time, maybe in another process.
        progress: show a progress bar on stderr (counting the bytes written).
        incremental: if ``path`` holds a checkpoint with the same arrays
            (shapes, dtypes, views), write only what changed since, in place
            and crash-safe; otherwise write a full checkpoint laid out for
            later incremental saves. See :doc:`/incremental`.
        metadata: a few ``str -> str`` pairs stored as plain data in the
            header, readable without loading the file
            (``inspect(path).metadata``), and checked before anything is
            loaded by ``load(..., expect_metadata=)``: say there what a file
            is, so that a reader refuses a file of another kind before it
            unpickles anything.
        background: return a :class:`~namedschema.BackgroundSave`
            handle as soon as a snapshot of ``obj`` exists (a ``fork`` of this
            process: later writes to the arrays do not reach the file); the
            writing, checksums and fsync go on in a child process. Its error
            is raised by ``handle.wait()``, or else by the next save of
            ``path``, or else printed at exit. Saves of one path run in
            order: each first waits for the background save before it.
        compression: None (the default) writes every array raw, as
            ``safetensors`` readers and ``mmap_mode`` need. ``"zstd"`` (level
            1) or ``("zstd", level)`` stores every block of at least 4 KiB as
            independent zstd chunks of 4 MiB, compressed by a few threads,
            a chunk that does not shrink stored raw: replay buffers of
            frames take a small fraction of their size, random data its own
            size. Such files load fully (not with ``mmap_mode``) and need
            the ``zstandard`` package (``namedschema[zstd]``); see
            :doc:`/format`, "Compressed blocks". With ``incremental``, a
            save rewrites only the chunks that changed (:doc:`/incremental`).
            ``"auto"`` compresses only blocks of uint8, int8 and bool arrays
            (frames, masks, flags) and writes raw where ``zstandard`` is
            missing; a save with nothing to compress writes the uncompressed
            file (incrementally, if asked).

    Raises:
        NotDataError: (a TypeError) ``obj`` holds a value that is not data and
            ``allow_pickle`` is false; the message names where it is.
        TypeError: ``path`` is neither a path nor a binary file object (the
            message says so when the two arguments look swapped, as in
            ``np.save(path, arr)``), or a file object with ``incremental``
            or ``background``.
        SaveError: (an OSError) ``path`` is a directory, FIFO,
            socket or device; nothing was written.
        StructureMismatchError: a tensor is not on the CPU or has a dtype
            numpy cannot view.
        OSError: the file cannot be written (the old file stays intact); the
            error names ``path`` as given, not the temporary file.
        SaveError: (an OSError) the previous background save of
            ``path`` failed and its error was not raised yet (by ``wait()``),
            or its writer process died.
        ValueError: ``compression`` is not one of the values above.
        ModuleNotFoundError: ``compression`` needs the ``zstandard`` package
            (``pip install 'namedschema[zstd]'``); nothing was written.

    >>> import numpy as np, tempfile, os, namedschema
    >>> Step = namedschema.NamedArrayTupleSchema('Step', 'obs reward')
    >>> buf = Step(np.zeros((8, 4), np.uint8), np.arange(8.0))
    >>> path = os.path.join(tempfile.mkdtemp(), 'buf.nsb')
    >>> namedschema.save({'buffer': buf, 'recent': buf.obs[-2:]}, path)
    >>> back = namedschema.load(path)
    >>> float(back['buffer'].reward[3]), np.shares_memory(back['recent'], back['buffer'].obs)
    (3.0, True)
    """
    began = time.perf_counter()
    target = _target(obj, path, incremental or background)
    meta = check_metadata_argument(metadata)
    codec = None
    if compression is not None:
        from . import _compression  # only saves that compress load the codec
        codec = _compression.compression_argument(compression)
    if not isinstance(target, str):
        _save_to_file_object(obj, target, allow_pickle, progress, meta, codec)
        return None
    check_target(final_target(target), target)  # before encoding or writing anything
    # The incremental and background saves are loaded only by the saves that use them.
    if incremental:
        from . import _incremental
    if background:
        from . import _background
    with serialized(target):
        graph = encode_graph(obj, target, allow_pickle, meta)
        plan = _storage.plan(graph.encoder.arrays.entries, graph.pickle_bytes)
        codec = _nothing_to_compress(codec, plan)
        if not background:
            if incremental:
                _incremental.save_encoded(graph, plan, target, progress, codec)
            else:
                write(graph, plan, target, PLAIN, progress=progress,
                             compression=codec)
            return None
        return _background.save_in_background(graph, plan, target, progress, incremental,
                                              began, codec)


def _target(obj: Any, path: Any, in_place: bool) -> Any:
    """``path`` as a str, or the binary file object it is; TypeError with a hint otherwise."""
    if isinstance(path, str | os.PathLike):
        name = os.fspath(path)
        return os.fsdecode(name) if isinstance(name, bytes) else name
    if isinstance(path, bytes):
        return os.fsdecode(path)
    if callable(getattr(path, "write", None)):
        if isinstance(path, io.TextIOBase):
            raise TypeError("save: the file object is open in text mode; open it in "
                            "binary mode ('wb') or pass a path")
        if in_place:
            raise TypeError("save: incremental=True (which updates a file in place) or "
                            "background=True needs a path, not a "
                            f"{type(path).__name__}")
        return path
    if isinstance(obj, str | bytes | os.PathLike):
        raise TypeError(f"save(obj, path) takes the object first and the path second; got "
                        f"the path {os.fspath(obj)!r} as obj and a {type(path).__name__} "
                        "as path: did you swap them? (np.save takes the path first)")
    raise TypeError(f"save: path must be a str, an os.PathLike or a binary file object, "
                    f"not {type(path).__name__}")


def _save_to_file_object(obj: Any, out: Any, allow_pickle: bool, progress: bool,
                         metadata: dict[str, str], codec: Compression | None) -> None:
    """Write the checkpoint to a private temporary file, then copy it to ``out``."""
    shown = f"<{type(out).__name__} {getattr(out, 'name', 'object')}>"
    with tempfile.TemporaryDirectory(prefix="namedschema-save-") as directory:
        name = os.path.join(directory, "checkpoint.nsb")
        _write(obj, name, shown, allow_pickle, progress, metadata, codec)
        with open(name, "rb") as f:
            shutil.copyfileobj(f, out, 1 << 20)
    flush = getattr(out, "flush", None)
    if callable(flush):
        flush()


def _write(obj: Any, path: str, shown: str, allow_pickle: bool, progress: bool,
           metadata: dict[str, str], codec: Compression | None = None) -> None:
    """A full save of ``obj`` to the file ``path`` (``shown`` names it in messages)."""
    graph = encode_graph(obj, shown, allow_pickle, metadata)
    plan = _storage.plan(graph.encoder.arrays.entries, graph.pickle_bytes)
    codec = _nothing_to_compress(codec, plan)
    write(graph, plan, path, PLAIN, shown=shown, progress=progress,
                 compression=codec)


def _nothing_to_compress(codec: Compression | None, plan: _storage.Layout) -> Compression | None:
    """None when ``codec`` is a policy (``"auto"``) that compresses no block of ``plan``
    (a state of floats): the file is then the uncompressed one, incremental if asked."""
    if codec is None or codec.dtypes is None:
        return codec
    from . import _compression
    return codec if any(_compression.compressed_blocks(plan.blocks, plan.arrays, codec)) else None
