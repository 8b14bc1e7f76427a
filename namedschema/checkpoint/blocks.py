"""Block I/O: write blocks with their CRC-32s, read or map them back, verify them.

Writing copies each block from the caller's memory in CHUNK pieces. The
checksum of a piece of the caller's memory is computed on the bytes read
back from the file (``pread``, from the page cache) by a worker thread behind
the writes, so it describes exactly the bytes in the file even while another
thread or process keeps writing the caller's arrays (a live shared-memory
replay buffer gives a torn snapshot, as any copy would, but never a file
that fails ``verify``). A background
fdatasync every SYNC_EVERY bytes lets the disk start early, so the final fsync
has less left to do. Reading fills new arrays with ``readinto`` (checksums, if
asked for, run behind the reads); mapping maps the file once and views it.
"""

from __future__ import annotations

import collections
import mmap
import os
import sys
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from .arrays import aligned_empty
from .constants import ALIGN, CHUNK
from .header import Header, fail
from .mapped import remember_file

# Every this many bytes a background fdatasync starts the disk writing what is
# already in the page cache while later chunks are still being copied, so that
# less is left for the final fsync.
SYNC_EVERY = 256 * 2**20
# Buffers this module made (copies of sparse views) may wait this long for
# their checksum.
MAX_COPIES_PENDING = 3 * CHUNK

MMAP_ACCESS = {"r": mmap.ACCESS_READ, "r+": mmap.ACCESS_WRITE, "c": mmap.ACCESS_COPY}


# --------------------------------------------------------------------------
# What a block is written from
# --------------------------------------------------------------------------

