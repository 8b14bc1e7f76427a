"""Compressed blocks: codecs, chunks and their tables.

Which blocks are compressed, how they are cut into chunks and written with a chunk
table, and how chunks are read back, checked and decompressed (in place for restores).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from ..errors import FormatError
from ._graph import aligned_empty
from ._header import (
    ALIGN,
    CODECS,
    COMPRESSED_FEATURE,
    MAX_CHUNK,
    MIN_CHUNK,
    ArrayEntry,
    BlockEntry,
    ChunkTable,
    Header,
    crc_concat,
    fail,
)
from ._storage import EarlySync, MemorySpan, Progress, Source, submit_or_run, write_all

__all__ = ["Compression", "compression_argument", "compressed_blocks", "write_block", "read_block",
           "verify_block", "compress_chunk", "chunk_pieces", "workers", "CHUNK", "FEATURE", "AUTO",
           "AUTO_DTYPES", "Deferred", "deferrable", "check_stored", "decompress_into"]


# ---------------------------------------- compression
#
# Compressed blocks: the codec argument, chunks compressed by a thread pool, and
# chunks decompressed straight into the memory they belong to.
#
# A compressed block is stored as independent chunks of ``Compression.chunk``
# raw bytes (the last one may be shorter), each either one zstd frame, strictly
# smaller than its raw bytes, or the raw bytes themselves when compressing did
# not make them smaller (incompressible data is stored as it is, at the cost of
# one attempt). The header lists every chunk's stored size and the CRC-32 of its
# stored bytes; the block's own ``crc32`` stays the CRC-32 of its raw bytes, as
# in uncompressed blocks, so ``verify`` checks both what is in the file and what
# loading makes of it.
#
# Writing: the calling thread cuts a block into chunks and hands them to a small
# pool (zstd releases the GIL while it works), writing the results in order;
# at most ``2 x workers`` chunks are in flight, so the extra memory is a few
# chunks whatever the block's size. Loading reads each chunk's stored bytes and
# a worker decompresses them into the block's destination memory; raw chunks
# are read straight into it.
#
# Compression       a parsed ``compression=`` argument: codec, level, chunk size, dtypes
# compression_argument  ``None``, ``"zstd"``, ``("zstd", level)`` or ``"auto"`` checked
# compressed_blocks which blocks of a layout a save with a ``Compression`` compresses
# write_block       write one block compressed, returning its chunk table
# compress_chunk    one chunk compressed (or kept raw), with its checksums
# read_block        a compressed block read and decompressed into new memory
# verify_block      a compressed block checked from a map of the file
# check_stored      a restore's first pass over a compressed block: its chunks' checksums
# decompress_into   a compressed block decompressed from a map of the file into given memory
# Deferred          a large compressed array a restore decompresses into the run's own array
# deferrable        which blocks of a file a restore may leave compressed (``Deferred``)

#: Raw bytes per chunk (the last chunk of a block may be shorter). Read when
#: ``save`` checks its argument: tests set it (and MIN_BLOCK) lower to cross
#: chunk boundaries with small arrays.
CHUNK = 4 * 2**20
#: Blocks smaller than this are stored raw even in a compressed file (read at
#: each save).
MIN_BLOCK = 4096
#: The level of ``compression="zstd"``: zstd's fastest regular level, which on
#: Atari frames gives most of the ratio of level 3 at twice the speed.
DEFAULT_LEVEL = 1
#: The levels accepted (zstd's negative "fast" levels trade ratio for speed).
MIN_LEVEL, MAX_LEVEL = -7, 22
#: The feature a file with compressed blocks lists (older readers refuse it).
FEATURE = COMPRESSED_FEATURE
#: Workers of the compression pool: the cores this process may use, capped.
MAX_WORKERS = 8
#: The package that provides zstd.
PACKAGE = "zstandard"
#: The policy value of ``compression=``: compress blocks of one-byte data only, and
#: only where ``zstandard`` is installed (else write raw, said once on the log).
AUTO = "auto"
#: The numpy dtypes ``compression="auto"`` compresses (a block is compressed when
#: all its arrays have one): uint8, int8 and bool, what frames, masks and done
#: flags are stored as. Float arrays (weights, optimizer moments, rewards) shrink
#: little (a few percent to a third) for the time compressing them costs.
AUTO_DTYPES = frozenset({"|u1", "|i1", "|b1"})

_log = logging.getLogger("namedschema")
_said_missing = False


@dataclass(frozen=True)
class Compression:
    """How a save compresses its blocks: blocks of at least ``min_block`` bytes,
    in chunks of ``chunk`` raw bytes."""

    codec: str = "zstd"
    level: int = DEFAULT_LEVEL
    chunk: int = CHUNK
    min_block: int = MIN_BLOCK
    #: compress only blocks whose arrays all have one of these numpy dtypes
    #: (``"auto"``); None: every block of at least ``min_block`` bytes
    dtypes: frozenset[str] | None = None


def compression_argument(value: Any, chunk: int | None = None,
                         caller: str = "save") -> Compression | None:
    """``compression=`` checked: None, ``"zstd"``, ``("zstd", level)`` or ``"auto"``.

    ``"auto"`` compresses one-byte blocks (``AUTO_DTYPES``) at the default
    level, and is None (one INFO line on the ``namedschema`` logger, once per
    process) where ``zstandard`` cannot be imported. ``caller`` begins the
    messages (``"RunCheckpoint"``). ``chunk`` (raw bytes per chunk, a multiple
    of 64 within the format's bounds; ``CHUNK`` by default) exists for tests.
    """
    global _said_missing
    if value is None:
        return None
    chunk = CHUNK if chunk is None else chunk
    level, dtypes = DEFAULT_LEVEL, None
    if isinstance(value, tuple) and len(value) == 2:
        value, level = value
        if type(level) is not int or not MIN_LEVEL <= level <= MAX_LEVEL:
            raise ValueError(f"{caller}: compression level must be an int from {MIN_LEVEL} "
                             f"to {MAX_LEVEL}, got {level!r}")
    elif isinstance(value, str) and value == AUTO:
        value, dtypes = "zstd", AUTO_DTYPES
    if not isinstance(value, str) or value not in CODECS:
        raise ValueError(f"{caller}: compression must be None, 'zstd', ('zstd', level) or "
                         f"'auto', got {value!r}")
    if type(chunk) is not int or not MIN_CHUNK <= chunk <= MAX_CHUNK or chunk % ALIGN:
        raise ValueError(f"{caller}: chunk size {chunk!r} is not a multiple of {ALIGN} from "
                         f"{MIN_CHUNK} to {MAX_CHUNK}")
    try:
        zstd_module()   # refuse now, before anything is written, if zstd is missing
    except ModuleNotFoundError as exc:
        if dtypes is None:
            raise
        if not _said_missing:
            _said_missing = True
            _log.info("namedschema: compression='auto' writes checkpoints uncompressed "
                      "here: %s", exc)
        return None
    return Compression(value, level, chunk, MIN_BLOCK, dtypes)


def compressed_blocks(blocks: Sequence[BlockEntry], arrays: Sequence[ArrayEntry],
             compression: Compression) -> list[bool]:
    """Which of ``blocks`` (a layout's, with its ``arrays``) ``compression`` compresses:
    those of at least ``min_block`` bytes whose arrays all have one of its
    ``dtypes`` (the pickle block, holding none, only when ``dtypes`` is None)."""
    out = [b.nbytes >= max(compression.min_block, 1) for b in blocks]
    if compression.dtypes is None:
        return out
    kinds: list[set[str]] = [set() for _ in blocks]
    for a in arrays:
        if a.block is not None:
            kinds[a.block].add(a.dtype)
    return [ok and bool(k) and k <= compression.dtypes
            for ok, k in zip(out, kinds, strict=True)]


def zstd_module(field: str | None = None) -> Any:
    """The ``zstandard`` module, or ModuleNotFoundError saying what to install."""
    try:
        import zstandard
    except ImportError as exc:
        what = ("compression='zstd'" if field is None else
                f"loading field {field!r}, which is stored compressed with zstd,")
        raise ModuleNotFoundError(
            f"{what} needs the {PACKAGE!r} package, which cannot be imported here "
            f"({exc}); install it with: pip install 'namedschema[zstd]' (or pip install "
            f"{PACKAGE})", name=PACKAGE) from exc
    return zstandard


def workers() -> int:
    """Threads of a compression or decompression pool."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def chunk_pieces(source: Source, chunk: int) -> Iterator[tuple[Any, bool]]:
    """``source`` cut into raw pieces of ``chunk`` bytes: ``(buffer, live)``.

    ``live`` marks views of the caller's memory, which another thread may be
    writing: the worker copies those before it looks at them twice.
    """
    # The sources' pieces (16 MiB views of the caller's memory, leading zeros, compact
    # copies, a pickle) are sliced where a chunk lies inside one, else joined.
    pending: list[Any] = []
    have = 0
    for buf, is_copy in source.chunks():
        view = memoryview(buf).cast("B")
        live = isinstance(source, MemorySpan) and not is_copy
        while view.nbytes:
            take = min(chunk - have, view.nbytes)
            if not pending and take == chunk:
                yield view[:take], live
            else:
                pending.append(bytes(view[:take]))
                have += take
                if have == chunk:
                    yield b"".join(pending), False
                    pending, have = [], 0
            view = view[take:]
    if pending:
        yield b"".join(pending), False


_local = threading.local()


def _compressor(level: int) -> Any:
    """This thread's compressor for ``level`` (zstandard's objects are per thread)."""
    cache = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    if level not in cache:
        zstd = zstd_module()
        cache[level] = zstd.ZstdCompressor(level=level, write_checksum=False,
                                           write_content_size=True)
    return cache[level]


#: Chunks of at least PROBE_MIN bytes are probed first: PROBES pieces of PROBE
#: bytes spread over the chunk are compressed together, and a chunk whose
#: sample does not shrink below PROBE_RATIO of its size is stored raw without
#: compressing the rest (random data then costs little more than a raw save).
PROBE, PROBES, PROBE_MIN, PROBE_RATIO = 16384, 4, 2**18, 0.97


def _incompressible(data: Any, compressor: Any) -> bool:
    """Whether a sample of ``data`` says compressing it is not worth it."""
    view = memoryview(data).cast("B")
    if view.nbytes < PROBE_MIN:
        return False
    step = view.nbytes // PROBES
    sample = b"".join(view[i * step:i * step + PROBE] for i in range(PROBES))
    return len(compressor.compress(sample)) > PROBE_RATIO * len(sample)


def compress_chunk(piece: Any, live: bool, level: int) -> tuple[Any, int, int]:
    """``(stored bytes, their CRC-32, raw CRC-32)`` of one chunk (in a worker): a zstd
    frame, or the raw bytes when compressing does not make them smaller. ``live``: copy
    ``piece`` first (another thread may be writing it)."""
    data = bytes(piece) if live else piece   # one snapshot: the CRC and the frame agree
    raw_crc = zlib.crc32(data)
    compressor = _compressor(level)
    if not _incompressible(data, compressor):
        frame = compressor.compress(data)
        if len(frame) < len(data):
            return frame, zlib.crc32(frame), raw_crc
    return data, raw_crc, raw_crc           # incompressible: stored raw


def write_block(fd: int, source: Source, nbytes: int, compression: Compression,
                progress: Progress, pool: ThreadPoolExecutor, in_flight_limit: int,
                raw_crcs: list[int] | None = None) -> tuple[ChunkTable, int]:
    """Write ``source`` (``nbytes`` raw) compressed at the file position, then its padding;
    return its chunk table and raw CRC-32.

    Chunks are compressed by ``pool``, at most ``in_flight_limit`` at a time, and
    written in order. ``raw_crcs`` (if given) receives each chunk's raw CRC-32.
    """
    in_flight: collections.deque[tuple[Future[tuple[Any, int, int]], int]] = collections.deque()
    limit = max(1, in_flight_limit)
    chunks: list[tuple[int, int]] = []
    raw_crcs = [] if raw_crcs is None else raw_crcs
    stored = 0

    sync = EarlySync(fd)

    def drain(keep: int) -> None:
        nonlocal stored
        while len(in_flight) > keep:
            future, raw = in_flight.popleft()
            data, crc, raw_crc = future.result()
            write_all(fd, data)
            sync.wrote(len(data))
            chunks.append((len(data), crc))
            raw_crcs.append(raw_crc)
            stored += len(data)
            progress.advance(raw)

    seen = 0
    try:
        for piece, live in chunk_pieces(source, compression.chunk):
            size = memoryview(piece).nbytes
            seen += size
            in_flight.append((submit_or_run(pool, compress_chunk, piece, live,
                                            compression.level), size))
            drain(limit)
        drain(0)
    finally:
        sync.close()
    if seen != nbytes:  # pragma: no cover - the layout and its sources agree
        raise RuntimeError(f"internal error: a block of {nbytes} bytes gave {seen}")
    pad = -stored % ALIGN
    if pad:
        write_all(fd, bytes(pad))
    table = ChunkTable(compression.codec, compression.chunk, tuple(chunks), stored)
    return table, crc_concat(raw_crcs, compression.chunk, table.raw_size(len(chunks) - 1,
                                                                         nbytes))


# --------------------------------------------------------------------------
# Reading and verifying
# --------------------------------------------------------------------------

def _table(header: Header, index: int) -> ChunkTable:
    table = header.blocks[index].table
    if table is None:  # pragma: no cover - callers pass compressed blocks only
        raise ValueError(f"internal error: block {index} is not compressed")
    return table


def _decompressor() -> Any:
    dctx = getattr(_local, "decompressor", None)
    if dctx is None:
        dctx = _local.decompressor = zstd_module().ZstdDecompressor()
    return dctx


def _decompress_into(header: Header, index: int, k: int, frame: Any, out: Any) -> None:
    """Decompress chunk ``k``'s frame into ``out``, which it must fill exactly."""
    field = header.block_field(index)
    zstd = zstd_module(field)
    want = memoryview(out).nbytes
    try:
        declared = zstd.frame_content_size(frame)   # from the frame header alone
        if declared != want:
            fail(header.name, f"field {field!r} is corrupt: compressed chunk {k} declares "
                 f"{declared} bytes, the chunk holds {want}")
        reader = _decompressor().stream_reader(frame, read_across_frames=False)
        view = memoryview(out)
        got = 0
        while got < want:
            n = reader.readinto(view[got:])
            if not n:
                break
            got += n
        extra = reader.read(1) if got == want else b""
    except zstd.ZstdError as exc:
        fail(header.name, f"field {field!r} is corrupt: compressed chunk {k} cannot be "
             f"decompressed ({exc})", exc)
    if got != want or extra:
        fail(header.name, f"field {field!r} is corrupt: compressed chunk {k} decompresses "
             f"to {'more than ' if extra else ''}{got} bytes, not {want}")


def _check_chunk(header: Header, index: int, k: int, data: Any, stored_crc: int) -> None:
    value = zlib.crc32(data)
    if value != stored_crc:
        fail(header.name, f"field {header.block_field(index)!r} is corrupt: chunk {k} "
             f"checksum {value:08x} does not match the stored {stored_crc:08x}")


def _decode(header: Header, index: int, k: int, frame: Any, out: Any, check: bool) -> int:
    """One chunk into ``out`` (a worker's job): returns the CRC-32 of ``out`` if ``check``.

    A compressed chunk's stored CRC-32 is checked on every load, ``check`` or not: its
    bytes are in memory already (the check costs a fraction of decompressing them), and
    one flipped bit there would garble up to a whole chunk without a word.
    """
    stored_size, stored_crc = _table(header, index).chunks[k]
    raw = stored_size == memoryview(out).nbytes
    if check or not raw:
        _check_chunk(header, index, k, frame, stored_crc)
    if raw:
        if frame is not out:
            memoryview(out)[:] = frame
        return stored_crc
    _decompress_into(header, index, k, frame, out)
    return zlib.crc32(out) if check else 0


def _run(header: Header, index: int, check: bool, progress: Progress | None,
         job: Callable[[int, int, int, int, ThreadPoolExecutor], Future[int]]) -> None:
    """Run ``job(k, stored_at, raw_at, raw_len, pool)`` (a future) for every chunk of a block, bounded,
    then check the block's raw CRC-32 (if ``check``)."""
    block = header.blocks[index]
    table = _table(header, index)
    n = len(table.chunks)
    crcs = [0] * n
    with ThreadPoolExecutor(workers(), thread_name_prefix="namedschema-zstd") as pool:
        in_flight: collections.deque[tuple[int, Future[int]]] = collections.deque()
        limit = 2 * workers()
        for k, stored_at in enumerate(table.starts()):
            raw_at = k * table.chunk
            raw_len = table.raw_size(k, block.nbytes)
            in_flight.append((k, job(k, stored_at, raw_at, raw_len, pool)))
            while len(in_flight) > limit:
                done, future = in_flight.popleft()
                crcs[done] = future.result()
            if progress is not None:
                progress.advance(raw_len)
        for done, future in in_flight:
            crcs[done] = future.result()
    if check:
        for k, listed in enumerate(table.raw_crcs or ()):
            if crcs[k] != listed:
                fail(header.name, f"field {header.block_field(index)!r} is corrupt: chunk {k} "
                     f"holds raw bytes of checksum {crcs[k]:08x}, its table lists "
                     f"{listed:08x}")
        value = crc_concat(crcs, table.chunk, table.raw_size(n - 1, block.nbytes))
        if value != block.crc32:
            fail(header.name, f"field {header.block_field(index)!r} is corrupt: checksum "
                 f"{value:08x} of its decompressed bytes does not match the stored "
                 f"{block.crc32:08x}")


def read_blocks(f: BinaryIO, header: Header, blocks_data: list[np.ndarray], check: bool,
                progress: Progress | None = None) -> None:
    """Fill the compressed blocks left None by ``_storage.read_blocks``."""
    for index, b in enumerate(header.blocks):
        if b.table is not None:
            blocks_data[index] = read_block(f, header, index, check, progress)


def verify_blocks(header: Header, stored: list[np.ndarray], progress: Progress | None = None) -> None:
    """Check every compressed block of ``stored`` (``map_blocks(..., stored=True)``)."""
    for index, b in enumerate(header.blocks):
        if b.table is not None:
            verify_block(stored[index], header, index, progress)


def read_block(f: BinaryIO, header: Header, index: int, check: bool,
               progress: Progress | None = None) -> np.ndarray:
    """Compressed block ``index`` read into new (64-aligned) memory, chunk by chunk."""
    block, table = header.blocks[index], _table(header, index)
    zstd_module(header.block_field(index))
    dest = aligned_empty(block.nbytes)
    view = dest.data
    start = header.block_file_start(index)

    def job(k: int, stored_at: int, raw_at: int, raw_len: int, pool: ThreadPoolExecutor) -> Future[int]:
        stored = table.chunks[k][0]
        out = view[raw_at:raw_at + raw_len]
        buf = out if stored == raw_len else memoryview(bytearray(stored))
        f.seek(start + stored_at)
        got = 0
        while got < stored:
            n = f.readinto(buf[got:])  # type: ignore[attr-defined]
            if not n:
                fail(header.name, f"field {header.block_field(index)!r} is truncated in "
                     f"chunk {k} (file changed while reading?)")
            got += n
        if stored == raw_len and not check:
            done: Future[int] = Future()
            done.set_result(0)
            return done
        return submit_or_run(pool, _decode, header, index, k, buf, out, check)

    _run(header, index, check, progress, job)
    return dest


def verify_block(stored: np.ndarray, header: Header, index: int,
                 progress: Progress | None = None) -> None:
    """Check compressed block ``index`` from its ``stored`` bytes (a map of the file):
    every chunk's CRC-32 and decompressed size, and the block's raw CRC-32. Memory:
    a chunk per worker."""
    table = _table(header, index)
    zstd_module(header.block_field(index))
    whole = stored.data.cast("B")

    def check_one(k: int, stored_at: int, raw_len: int) -> int:
        frame = whole[stored_at:stored_at + table.chunks[k][0]]
        scratch = getattr(_local, "scratch", None)
        if scratch is None or len(scratch) < raw_len:
            scratch = _local.scratch = bytearray(max(raw_len, table.chunk))
        out = memoryview(scratch)[:raw_len]
        if table.chunks[k][0] == raw_len:
            _check_chunk(header, index, k, frame, table.chunks[k][1])
            return table.chunks[k][1]
        return _decode(header, index, k, frame, out, True)

    def job(k: int, stored_at: int, raw_at: int, raw_len: int, pool: ThreadPoolExecutor) -> Future[int]:
        return submit_or_run(pool, check_one, k, stored_at, raw_len)

    _run(header, index, True, progress, job)


# --------------------------------------------------------------------------
# Restores: decompressed straight into the run's own arrays
# --------------------------------------------------------------------------

def check_stored(stored: np.ndarray, header: Header, index: int, check: bool) -> None:
    """The pass a restore makes before it writes anywhere: compressed block ``index``'s
    stored bytes (``stored``, a map of the file) checked chunk by chunk.

    Every compressed chunk's CRC-32 (and, with ``check``, every raw chunk's too) and the
    size each compressed frame declares. Reads only the stored bytes (a fraction of the
    raw ones for frames) and allocates nothing; what it cannot see, a frame whose bytes
    are intact but decompress to other bytes than were saved (a file written wrong, not
    one damaged since), :func:`decompress_into` still refuses, loudly.
    """
    table = _table(header, index)
    zstd = zstd_module(header.block_field(index))
    whole = stored.data.cast("B")

    def check_one(k: int, stored_at: int, raw_len: int) -> int:
        size, crc = table.chunks[k]
        frame = whole[stored_at:stored_at + size]
        if size == raw_len and not check:
            return 0
        _check_chunk(header, index, k, frame, crc)
        if size != raw_len:
            try:
                declared = zstd.frame_content_size(frame)
            except zstd.ZstdError as exc:
                fail(header.name, f"field {header.block_field(index)!r} is corrupt: "
                     f"compressed chunk {k} has no valid frame header ({exc})", exc)
            if declared != raw_len:
                fail(header.name, f"field {header.block_field(index)!r} is corrupt: "
                     f"compressed chunk {k} declares {declared} bytes, the chunk holds "
                     f"{raw_len}")
        return 0

    def job(k: int, stored_at: int, raw_at: int, raw_len: int, pool: ThreadPoolExecutor) -> Future[int]:
        return submit_or_run(pool, check_one, k, stored_at, raw_len)

    _run(header, index, False, None, job)


def decompress_into(stored: np.ndarray, header: Header, index: int, out: memoryview,
                    check: bool) -> None:
    """Decompress block ``index`` from its ``stored`` bytes (a map of the file) into
    ``out``, a writable byte view of the block's size: chunk by chunk, by the pool, each
    compressed chunk's CRC-32 checked before it is decompressed (and, with ``check``, the
    raw chunks' and the block's raw CRC-32 after). Memory: nothing beyond ``out``."""
    table = _table(header, index)
    zstd_module(header.block_field(index))
    whole = stored.data.cast("B")

    def job(k: int, stored_at: int, raw_at: int, raw_len: int, pool: ThreadPoolExecutor) -> Future[int]:
        frame = whole[stored_at:stored_at + table.chunks[k][0]]
        return submit_or_run(pool, _decode, header, index, k, frame,
                             out[raw_at:raw_at + raw_len], check)

    _run(header, index, check, None, job)


class Deferred:
    """A compressed array of a checkpoint a restore reads, left compressed until used.

    A restore (``RunCheckpoint.restore`` and the rows of ``training/state_kinds.py``)
    loads the file with its large compressed arrays as these: ``shape``, ``dtype``,
    ``ndim``, ``size`` and ``nbytes`` are known without decompressing anything, and
    :meth:`copy_into` (called by ``_storage.copy_from_map``) decompresses straight into
    the run's own array, chunk by chunk, with no whole-array copy in between. Anything
    else (``np.asarray``, indexing, any other attribute) decompresses the array into
    new memory once and works on that, so a reader that needs the values gets the
    right ones, at the memory cost of an ordinary load.

    The chunks' stored checksums were checked when the file was loaded
    (:func:`check_stored`); a chunk that still fails while it is written into an array
    (the file changed since, or was written wrong) raises a FormatError that says the
    array was partly overwritten.
    """

    __slots__ = ("shape", "dtype", "_stored", "_header", "_index", "_check", "_entry",
                 "_value", "__weakref__")

    def __init__(self, stored: np.ndarray, header: Header, index: int, entry: ArrayEntry,
                 check: bool):
        self.shape, self.dtype = tuple(entry.shape), np.dtype(entry.dtype)
        self._stored, self._header, self._index = stored, header, index
        self._entry, self._check = entry, check
        self._value: np.ndarray | None = None

    @property
    def ndim(self) -> int:
        """Number of dimensions, as ``ndarray.ndim``."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements, as ``ndarray.size``."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes once decompressed, as ``ndarray.nbytes``."""
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        return (f"<compressed array {self._entry.path!r} {self.dtype} {self.shape} of "
                f"{self._header.name!r}>")

    def value(self) -> np.ndarray:
        """The array decompressed into new memory (once; kept)."""
        if self._value is None:
            block = self._header.blocks[self._index]
            dest = aligned_empty(block.nbytes)
            decompress_into(self._stored, self._header, self._index, dest.data, self._check)
            e = self._entry
            self._value = np.ndarray(e.shape, self.dtype, buffer=dest, offset=e.offset,
                                     strides=e.strides)
        return self._value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self.value()
        return value if dtype is None else value.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        return self.value()[key]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.value(), name)

    def copy_into(self, target: np.ndarray) -> None:
        """``np.copyto(target, self, casting="no")``, decompressing into ``target``'s own
        memory when it is C-contiguous (through new memory otherwise)."""
        if target.shape != self.shape or target.dtype != self.dtype:
            raise ValueError(f"cannot copy {self!r} into an array of {target.dtype} "
                             f"{target.shape}")
        if self._value is not None or not target.flags.c_contiguous \
                or not target.flags.writeable or self._entry.offset != 0:
            np.copyto(target, self.value(), casting="no")
            return
        try:
            decompress_into(self._stored, self._header, self._index,
                            target.reshape(-1).view(np.uint8).data, self._check)
        except FormatError as exc:
            raise FormatError(
                f"{exc}; the array it was being restored into ({target.dtype} "
                f"{target.shape}) was partly overwritten: it now holds part of the "
                "checkpoint and part of what it held before (restore again from an "
                "intact checkpoint, or start the run afresh)") from exc


def deferrable(header: Header) -> dict[int, ArrayEntry]:
    """The compressed blocks a restore may leave compressed (:class:`Deferred`): those
    holding exactly one numpy array, C-contiguous from the block's start over all of
    it, of at least ``MIN_DEFERRED`` bytes; ``{block: its array}``."""
    count: dict[int, int] = collections.Counter(
        a.block for a in header.arrays if a.block is not None)
    out = {}
    for a in header.arrays:
        if a.block is None or a.torch is not None or count[a.block] != 1:
            continue
        block = header.blocks[a.block]
        if block.table is None or block.nbytes < MIN_DEFERRED or a.offset != 0:
            continue
        dtype = np.dtype(a.dtype)
        if a.nbytes != block.nbytes or tuple(a.strides) != _c_strides(a.shape, dtype.itemsize):
            continue
        out[a.block] = a
    return out


def _c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


#: Compressed arrays smaller than this are decompressed when a restore loads the file.
MIN_DEFERRED = 2**20
