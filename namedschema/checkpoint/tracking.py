"""Which bytes of a checkpoint's blocks changed, and memory made so the kernel can tell.

Finding what changed without reading everything:

* Memory that is a private mapping of the checkpoint file at the offset of
  its block (a buffer loaded with ``mmap_mode='c'``, or memory remapped by an
  earlier save, below) is compared by the kernel: pages written since they
  were read from the file are the process's own copies, listed in
  ``/proc/self/pagemap`` (``pages.py``). Nothing a program can do to such a
  page escapes this: numpy, torch, C extensions and other threads all write
  through the same page tables.
* After a save, large blocks whose memory namedschema allocated itself
  (``buffer_from_example``) or that already were a private file mapping are
  replaced, at the same addresses, by a private mapping of the file just
  written; the written pages of tracked mappings are dropped once saved, so
  they read the file again. From then on they are tracked as above.
* Everything else (small blocks, the partial pages at both ends of a block,
  shared memory that other processes write, sparse views) is compared with
  the file byte for byte. That reads it, so it costs time, but it never
  misses a change.

others_map     whether memory outside the saved object maps the file's data
congruence     the page offset a block should have in the file to be trackable
Scan           finds the changed byte ranges of the blocks of one save
Change         one changed range: block, offset, the new bytes
TooMuch        raised by Scan when more changed than its budget
FileWindow     views of a file through a bounded, moving map
crc_updates    new block CRC-32s and the journal pieces for a list of changes
write_in_place copy changed data into the file through a shared map
track_after_full_save    remap large blocks onto a file just written in full
track_after_incremental  drop saved copies, remap untracked large blocks
"""

from __future__ import annotations

import ctypes
import mmap
import os
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _owned_memory
from ..errors import FormatError
from . import pages
from .blocks import MemorySpan
from .constants import ALIGN
from .crc import updated_crc
from .header import Header

__all__ = ["others_map", "congruence", "Scan", "Change", "TooMuch", "crc_updates",
           "track_after_full_save", "track_after_incremental", "write_in_place", "FileWindow",
           "MIN_TRACKED"]

PAGE = pages.PAGE
#: Blocks at least this large are placed in the file at the page offset of their memory.
MIN_TRACKED = 64 * 1024
_PIECE = 4 * 2**20          # bytes compared, read or journalled at a time
#: Budget cost of one changed range, in bytes, for files of 1 GiB and more (smaller
#: files: 1/16384 of their data, at least a page): per-range work (checksums,
#: journal entry, in-place write, page hand-back) makes scattered changes dearer.
RANGE_COST = 64 * 1024


def congruence(source: Any, nbytes: int) -> int | None:
    """The page offset a block should have in the file, or None for plain alignment."""
    if not isinstance(source, MemorySpan) or nbytes < MIN_TRACKED:
        return None
    return source.lo % PAGE if source.lo % ALIGN == 0 else 0


def _may_remap(maps: list[pages.Mapping], lo: int, hi: int) -> bool | None:
    """Whether ``[lo, hi)`` may be remapped: None if not, else whether it is writable.

    Memory namedschema allocated, or memory wholly covered by private file
    mappings (whose owner only ever unmaps them), may be.
    """
    if _owned_memory.owns(lo, hi):
        return True
    covered = pages.overlapping(maps, lo, hi)
    if not covered or not all(m.private for m in covered):
        return None
    position = lo
    for m in covered:
        if m.lo != position:
            return None
        position = m.hi
    if position != hi:
        return None
    writable = {m.writable for m in covered}
    return writable.pop() if len(writable) == 1 else None


def track_after_full_save(path, written, data_start, blocks, sources) -> None:
    """Remap large blocks onto the file just written, so the next save sees what changes."""
    if not pages.available():
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (written.st_dev, written.st_ino):
            return  # replaced by someone else meanwhile
        maps = pages.file_mappings()
        for block, source in zip(blocks, sources, strict=True):
            if congruence(source, block.nbytes) is None:
                continue
            _remap_block(maps, fd, data_start + block.start, source.lo, block.nbytes)
    finally:
        os.close(fd)


def _remap_block(maps, fd: int, file_start: int, lo: int, nbytes: int) -> None:
    delta = file_start - lo
    first, last = lo + (-lo % PAGE), (lo + nbytes) // PAGE * PAGE
    if delta % PAGE or last <= first:
        return
    writable = _may_remap(maps, first, last)
    if writable is None:
        return
    try:
        pages.remap(first, last - first, fd, first + delta, writable)
    except OSError:
        pass  # stays untracked: compared byte for byte at the next save


class TooMuch(Exception):
    """More changed than an incremental save is worth."""


@dataclass
class Change:
    block: int
    start: int                  # offset in the block
    data: Any                   # the new bytes (a view of the caller's memory, or a copy)
    forget: bool                # pages of a tracked mapping: drop them once saved