class _RawMemory:
    """Exposes a span of process memory to numpy through the array interface."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__array_interface__ = {"data": (address, True), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}


@dataclass(frozen=True)
class MemorySpan:
    """A span of the caller's memory (the arrays of the block live in it).

    ``lead`` zero bytes come first: they keep the span's alignment (see
    ``layout``).
    """

    lo: int
    nbytes: int
    lead: int = 0

    def chunks(self) -> Iterator[tuple[memoryview, bool]]:
        """``(buffer, is_copy)`` pairs covering the block: its lead bytes, then its memory."""
        if self.lead:
            yield memoryview(bytes(self.lead)), True
        span = np.asarray(_RawMemory(self.lo, self.nbytes))
        for start in range(0, self.nbytes, CHUNK):
            yield span[start:start + CHUNK].data, False


@dataclass(frozen=True)
class CompactCopy:
    """The elements of one sparse view, copied in C order piece by piece."""

    array: np.ndarray           # non-empty, at least one dimension (0-d spans itself)

    def chunks(self) -> Iterator[tuple[memoryview, bool]]:
        """``(buffer, is_copy)`` pairs covering the block: contiguous copies of row ranges."""
        arr = self.array
        step = max(CHUNK // (arr.nbytes // arr.shape[0]), 1)
        for start in range(0, arr.shape[0], step):
            yield np.ascontiguousarray(arr[start:start + step]).data.cast("B"), True


@dataclass(frozen=True)
class RawBytes:
    """Bytes made for the file (the pickle block)."""

    data: bytes

    def chunks(self) -> Iterator[tuple[memoryview, bool]]:
        """``(buffer, is_copy)`` pairs covering the block: slices of its bytes."""
        view = memoryview(self.data)
        for start in range(0, len(view), CHUNK):
            yield view[start:start + CHUNK], False


#: A block's source: ``chunks()`` yields ``(buffer, is_copy)`` pairs covering it,
#: ``is_copy`` marking buffers made here rather than views of the caller's memory.
Source = MemorySpan | CompactCopy | RawBytes


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

class Progress:
    """A plain-text progress bar on stderr (does nothing unless enabled)."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.label, self.enabled = max(total, 1), label, enabled
        self.done, self._shown = 0, -1

    def advance(self, n: int) -> None:
        """Count ``n`` more bytes written; redraw the bar when its percentage changes."""
        if not self.enabled:
            return
        self.done += n
        percent = min(100, self.done * 100 // self.total)
        if percent != self._shown:
            self._shown = percent
            bar = "#" * (percent * 30 // 100)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {percent:3d}% "
                             f"{self.done / 2**20:,.1f}/{self.total / 2**20:,.1f} MiB")
            if percent == 100:
                sys.stderr.write("\n")
            sys.stderr.flush()


def write_all(fd: int, buf: Any) -> None:
    """Write all of ``buf`` at the file position (``os.write`` may write less)."""
    view = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
    while view.nbytes:
        written = os.write(fd, view)
        view = view[written:]


# A new file is written in pieces that end at multiples of HOLE (file offsets); an
# all-zero piece is not written. Unwritten bytes of a new file read back as zeros, and
# a whole HOLE-aligned stretch never written is a hole that takes no disk space: the
# first save of an empty replay buffer costs what is in it.
HOLE = 2**20
_SMALL = 2**16                          # writes below this are written as they are


def write_new(fd: int, buf: Any) -> None:
    """Write all of ``buf`` at the position of a new file, skipping its all-zero pieces
    (see HOLE); the file reads back as ``buf``."""
    view = memoryview(buf)
    if view.nbytes < _SMALL or not view.c_contiguous:
        write_all(fd, buf)
        return
    view = view.cast("B")
    data = np.frombuffer(view, np.uint8)
    position = os.lseek(fd, 0, os.SEEK_CUR)
    done = at = 0                       # bytes of buf written or skipped; piece start
    while at < view.nbytes:
        end = min(view.nbytes, at + HOLE - (position + at) % HOLE)
        piece = data[at:end]
        # A sample first: data rarely passes it, so the full scan is mostly for zeros.
        if not piece[::4093].any() and not piece.any():
            write_all(fd, view[done:at])
            done = end
            os.lseek(fd, position + done, os.SEEK_SET)
        at = end
    write_all(fd, view[done:])
    if done == view.nbytes and os.fstat(fd).st_size < position + done:
        os.ftruncate(fd, position + done)   # a skipped end reads back (as zeros) at once


class _Crc:
    """A running CRC-32 fed in order by a worker thread."""

    def __init__(self) -> None:
        self.value = 0

    def update(self, chunk: Any) -> None:
        self.value = zlib.crc32(chunk, self.value)


class EarlySync:
    """A background fdatasync of ``fd`` every SYNC_EVERY bytes written (one at a time),
    for writers that write through ``write_all`` (compressed blocks): the disk starts
    early, as in ``write_blocks``. ``close`` waits for the last one (raising its error)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.unsynced = 0
        self.syncing: Future | None = None
        self.pool: ThreadPoolExecutor | None = None

    def wrote(self, nbytes: int) -> None:
        """Count ``nbytes`` written; start a sync when enough is unsynced and none runs."""
        self.unsynced += nbytes
        if self.unsynced >= SYNC_EVERY and (self.syncing is None or self.syncing.done()):
            if self.syncing is not None:
                self.syncing.result()  # raise its error, if any
            if self.pool is None:
                self.pool = ThreadPoolExecutor(1, thread_name_prefix="namedschema-sync")
            self.syncing = submit_or_run(self.pool, getattr(os, "fdatasync", os.fsync),
                                         self.fd)
            self.unsynced = 0

    def close(self) -> None:
        """Wait for the last sync (raising its error) and stop the sync thread."""
        try:
            if self.syncing is not None:
                self.syncing.result()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)


def submit_or_run(pool: ThreadPoolExecutor, fn: Callable[..., Any], *args: Any) -> Future:
    """``pool.submit(fn, *args)``, or the call made here when the pool takes no more work.

    concurrent.futures refuses new work once the interpreter begins to exit (before
    atexit hooks run), but a background save that namedschema's exit hook waits for
    must still be written: its checksums and syncs then run in the writing thread,
    after the work the pool already took (a running checksum must see its chunks in order).
    """
    try:
        return pool.submit(fn, *args)
    except RuntimeError:
        pool.shutdown(wait=True)       # what it took still runs: let it finish first
        done: Future[Any] = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:
            done.set_exception(exc)
        return done


def write_blocks(fd: int, sources: tuple[Source, ...], progress: Progress) -> list[int]:
    """Write every block and its padding at the position of a new file; return their CRC-32s.

    All-zero stretches are left as holes (see HOLE); the caller gives the file its full
    size at the end (a hole at the end of a file needs ``ftruncate``). The checksums run in a worker thread and may lag behind the writes: the
    calling thread writes at the speed of the page cache, and whatever is
    left of the checksums overlaps the data's fdatasync.
    """
    fdatasync = getattr(os, "fdatasync", os.fsync)
    crcs = [_Crc() for _ in sources]
    reader = _FileCrc(fd)
    with ThreadPoolExecutor(1, thread_name_prefix="namedschema-crc") as crc_pool, \
            ThreadPoolExecutor(1, thread_name_prefix="namedschema-sync") as sync_pool:
        checks: list[Future[Any]] = []
        copies: collections.deque[tuple[Future[Any], int]] = collections.deque()
        copied = unsynced = 0
        syncing: Future[Any] | None = None
        for source, crc in zip(sources, crcs, strict=True):
            nbytes = 0
            live = isinstance(source, MemorySpan)
            for chunk, is_copy in source.chunks():
                if live and not is_copy:
                    # The caller's memory may change under us: checksum the file.
                    position = os.lseek(fd, 0, os.SEEK_CUR)
                    write_new(fd, chunk)
                    checks.append(submit_or_run(crc_pool, reader.update, crc, position,
                                                  chunk.nbytes))
                else:
                    checks.append(submit_or_run(crc_pool, crc.update, chunk))
                    write_new(fd, chunk)
                progress.advance(chunk.nbytes)
                nbytes += chunk.nbytes
                if is_copy:
                    copies.append((checks[-1], chunk.nbytes))
                    copied += chunk.nbytes
                    while copied > MAX_COPIES_PENDING:
                        done, n = copies.popleft()
                        done.result()
                        copied -= n
                unsynced += chunk.nbytes
                if unsynced >= SYNC_EVERY and (syncing is None or syncing.done()):
                    if syncing is not None:
                        syncing.result()  # raise its error, if any
                    syncing = submit_or_run(sync_pool, fdatasync, fd)
                    unsynced = 0
            pad = -nbytes % ALIGN
            if pad:
                write_all(fd, bytes(pad))
        if syncing is not None:
            syncing.result()
        if not all(c.done() for c in checks):
            fdatasync(fd)  # the disk writes the data while the checksums finish
        for check in checks:
            check.result()
    return [crc.value for crc in crcs]


class _FileCrc:
    """Feeds a running CRC with bytes read back from the file being written."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer: bytearray | None = None  # one CHUNK, reused (one worker thread)

    def update(self, crc: _Crc, position: int, nbytes: int) -> None:
        if self.buffer is None:
            self.buffer = bytearray(CHUNK)
        view = memoryview(self.buffer)
        done = 0
        while done < nbytes:
            got = os.preadv(self.fd, [view[:min(CHUNK, nbytes - done)]], position + done)
            if got <= 0:
                raise OSError(f"short read back of the file being written at {position + done}")
            crc.update(view[:got])
            done += got


# --------------------------------------------------------------------------
# Reading, mapping, verifying
# --------------------------------------------------------------------------

def check_crc(header: Header, index: int, value: int) -> None:
    """FormatError naming the block's first field if ``value`` is not its stored CRC."""
    stored = header.blocks[index].crc32
    if value != stored:
        fail(header.name, f"field {header.block_field(index)!r} is corrupt: checksum "
             f"{value:08x} does not match the stored {stored:08x}")


def verify(header: Header, blocks_data: list[Any], progress: Progress | None = None) -> None:
    """Check every raw block's CRC-32 against the header (compressed ones: see
    ``compression.verify_block``)."""
    for index, data in enumerate(blocks_data):
        if header.blocks[index].table is not None:
            continue
        value = 0
        for start in range(0, len(data), CHUNK):
            chunk = data[start:start + CHUNK]
            value = zlib.crc32(chunk, value)
            if progress is not None:
                progress.advance(len(chunk))
        check_crc(header, index, value)


def read_blocks(f: BinaryIO, header: Header, verify: bool,
                progress: Progress | None = None) -> list[np.ndarray]:
    """Read every raw block into a new array; with ``verify``, check the checksums too.

    The checksums run in a worker thread behind the reads (they only read
    memory that is already filled), so they overlap the I/O. Compressed
    blocks are left as None (``compression.read_block`` reads them).
    """
    blocks_data: list[Any] = []
    crcs: list[Any] = []
    checks = []
    with ThreadPoolExecutor(1, thread_name_prefix="namedschema-crc") as pool:
        for index, b in enumerate(header.blocks):
            if b.table is not None:
                blocks_data.append(None)
                crcs.append(None)
                continue
            block = aligned_empty(b.nbytes)
            f.seek(header.block_file_start(index))
            view = block.data
            crc = _Crc()
            done = 0
            while done < b.nbytes:
                got = f.readinto(view[done:done + CHUNK])  # type: ignore[attr-defined]
                if not got:
                    fail(header.name, f"block {b.tensor!r} is truncated: expected "
                         f"{b.nbytes} bytes, found {done} (file changed while reading?)")
                if verify:
                    checks.append(submit_or_run(pool, crc.update, view[done:done + got]))
                done += got
                if progress is not None:
                    progress.advance(got)
            crcs.append(crc)
            blocks_data.append(block)
        for check in checks:
            check.result()
    if verify:
        for index, crc in enumerate(crcs):
            if crc is not None:
                check_crc(header, index, crc.value)
    return blocks_data


def map_blocks(f: BinaryIO, header: Header, mode: str,
               stored: bool = False) -> list[np.ndarray]:
    """Every block as a view of one map of the file (``mode`` as in ``np.load``).

    A compressed block cannot be mapped: FormatError naming its field, unless
    ``stored``, which maps its stored bytes (chunks) instead, for ``verify``.
    """
    for index, b in enumerate(header.blocks):
        if b.table is not None and not stored:
            fail(header.name, f"field {header.block_field(index)!r} is stored compressed "
                 f"({b.table.codec}) and cannot be memory-mapped: load the file with "
                 "mmap_mode=None (it is decompressed into memory), or save it with "
                 "compression=None to map it")
    if all(b.nbytes == 0 for b in header.blocks):
        return [np.empty(0, np.uint8) for _ in header.blocks]
    mapped = mmap.mmap(f.fileno(), 0, access=MMAP_ACCESS[mode])
    if len(mapped) < header.file_size:
        fail(header.name, "is truncated: the file shrank while it was being mapped")
    if mode == "r":
        remember_file(mapped, f.fileno())   # copies out of it read the file directly
    tensor_blocks = {a.block for a in header.arrays if a.torch is not None}
    private = None
    if mode == "r" and tensor_blocks:
        # torch has no read-only tensors: a write to a read-only map would
        # crash the process, so blocks holding tensors are mapped copy-on-write.
        private = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    out = []
    for index, b in enumerate(header.blocks):
        source = private if private is not None and index in tensor_blocks else mapped
        out.append(np.frombuffer(source, np.uint8, b.stored, header.block_file_start(index))
                   if b.nbytes else np.empty(0, np.uint8))
    return out
