"""Where a checkpoint's bytes are: blocks, their layout, pages and memory maps.

Writing and reading the data blocks (with holes for all-zero stretches and early
syncs), the layout that places them, the page size and pagemap helpers, and the
read-only memory maps that loads hand out.
"""

from __future__ import annotations

import collections
import ctypes
import mmap
import os
import sys
import weakref
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any, BinaryIO, TypeVar, TypeVarTuple

import numpy as np

from .._core.tree import byte_span, extent, memory_owner, overlap_groups
from ._graph import StoredArray, aligned_empty
from ._header import ALIGN, CHUNK, ST_DTYPES, ArrayEntry, BlockEntry, Header, TensorEntry, fail

__all__ = ["available", "Mapping", "file_mappings", "overlapping", "entries", "own_copies",
           "private", "PAGE", "copy_from_map", "read_only_map", "remember_file", "PIECE"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


# ---------------------------------------- mapped
#
# Copying arrays out of a read-only map of a checkpoint in bounded memory.
#
# The pages of a mapped file that a process has read count in its resident set
# for as long as they stay mapped. Copying a mapped array of B bytes into memory
# of the process (a resume writing a loaded checkpoint into a freshly built
# replay buffer) would therefore peak at 2B resident: B of new memory plus B of
# mapped file. :func:`copy_from_map` never holds more than about one ``PIECE``
# of the map:
#
# * where source and target are both contiguous and the loader said which file
#   the map shows (:func:`remember_file`), it reads the source's bytes from that
#   file straight into the target (``preadv``, ``PIECE`` at a time): the map is
#   not touched, and the reads go at the speed of a plain read of the file;
# * otherwise it copies ``PIECE`` pieces out of the map and drops the map's
#   pages behind each piece (``MADV_DONTNEED``; the data stays in the file and
#   in the page cache, and a later read of the map faults it back in), asking
#   the kernel to read the next piece ahead (``MADV_WILLNEED``).
#
# A shared read-only map shows exactly the file's bytes, so both ways copy the
# same bytes as ``np.copyto``. Only read-only maps (``load(mmap_mode="r")``) are
# handled so: copy-on-write maps may hold writes that the file does not, and
# arrays that view no map are copied by ``np.copyto``. A large compressed array of a
# file a restore loaded (``_compression.Deferred``) is decompressed straight into the
# target, chunk by chunk.
#
# copy_from_map   ``np.copyto(target, source)`` holding at most a piece of the map
# read_only_map   the read-only ``mmap`` a numpy array views, and its start address
# remember_file   the file a map shows (the loader calls it), for direct reads

# Bytes copied between two releases of the mapped pages: the most mapped file a
# copy holds resident at once.
PIECE = 4 * 2**20


_CAN_RELEASE = hasattr(mmap.mmap, "madvise") and hasattr(mmap, "MADV_DONTNEED")
_CAN_PREAD = hasattr(os, "preadv")

# id(map) -> (a weak reference to the map, a descriptor of the file it shows
# from offset 0); the descriptor is closed when the map goes.
_FILES: dict[int, tuple[weakref.ref[Any], int]] = {}


def remember_file(mapped: mmap.mmap, fd: int) -> None:
    """Note that ``mapped`` maps the file open as ``fd`` from its offset 0.

    A duplicate of ``fd`` is kept for as long as the map lives (it names the
    same file even if the path is replaced by a new save meanwhile).
    """
    if not _CAN_PREAD:
        return
    key, dup = id(mapped), os.dup(fd)

    def forget(_ref: weakref.ref[Any], key: int = key, dup: int = dup) -> None:
        _FILES.pop(key, None)
        os.close(dup)
    _FILES[key] = (weakref.ref(mapped, forget), dup)


def _file_of(mapped: mmap.mmap) -> int | None:
    entry = _FILES.get(id(mapped))
    if entry is None or entry[0]() is not mapped:
        return None
    return entry[1]


def read_only_map(array: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """``(the map, its start address)`` if ``array`` views a read-only ``mmap``, else None."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    if not isinstance(base, memoryview) or not base.readonly:
        return None
    mapped = base.obj
    if not isinstance(mapped, mmap.mmap) or mapped.closed or len(mapped) == 0:
        return None
    start = np.frombuffer(mapped, np.uint8, 1).__array_interface__["data"][0]
    return mapped, start


def copy_from_map(target: np.ndarray, source: Any) -> None:
    """``np.copyto(target, source, casting="no")``, in bounded resident memory.

    When ``source`` views a read-only map (of a checkpoint loaded with
    ``mmap_mode="r"``), at most about ``PIECE`` bytes of the map are resident
    at any time (see the module's docstring). Shapes and dtypes must already
    match (callers check them, naming what differs).

    A ``source`` that is a compressed array a restore left compressed
    (``_compression.Deferred``) is decompressed straight into ``target``.
    """
    if not isinstance(source, np.ndarray):
        copy_into = getattr(type(source), "copy_into", None)
        if copy_into is not None:
            copy_into(source, target)
            return
    found = read_only_map(source) if source.nbytes > PIECE else None
    if found is None:
        np.copyto(target, source, casting="no")
        return
    mapped, start = found
    fd = _file_of(mapped)
    if fd is not None and target.dtype == source.dtype and target.shape == source.shape \
            and target.flags.c_contiguous and source.flags.c_contiguous:
        offset = source.__array_interface__["data"][0] - start
        _read_into(fd, target.reshape(-1).view(np.uint8), offset)
    elif _CAN_RELEASE:
        _copy_pieces(target, source, mapped, start)
    else:
        np.copyto(target, source, casting="no")


def _read_into(fd: int, target: np.ndarray, offset: int) -> None:
    """Fill the bytes ``target`` from the file at ``offset``, ``PIECE`` at a time."""
    view = target.data
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:done + PIECE]], offset + done)
        if got <= 0:
            raise OSError(f"the mapped checkpoint ended at byte {offset + done} while "
                          "copying out of it (was the file truncated?)")
        done += got


def _copy_pieces(target: np.ndarray, source: np.ndarray, mapped: mmap.mmap,
                 start: int) -> None:
    if source.ndim == 0 or source.nbytes <= PIECE:
        np.copyto(target, source, casting="no")
        _advise(mapped, start, source, mmap.MADV_DONTNEED)
        return
    row = source.nbytes // source.shape[0]
    if row > PIECE:
        for i in range(source.shape[0]):
            _copy_pieces(target[i], source[i], mapped, start)
        return
    step = max(1, PIECE // row)
    n = source.shape[0]
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        if hi < n and hasattr(mmap, "MADV_WILLNEED"):
            _advise(mapped, start, source[hi:min(n, hi + step)], mmap.MADV_WILLNEED)
        piece = source[lo:hi]
        np.copyto(target[lo:hi], piece, casting="no")
        _advise(mapped, start, piece, mmap.MADV_DONTNEED)


def _advise(mapped: mmap.mmap, start: int, view: np.ndarray, advice: int) -> None:
    """``madvise`` the whole pages of ``mapped`` holding ``view``'s bytes."""
    if view.size == 0:
        return
    address = view.__array_interface__["data"][0]
    lo, hi = byte_span(address - start, view.shape, view.strides)
    hi += view.itemsize
    page = mmap.PAGESIZE
    lo -= lo % page
    hi = min(len(mapped), hi + -hi % page)
    mapped.madvise(advice, lo, hi - lo)


# ---------------------------------------- pages
#
# Which pages of a buffer were written since a checkpoint, from the kernel (Linux).
#
# A page of a *private* mapping of a file (``load(..., mmap_mode='c')``) reads
# the file until it is written;
# the first write gives the process its own anonymous copy.
# ``/proc/self/pagemap`` says which pages are such copies (present and not
# file-backed, or swapped out), so comparing memory with the file it maps
# reduces to reading 8 bytes per page. ``/proc/self/maps`` says which file, at
# which offset, every address range maps, so nothing here trusts a record of
# its own about what is mapped where.
#
# available      whether this process can use any of this
# Mapping        one file-backed mapping: addresses, file, offset, private or shared
# file_mappings  every file-backed mapping of this process
# overlapping    the mappings that cover parts of an address range, clipped to it
# entries        raw pagemap entries of a page range
# own_copies     the same flags from entries read before and after write protection
# private        whether an address range lies wholly in private mappings
# PAGE           the page size
#
# Nothing here maps or unmaps memory: the process's arrays stay its own.

PAGE = mmap.PAGESIZE
_PRESENT, _SWAPPED, _FILE = np.uint64(1 << 63), np.uint64(1 << 62), np.uint64(1 << 61)


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return libc


@cache
def available() -> bool:
    """Whether pagemap and maps both work in this process."""
    if _libc() is None:
        return False
    try:
        with open("/proc/self/pagemap", "rb", buffering=0) as f:
            f.seek((id(f) // PAGE) * 8)
            if len(f.read(8)) != 8:
                return False
        with open("/proc/self/maps", "rb"):
            pass
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class Mapping:
    """Addresses ``[lo, hi)`` map file ``(dev, ino)``; ``delta`` = file offset - address."""

    lo: int
    hi: int
    private: bool
    writable: bool
    dev: int
    ino: int
    delta: int

    def clipped(self, lo: int, hi: int) -> Mapping:
        """The mapping cut to the addresses ``[lo, hi)``."""
        return Mapping(max(self.lo, lo), min(self.hi, hi), self.private, self.writable,
                       self.dev, self.ino, self.delta)


def file_mappings(dev: int | None = None, ino: int | None = None) -> list[Mapping]:
    """Every file-backed mapping of this process (of file ``(dev, ino)`` if given), by address.

    From ``/proc/self/maps``; with a file given, only its lines are parsed.
    """
    out = []
    with open("/proc/self/maps", "rb") as f:
        data = f.read()
    lines = data.splitlines()
    if ino is not None and dev is not None:
        needle = f" {os.major(dev):02x}:{os.minor(dev):02x} {ino} ".encode()
        lines = [line for line in lines if needle in line]
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 5 or parts[4] == b"0":
            continue
        lo, hi = (int(x, 16) for x in parts[0].split(b"-"))
        major, minor = (int(x, 16) for x in parts[3].split(b":"))
        perms = parts[1]
        out.append(Mapping(lo, hi, perms[3:4] == b"p", perms[1:2] == b"w",
                           os.makedev(major, minor), int(parts[4]),
                           int(parts[2], 16) - lo))
    return out


def overlapping(maps: list[Mapping], lo: int, hi: int) -> list[Mapping]:
    """The mappings of ``maps`` (sorted, as ``file_mappings`` gives) inside ``[lo, hi)``, clipped."""
    return [m.clipped(lo, hi) for m in maps if m.lo < hi and m.hi > lo]


def entries(lo: int, npages: int) -> np.ndarray:
    """The raw pagemap entries of the ``npages`` pages from page-aligned ``lo``."""
    with open("/proc/self/pagemap", "rb", buffering=0) as f:
        raw = os.pread(f.fileno(), npages * 8, (lo // PAGE) * 8)
    if len(raw) != npages * 8:
        raise OSError(f"short read of /proc/self/pagemap at {lo:#x}")
    return np.frombuffer(raw, np.uint64)


def _own(e: np.ndarray) -> np.ndarray:
    own: np.ndarray = (((e & _PRESENT) != 0) & ((e & _FILE) == 0)) | ((e & _SWAPPED) != 0)
    return own


def own_copies(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Own copies of a private file mapping from its entries before and after write-protecting.

    Write protection turns untouched pages into markers that pagemap shows
    as swapped, so after it only present anonymous pages are sure to be
    copies; together with the copies seen before, a page written in between
    is still caught (unless also swapped out in those microseconds and
    untouched before: a page that was present before and shows swapped after
    counts as a copy).
    """
    present_before = (before & _PRESENT) != 0
    present_after = (after & _PRESENT) != 0
    copies: np.ndarray = _own(before) | (present_after & ((after & _FILE) == 0)) | (
        present_before & ((after & _SWAPPED) != 0))
    return copies


def private(lo: int, hi: int) -> bool:
    """Whether ``[lo, hi)`` lies wholly in private mappings (no shared memory, no holes).

    Only writes through this process's own page tables can change private
    memory, so only private memory may be tracked by write protection.
    """
    position = lo
    with open("/proc/self/maps", "rb") as f:
        for line in f:
            dash = line.index(b"-")
            space = line.index(b" ", dash)
            start, end = int(line[:dash], 16), int(line[dash + 1:space], 16)
            if end <= position:
                continue
            if start > position or line[space + 4:space + 5] != b"p":
                return False
            position = end
            if position >= hi:
                return True
    return False


# ---------------------------------------- blocks
#
# Block I/O: write blocks with their CRC-32s, read or map them back, verify them.
#
# Writing copies each block from the caller's memory in CHUNK pieces. The
# checksum of a piece of the caller's memory is computed on the bytes read
# back from the file (``pread``, from the page cache) by a worker thread behind
# the writes, so it describes exactly the bytes in the file even while another
# thread or process keeps writing the caller's arrays (a live shared-memory
# replay buffer gives a torn snapshot, as any copy would, but never a file
# that fails ``verify``). A background
# fdatasync every SYNC_EVERY bytes lets the disk start early, so the final fsync
# has less left to do. Reading fills new arrays with ``readinto`` (checksums, if
# asked for, run behind the reads); mapping maps the file once and views it.

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
        self.syncing: Future[None] | None = None
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


def submit_or_run(pool: ThreadPoolExecutor, fn: Callable[[*Ts], T], *args: *Ts) -> Future[T]:
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
        done: Future[T] = Future()
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
    ``_compression.verify_block``)."""
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
    blocks are left as None (``_compression.read_block`` reads them).
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


# ---------------------------------------- layout
#
# Layout: group the graph's arrays into blocks of memory and place them in the file.
#
# Arrays that view one base array, or overlap in memory, share one block: the
# span of memory from the lowest to the highest byte they touch, stored once, so
# they come back as views of one block. A block holding a single sparse view
# (more than half of its span unused) stores a C-order copy of its elements
# instead. A block holding one contiguous array of a dtype safetensors knows is
# declared with that dtype and shape, so safetensors readers get the array.
#
# Alignment. A block whose span starts at an address that is not a multiple
# of its largest item size (a view such as ``x.imag`` or ``x.view(uint8)[1:]``
# grouped with others) is stored after as many zero bytes as that address is
# past the multiple, so that every array keeps, relative to the 64-aligned
# block in the file and in memory, the alignment it had when saved: torch's
# kernels assume it (complex128 at a multiple of 16, where numpy needs 8).

PICKLE_TENSOR = "__pickle__"

#: Blocks at least this large keep the page offset of their memory in files laid out
#: for incremental saves (and are the blocks whose changes those saves track).
MIN_CONGRUENT = 64 * 1024


def congruence(source: object, nbytes: int) -> int | None:
    """The page offset a block should have in the file, or None for plain alignment."""
    if not isinstance(source, MemorySpan) or nbytes < MIN_CONGRUENT:
        return None
    return source.lo % PAGE if source.lo % ALIGN == 0 else 0


@dataclass(frozen=True)
class Layout:
    """Where everything goes: blocks (checksums still 0), their sources, arrays, tensors."""

    blocks: tuple[BlockEntry, ...]
    sources: tuple[Source, ...]         # what to write for each block
    arrays: tuple[ArrayEntry, ...]
    tensors: dict[str, TensorEntry]     # the safetensors table, padding included

    @property
    def data_bytes(self) -> int:
        """Bytes of all data blocks together."""
        return sum(b.nbytes for b in self.blocks)


@dataclass(frozen=True)
class _Group:
    members: list[int]                  # indices into the array table
    lo: int                             # start address of the span
    nbytes: int                         # bytes stored (lead, span; or the compact copy)
    lead: int = 0                       # zero bytes stored before the span (alignment)
    compact: bool = False               # store a C-order copy of its one array
    st_dtype: str = "U8"                # how the safetensors table declares it
    st_shape: tuple[int, ...] = ()      # set by _declare


def plan(entries: list[StoredArray], pickled: bytes | None = None) -> Layout:
    """The layout of ``entries`` (the array table), plus a pickle block if given."""
    groups = [_declare(g, entries) for g in _group(entries)]
    names = _block_names(groups, entries)
    arrays = []
    placement: dict[int, tuple[int, int, tuple[int, ...]]] = {}
    for index, g in enumerate(groups):
        for i in g.members:
            view = entries[i].view
            placement[i] = ((index, 0, _c_strides(view)) if g.compact else
                            (index, view.__array_interface__["data"][0] - g.lo + g.lead,
                             view.strides))
    for i, e in enumerate(entries):
        block, offset, strides = placement.get(i, (None, 0, _c_strides(e.view)))
        arrays.append(ArrayEntry(block, offset, tuple(e.view.shape), tuple(strides),
                                 e.view.dtype.str, e.path, e.torch, e.requires_grad))
    declared = [(name, g.st_dtype, g.st_shape, g.nbytes)
                for name, g in zip(names, groups, strict=True)]
    sources: list[Source] = [
        CompactCopy(entries[g.members[0]].view) if g.compact
        else MemorySpan(g.lo, g.nbytes - g.lead, g.lead) for g in groups]
    if pickled is not None:
        declared.append((PICKLE_TENSOR, "U8", (len(pickled),), len(pickled)))
        sources.append(RawBytes(pickled))
    tensors = tensor_table(declared)
    blocks = tuple(BlockEntry(name, tensors[name].start, nbytes, 0)
                   for name, _d, _s, nbytes in declared)
    return Layout(blocks, tuple(sources), tuple(arrays), tensors)


def _owner_key(entry: StoredArray) -> tuple[str, int]:
    """Equal for arrays that view one base array (or one tensor storage)."""
    if not isinstance(entry.obj, np.ndarray):
        return ("storage", entry.obj.untyped_storage().data_ptr())
    return ("object", id(memory_owner(entry.view)))


def _group(entries: list[StoredArray]) -> list[_Group]:
    """Non-empty arrays grouped by shared base or overlapping memory, in table order."""
    extents = [extent(entry.view) for entry in entries]
    owners = [_owner_key(entry) for entry in entries]
    groups = []
    for members, (lo, hi) in overlap_groups(extents, owners):
        lead = lo % max(entries[i].view.itemsize for i in members)
        groups.append(_Group(members, lo, hi - lo + lead, lead))
    return groups


def _declare(g: _Group, entries: list[StoredArray]) -> _Group:
    """The group with its storage decided: compact or not, and its safetensors declaration."""
    nbytes, compact, st_dtype = g.nbytes, False, "U8"
    st_shape: tuple[int, ...] | None = None
    if len(g.members) == 1:
        entry = entries[g.members[0]]
        view = entry.view
        # BF16 would be exact, but safetensors.numpy cannot read it: use U8.
        st = None if entry.torch == "bfloat16" else ST_DTYPES.get(view.dtype.str)
        if nbytes > 2 * view.nbytes:
            # A sparse view of a large array: store only its elements.
            compact, nbytes = True, view.nbytes
        if st is not None and nbytes == view.nbytes:
            if compact or view.flags.c_contiguous:
                st_dtype, st_shape = st, tuple(view.shape)
            elif view.flags.f_contiguous:
                st_dtype, st_shape = st, tuple(reversed(view.shape))
    if st_shape is None:
        st_shape = (nbytes,)
    return _Group(g.members, g.lo, nbytes, 0 if compact else g.lead, compact, st_dtype,
                  st_shape)


def _block_names(groups: list[_Group], entries: list[StoredArray]) -> list[str]:
    """A distinct tensor name per block: the path of its first array."""
    used: set[str] = set()
    names = []
    for g in groups:
        base = entries[g.members[0]].path or "root"
        # Names starting with "__" are the format's own (__metadata__, __pad__.N, ...).
        base = name = base if not base.startswith("__") else f"array.{base}"
        suffix = 0
        while name in used:
            suffix += 1
            name = f"{base}#{suffix}"
        used.add(name)
        names.append(name)
    return names


def _c_strides(arr: np.ndarray) -> tuple[int, ...]:
    strides, step = [], arr.itemsize
    for n in reversed(arr.shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def tensor_table(blocks: list[tuple[str, str, tuple[int, ...], int]]) -> dict[str, TensorEntry]:
    """Tensor entries for ``(name, dtype, shape, nbytes)`` blocks, with padding after each.

    Each block is followed by a ``__pad__.K`` tensor of zeros when needed so
    that the next one starts ALIGN-aligned in the file (the data section starts
    aligned: the header is padded so that 8 + its length is a multiple).
    """
    table: dict[str, TensorEntry] = {}
    offset = pads = 0
    for tname, dtype, shape, nbytes in blocks:
        table[tname] = TensorEntry(dtype, shape, offset, offset + nbytes)
        offset += nbytes
        pad = -offset % ALIGN
        if pad:
            table[f"__pad__.{pads}"] = TensorEntry("U8", (pad,), offset, offset + pad)
            pads += 1
            offset += pad
    return table