def others_map(maps: list[pages.Mapping], dev: int, ino: int, spans: list[tuple[int, int]],
               file_ranges: list[tuple[int, int]]) -> bool:
    """Whether memory outside ``spans`` (the saved object's) maps ``file_ranges`` of the file.

    Such memory (another load of the file with ``mmap_mode``, say) reads the
    file where it was not written, so changing those bytes in place would
    change it: the save must then write a new file instead.
    """
    spans = sorted(spans)
    for m in maps:
        if (m.dev, m.ino) != (dev, ino):
            continue
        position = m.lo
        pieces = []
        for lo, hi in spans:
            if hi <= position or lo >= m.hi:
                continue
            if lo > position:
                pieces.append((position, lo))
            position = max(position, hi)
        if position < m.hi:
            pieces.append((position, m.hi))
        for lo, hi in pieces:
            flo, fhi = lo + m.delta, hi + m.delta
            if any(flo < end and fhi > start for start, end in file_ranges):
                return True
    return False


def _raw(lo: int, nbytes: int) -> np.ndarray:
    """A view (no copy) of ``nbytes`` of the caller's memory at address ``lo``."""
    return np.frombuffer(memoryview((ctypes.c_ubyte * nbytes).from_address(lo)), np.uint8)


def _page_runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(first, stop) index runs where ``flags`` is True."""
    if not flags.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], flags.view(np.int8), [0]))))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


class Scan:
    """Finds the changed byte ranges of every block of one save."""

    def __init__(self, fd: int, st: os.stat_result, old: Header, budget: int):
        self.fd, self.old = fd, old
        self.dev, self.ino = st.st_dev, st.st_ino
        # Only the checkpoint's own mappings matter for tracking (a fast parse).
        self.maps = pages.file_mappings(self.dev, self.ino) if pages.available() else []
        self.budget = budget
        self.changed = 0
        self.cost = 0               # estimated work, in bytes, against the budget
        # small files: a range costs less than a 64 KiB write (a full save is cheap too)
        self.range_cost = min(RANGE_COST, max(PAGE, old.data_bytes // 16384))
        self.tracked = 0
        self.changes: list[Change] = []
        self._scratch = np.empty(_PIECE, np.uint8)

    def _add(self, change: Change) -> None:
        self.changed += memoryview(change.data).nbytes
        self.cost += 2 * memoryview(change.data).nbytes + self.range_cost
        if self.cost > self.budget:
            raise TooMuch
        self.changes.append(change)

    def memory(self, index: int, lo: int, nbytes: int) -> list[tuple[int, int]]:
        """Scan a block held in memory at ``lo``; return its untracked byte ranges."""
        block = _raw(lo, nbytes)
        file_start = self.old.block_file_start(index)
        delta = file_start - lo
        untracked, position = [], lo
        for m in pages.overlapping(self.maps, lo, lo + nbytes):
            if not (m.private and (m.dev, m.ino) == (self.dev, self.ino)
                    and m.delta == delta):
                continue
            first, last = m.lo + (-m.lo % PAGE), m.hi // PAGE * PAGE
            if last <= first:
                continue
            if first > position:
                untracked.append((position - lo, first - lo))
            position = last
            self.tracked += last - first
            flags = pages.written_pages(first, (last - first) // PAGE)
            for a, b in _page_runs(flags):
                for s in range(first + a * PAGE, first + b * PAGE, _PIECE):
                    e = min(s + _PIECE, first + b * PAGE)
                    self._add(Change(index, s - lo, block[s - lo:e - lo], True))
        if position < lo + nbytes:
            untracked.append((position - lo, nbytes))
        for s, e in untracked:
            self._compare(index, s, e, lambda a, b: block[a:b], lo % PAGE, False)
        return untracked

    def compact(self, index: int, source: Any) -> None:
        """Scan a block stored as a compact copy of a sparse view."""
        position = 0
        for chunk, _copy in source.chunks():
            data = np.frombuffer(chunk, np.uint8)
            self._compare(index, position, position + data.nbytes,
                          lambda a, b, data=data, p=position: data[a - p:b - p], 0, True)
            position += data.nbytes

    def _compare(self, index: int, start: int, stop: int, get, phase: int,
                 copy: bool) -> None:
        """Compare block bytes ``[start, stop)`` with the file, page by page.

        ``get(a, b)`` gives block bytes ``[a, b)``; ``phase`` is the page offset
        of block byte 0 in memory; ``copy`` keeps a copy of changed bytes (for
        buffers that ``get`` makes) rather than a view of the caller's memory.
        """
        file_start = self.old.block_file_start(index)
        for s in range(start, stop, _PIECE):
            e = min(s + _PIECE, stop)
            new = get(s, e)
            old: Any = self._scratch[:e - s]
            if os.preadv(self.fd, [memoryview(old)], file_start + s) != e - s:
                raise FormatError(f"{self.old.name!r}: file shrank during an incremental save")
            differ = np.not_equal(new, old)
            if not differ.any():
                continue
            # Page-granular runs, in memory pages.
            lead = (phase + s) % PAGE
            padded = np.zeros(lead + differ.size + (-(lead + differ.size) % PAGE), bool)
            padded[lead:lead + differ.size] = differ
            pages_differ: Any = padded.reshape(-1, PAGE).any(axis=1)
            for a, b in _page_runs(pages_differ):
                cs, ce = max(a * PAGE - lead, 0), min(b * PAGE - lead, e - s)
                piece = new[cs:ce]
                self._add(Change(index, s + cs, piece.copy() if copy else piece, False))


class FileWindow:
    """Views of a file's bytes through a map of at most WINDOW bytes at a time.

    Ranges must come in increasing order. Only one window is mapped at once,
    so the pages it touches stay within a bound (they count as the process's
    resident memory while mapped).
    """

    WINDOW = 32 * 2**20

    def __init__(self, fd: int, size: int, writable: bool):
        self.fd, self.size = fd, size
        self.access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
        self.mapped: mmap.mmap | None = None
        self.start = self.stop = 0

    def view(self, offset: int, n: int) -> memoryview:
        """A view of file bytes ``[offset, offset + n)`` (released before the next call)."""
        if self.mapped is None or offset < self.start or offset + n > self.stop:
            self.close()
            start = offset // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
            length = min(max(self.WINDOW, offset + n - start), self.size - start)
            self.mapped = mmap.mmap(self.fd, length, access=self.access, offset=start)
            self.start, self.stop = start, start + length
        return memoryview(self.mapped)[offset - self.start:offset - self.start + n]

    def close(self) -> None:
        if self.mapped is not None:
            self.mapped.close()
            self.mapped = None


def crc_updates(fd: int, old: Header, changes: list[Change]) -> tuple[dict[int, int], list]:
    """New CRC-32 per changed data block, and the journal pieces (file offset, bytes, crc).

    The old bytes are read through a map of the file (no system call per range).
    """
    by_block: dict[int, list[tuple[int, int]]] = {}
    pieces = []
    starts = [old.block_file_start(i) for i in range(len(old.blocks))]
    if os.fstat(fd).st_size < old.file_size:
        raise FormatError(f"{old.name!r}: file shrank during an incremental save")
    window = FileWindow(fd, old.file_size, writable=False)
    try:
        for c in changes:
            data = memoryview(c.data).cast("B")
            n = data.nbytes
            file_off = starts[c.block] + c.start
            new_crc = zlib.crc32(data)
            before = window.view(file_off, n)
            delta = zlib.crc32(before) ^ new_crc
            before.release()
            by_block.setdefault(c.block, []).append((c.start + n, delta))
            pieces.append((file_off, data, new_crc))
    finally:
        window.close()
    crcs = {i: updated_crc(old.blocks[i].crc32, old.blocks[i].nbytes, sorted(ch))
            for i, ch in by_block.items()}
    return crcs, pieces


def write_in_place(fd: int, size: int, pieces: list) -> None:
    """Copy data ``pieces`` (file offset, bytes, crc; in file order) into the file.

    With ``pwrite`` (measured faster here than copying through a shared map,
    whose first write to each page costs a fault and the file system's
    bookkeeping).
    """
    del size  # (the file's size: pieces lie inside it)
    for offset, data, _crc in pieces:
        view = memoryview(data).cast("B")
        done = 0
        while done < view.nbytes:
            done += os.pwrite(fd, view[done:], offset + done)


def track_after_incremental(scan: Scan, sources, fd: int, old: Header) -> None:
    """Saved pages read the file again; untracked large blocks are remapped onto it."""
    for c in scan.changes:
        if c.forget:
            lo = sources[c.block].lo + c.start
            try:
                pages.forget_pages(lo, memoryview(c.data).nbytes)
            except OSError:
                pass  # they stay the process's copies: saved again next time
    # Only memory namedschema allocated can have become trackable since the last save.
    untracked = [i for i, source in enumerate(sources)
                 if congruence(source, old.blocks[i].nbytes) is not None
                 and _owned_memory.owns(source.lo, source.lo + source.nbytes)
                 and not any(m.ino == scan.ino and m.dev == scan.dev for m in
                             pages.overlapping(scan.maps, source.lo,
                                               source.lo + source.nbytes))]
    if not untracked or not pages.available():
        return
    # A descriptor of its own: a map keeps its file open, and the save's one is locked.
    own = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    maps = pages.file_mappings()
    try:
        for i in untracked:
            _remap_block(maps, own, old.block_file_start(i), sources[i].lo,
                         sources[i].nbytes)
    finally:
        os.close(own)


