"""Which bytes of a checkpoint's blocks changed since the last save, leaving memory alone.

Nothing here maps anything onto the checkpoint file: the arrays a program
holds stay ordinary memory of that program, whatever happens to the file.
For each block held in memory, the pages that may have changed (candidates)
come from, in order of preference:

* write protection (``writeprotect``: userfaultfd async + PAGEMAP_SCAN),
  armed at the last save to this file, for private memory: the kernel lists
  the pages written since, by any route through this process's page tables;
* the per-page CRC-32s of the last save (``baselines``): the portable
  fallback, also for shared memory that other processes write;
* for a private map of this very file at the block's offset (a buffer loaded
  with ``mmap_mode='c'``), the pages the process has its own copy of
  (``pages.own_copies``): the others are the file;
* otherwise every page.

Candidates are then copied aside (a private snapshot: the bytes the save
writes, whatever the program does meanwhile) and compared with the file; only
the byte runs that differ are written. Baselines are trusted only while the
file is as this process's last save left it, so another writer (a second
process, ``cp``, a truncation) can only make a save compare more, never miss.

others_map     whether memory outside the saved object maps the file's data
congruence     the page offset a block should have in the file
Scan           finds the changed byte ranges of the blocks of one save
Change         one changed range: block, offset, a private copy of the new bytes
TooMuch        raised by Scan when more changed than its budget
crc_updates    new block CRC-32s and the journal pieces for a list of changes
write_in_place write changed data into the file
arm_for_full_save  arm write protection before a full save reads memory
warm_spare     ready a snapshot buffer for the next background incremental save
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _process
from ..errors import FormatError
from . import baselines, pages, writeprotect
from .blocks import MemorySpan
from .crc import updated_crc
from .header import Header
from .layout import MIN_CONGRUENT, congruence

__all__ = ["others_map", "congruence", "Scan", "Change", "TooMuch", "crc_updates",
           "write_in_place", "MIN_TRACKED", "arm_for_full_save", "mode", "compare_only",
           "warm_spare"]

PAGE = pages.PAGE
#: Blocks at least this large are placed in the file at the page offset of their memory,
#: and tracked by write protection or page checksums.
MIN_TRACKED = MIN_CONGRUENT    # the blocks laid out page-congruent (layout)
_PIECE = 4 * 2**20          # bytes compared, read or journalled at a time
#: Budget cost of one changed range, in bytes, for files of 1 GiB and more (smaller
#: files: 1/16384 of their data, at least a page): per-range work (checksums,
#: journal entry, in-place write) makes scattered changes dearer.
RANGE_COST = 64 * 1024
#: Differing runs closer than this are written as one range.
MERGE_GAP = 512
#: Bytes are compared with the file in grains of this many (eight 64-bit words).
GRAIN = 64
#: A background save's snapshot buffer is kept for the next one up to this size.
SPARE_LIMIT = 512 * 2**20
#: After a full background save, a snapshot buffer of this share of the data is made ready.
SPARE_FRACTION = 1 / 32
#: Snapshots larger than this are gathered by two threads (np.take releases the GIL).
_SPLIT = 32 * 2**20


#: The tracking every later save of this process uses instead of the best available
#: (``"checksums"`` or ``"compare"``), None for the best. Set by ``compare_only`` in a
#: snapshot child, and by tests and benchmarks that exercise one route
#: (``monkeypatch.setattr(tracking, "_forced", ...)``). Nothing else selects a route.
_forced: str | None = None


def mode() -> str:
    """The tracking in force: ``writeprotect`` where the kernel has it, else ``checksums``
    (``compare`` in a snapshot child: every save compares with the file)."""
    if _forced is not None:
        return _forced
    return "writeprotect" if writeprotect.available() else "checksums"


def compare_only() -> None:
    """Make this process's saves compare memory with the file, arming nothing.

    For a snapshot child (``background``): its baselines went at the fork and
    it saves once, so arming write protection or taking page checksums would
    be work thrown away.
    """
    global _forced
    _forced = "compare"


def arm_for_full_save(sources: Any, nbytes: list[int]) -> list[baselines.Block | None]:
    """Arm write protection on the large private blocks a full save is about to write."""
    out: list[baselines.Block | None] = []
    armed = mode() == "writeprotect"
    for source, n in zip(sources, nbytes, strict=True):
        if not isinstance(source, MemorySpan) or n < MIN_TRACKED:
            out.append(None)
            continue
        token = writeprotect.arm(source.lo, source.lo + n) if armed and pages.private(
            source.lo, source.lo + n) else None
        out.append(baselines.Block(source.lo, n, token))
    return out


class TooMuch(Exception):
    """More changed than an incremental save is worth."""


@dataclass(slots=True)
class Change:
    """One run of changed bytes in a block, with the CRCs of the old and new bytes."""

    block: int
    start: int                  # offset in the block
    data: np.ndarray            # a private copy of the new bytes (uint8)
    old_crc: int                # CRC-32 of the bytes they replace in the file
    new_crc: int                # CRC-32 of ``data``


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


def _page_runs(flags: np.ndarray) -> np.ndarray:
    """(first, stop) index runs where ``flags`` is True, as an (n, 2) int64 array."""
    if not flags.any():
        return writeprotect.NO_RUNS
    edges = np.flatnonzero(np.diff(np.concatenate(([0], flags.view(np.int8), [0]))))
    return edges.astype(np.int64).reshape(-1, 2)


def _byte_runs(new: np.ndarray, old: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) runs where ``new`` and ``old`` differ, in GRAIN-byte grains, runs
    closer than MERGE_GAP joined. Compared as 64-bit words (both start 8-aligned)."""
    n = new.size
    whole = n // GRAIN * GRAIN
    words = np.not_equal(new[:whole].view(np.uint64), old[:whole].view(np.uint64))
    # a grain's 8 word flags are 8 bytes: one uint64 each (``.any(axis=1)`` over rows of
    # 8 took 6 ms a 4 MiB piece, this 0.2 ms)
    grains = words.view(np.uint64) != 0
    if whole < n:
        grains = np.append(grains, bool(np.not_equal(new[whole:], old[whole:]).any()))
    if not grains.any():
        return []
    edges = np.flatnonzero(np.diff(grains.view(np.int8), prepend=np.int8(0),
                                   append=np.int8(0)))
    starts, stops = edges[::2], edges[1::2]
    if starts.size > 1:
        keep = starts[1:] - stops[:-1] >= MERGE_GAP // GRAIN
        starts = np.concatenate((starts[:1], starts[1:][keep]))
        stops = np.concatenate((stops[:-1][keep], stops[-1:]))
    return [(a * GRAIN, min(b * GRAIN, n))
            for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]


class Scan:
    """Finds the changed byte ranges of every block of one save.

    ``blocks`` is the baseline the save leaves (``baselines.record`` it once
    the save succeeded; a failed save must ``baselines.forget`` the file,
    since write protection was re-armed here).
    """

    def __init__(self, fd: int, st: os.stat_result, old: Header, budget: int,
                 real_path: str, defer: bool = False,
                 origin: tuple[int | None, ...] | None = None):
        self.fd, self.old = fd, old
        # defer: keep copies of the candidate bytes (the snapshot) and compare them with
        # the file later, in another thread (compare_deferred): a background save.
        self.defer = defer
        self.deferred: list[Callable[[], None]] = []
        # where page copies go: the kept buffer (taken at the first block), then fresh ones
        self.snapshots: list[np.ndarray] = []
        self._arena: np.ndarray | None = None
        self._used = 0
        self.deferred_bytes = 0
        self.dev, self.ino = st.st_dev, st.st_ino
        self.base = baselines.lookup(real_path, st, old)
        if self.base is not None and origin is not None:
            # a relaid save (``relayout``): block i of ``old`` was block origin[i] of the file
            self.base = baselines.Baseline(self.base.identity, self.base.checkpoint_id, [
                None if k is None else self.base.block_at(k) for k in origin])
        self.mode = mode()
        # This file's own mappings (a buffer loaded with mmap_mode='c'), by a fast parse.
        self.maps = pages.file_mappings(self.dev, self.ino) if pages.available() else []
        self.budget = budget
        self.changed = 0
        self.cost = 0               # estimated work, in bytes, against the budget
        # small files: a range costs less than a 64 KiB write (a full save is cheap too)
        self.range_cost = min(RANGE_COST, max(PAGE, old.data_bytes // 16384))
        self.tracked = 0            # bytes whose candidates came from the kernel
        self.changes: list[Change] = []
        self.blocks: list[baselines.Block | None] = [None] * len(old.blocks)
        self._old = np.empty(_PIECE, np.uint8)
        self._new = np.empty(_PIECE, np.uint8)
        self._old_mv, self._new_mv = self._old.data, self._new.data

    def _add(self, change: Change) -> None:
        self.changed += change.data.nbytes
        self.cost += 2 * change.data.nbytes + self.range_cost
        if self.cost > self.budget:
            raise TooMuch
        self.changes.append(change)

    def memory(self, index: int, lo: int, nbytes: int) -> None:
        """Scan block ``index``, held in memory at ``[lo, lo + nbytes)``."""
        hi, phase = lo + nbytes, lo % PAGE
        npages = (phase + nbytes + PAGE - 1) // PAGE
        known = self.base.block(index, lo, nbytes) if self.base is not None else None
        trackable = nbytes >= MIN_TRACKED and self.mode != "compare"
        private = trackable and pages.private(lo, hi)
        token = None
        candidates: np.ndarray | None = None     # page runs (n, 2), in block pages
        mapped = None
        if private and self.mode == "writeprotect":
            found = (writeprotect.scan_and_token(lo, hi, known.token)
                     if known is not None and known.token is not None else None)
            if found is not None:
                runs, token = found
                self.tracked += int((runs[:, 1] - runs[:, 0]).sum())
                edges = np.array([[0, 1], [npages - 1, npages]], np.int64)  # partial pages
                candidates = np.concatenate(((runs - (lo - phase)) // PAGE, edges))
            else:
                mapped = self._mapped_pages(index, lo, nbytes)   # before arming (see pages)
                token = writeprotect.arm(lo, hi)  # before reading: later writes are seen
        block = _raw(lo, nbytes)
        digests = None
        if token is None and trackable:
            if known is not None and known.digests is not None:
                digests = known.digests.copy()
                if candidates is None:
                    fresh = baselines.page_crcs(block, phase)
                    candidates = _page_runs(fresh != digests)
            elif candidates is None:
                digests = np.zeros(npages, np.uint32)   # all pages are compared below
        if candidates is None:
            if mapped is None:
                mapped = self._mapped_pages(index, lo, nbytes)
            candidates = self._own_copies(npages, mapped)
            if digests is not None and not np.array_equal(candidates, [[0, npages]]):
                digests = None  # pages left out are not read: no checksums for them
        candidates = writeprotect.union(candidates)
        if self.defer:
            self._snapshot(index, lo - phase, npages, candidates, phase, nbytes, digests)
        else:
            for group in _groups(candidates, phase, nbytes, packed=False):
                self._compare(index, group, block, phase, digests)
        self.blocks[index] = baselines.Block(lo, nbytes, token, digests)

    def _snapshot(self, index: int, base: int, npages: int, runs: np.ndarray, phase: int,
                  nbytes: int, digests: np.ndarray | None) -> None:
        """Copy the candidate pages of a block aside, side by side, in one gather.

        The copy is what the save writes, whatever the program does next; it is
        compared with the file later (``compare_deferred``, in the writer
        thread). Whole pages are copied (the block's first and last pages may
        hold other memory's bytes; those are never compared or written), with
        one ``np.take`` over the block's pages rather than a copy per run: the
        caller's stall is then one memory-bandwidth pass over the candidates.
        """
        lengths = runs[:, 1] - runs[:, 0]
        total = int(lengths.sum())
        self.deferred_bytes += total * PAGE
        if self.deferred_bytes > self.budget:
            raise TooMuch
        if not total:
            return
        where = np.arange(total) + np.repeat(runs[:, 0] - np.cumsum(lengths) + lengths, lengths)
        memory = _raw(base, npages * PAGE).reshape(npages, PAGE)
        snap = self._room(total * PAGE).reshape(total, PAGE)
        _gather(memory, where, snap)
        self.deferred.append(functools.partial(
            self._compare_all, index, _groups(runs, phase, nbytes, packed=True),
            snap.reshape(-1), phase, digests))

    def _room(self, nbytes: int) -> np.ndarray:
        """``nbytes`` of snapshot space: from the kept buffer while it lasts, else fresh."""
        if self._arena is None:
            self._arena = _spare.take()
            self.snapshots.append(self._arena)
        if self._used + nbytes <= self._arena.size:
            self._used += nbytes
            return self._arena[self._used - nbytes:self._used]
        fresh = np.empty(nbytes, np.uint8)
        self.snapshots.append(fresh)
        return fresh

    def _compare_all(self, index: int, groups: Iterator[list[tuple[int, int, int]]],
                     source: np.ndarray, phase: int, digests: np.ndarray | None) -> None:
        for group in groups:
            self._compare(index, group, source, phase, digests)

    def _mapped_pages(self, index: int, lo: int, nbytes: int) -> list:
        """Where the block's memory privately maps this file at its offset (a load with
        ``mmap_mode='c'``): ``(first page, stop page, address, pagemap entries)``."""
        phase, hi = lo % PAGE, lo + nbytes
        delta = self.old.block_file_start(index) - lo
        out = []
        for m in pages.overlapping(self.maps, lo, hi):
            if not (m.private and (m.dev, m.ino) == (self.dev, self.ino) and m.delta == delta):
                continue
            first, last = m.lo + (-m.lo % PAGE), m.hi // PAGE * PAGE
            if last > first:
                fp, lp = (first - lo + phase) // PAGE, (last - lo + phase) // PAGE
                out.append((fp, lp, first, pages.entries(first, lp - fp)))
        return out

    def _own_copies(self, npages: int, mapped: list) -> np.ndarray:
        """Page runs that may differ from the file: all but pages still mapping it."""
        runs, position = [], 0
        for fp, lp, first, before in mapped:
            if fp > position:
                runs.append(np.array([[position, fp]], np.int64))
            self.tracked += (lp - fp) * PAGE
            flags = pages.own_copies(before, pages.entries(first, lp - fp))
            runs.append(_page_runs(flags) + fp)
            position = lp
        if position < npages:
            runs.append(np.array([[position, npages]], np.int64))
        return np.concatenate(runs) if runs else writeprotect.NO_RUNS

    def compact(self, index: int, source: Any) -> None:
        """Scan a block stored as a compact copy of a sparse view."""
        position = 0
        for chunk, _copy in source.chunks():
            data = np.frombuffer(chunk, np.uint8)
            if self.defer:   # the snapshot: a private copy, compared later
                data = data.copy()
                self.deferred_bytes += data.nbytes
                if self.deferred_bytes > self.budget:
                    raise TooMuch
            for p in range(0, data.size, _PIECE):
                piece = data[p:p + _PIECE]
                ranges = [(position + p, position + p + piece.size, 0)]
                if self.defer:
                    self.deferred.append(functools.partial(
                        self._compare, index, ranges, piece, 0, None))
                else:
                    self._compare(index, ranges, piece, 0, None)
            position += data.nbytes

    def _compare(self, index: int, ranges: list[tuple[int, int, int]], source: np.ndarray,
                 phase: int, digests: np.ndarray | None) -> None:
        """Compare block bytes ``ranges`` (at most _PIECE in all) with the file.

        Each range ``(start, stop, at)`` is block bytes ``[start, stop)``, found
        at ``source[at:at + stop - start]``; they are copied side by side (the
        changes keep private copies), the file's bytes read beside them, and
        compared in one go, so many small ranges cost little more than one.
        ``phase`` is the page offset of block byte 0 in memory; ``digests`` (if
        given) receive the CRC-32 of each memory page the ranges cover.
        """
        # (memoryview slices: a scattered change costs its bytes and ~3 us, not ~10 us of
        # numpy calls; random 1% of 1 GiB is 1,500 ranges and 2,700 changes)
        file_start = self.old.block_file_start(index)
        new_mv, old_mv, src = self._new_mv, self._old_mv, source.data.cast("B")
        bounds = [0]
        lo = 0
        for s, e, at in ranges:
            n = e - s
            new_mv[lo:lo + n] = src[at:at + n]
            if os.preadv(self.fd, [old_mv[lo:lo + n]], file_start + s) != n:
                raise FormatError(f"{self.old.name!r}: file shrank during an incremental save")
            if digests is not None:
                first = (phase + s) // PAGE
                crcs = baselines.page_crcs(self._new[lo:lo + n], (phase + s) % PAGE)
                digests[first:first + crcs.size] = crcs
            lo += n
            bounds.append(lo)
        found = []      # (where in new, its end, block offset), split where the ranges meet
        i = 0
        for a, b in _byte_runs(self._new[:lo], self._old[:lo]):
            while bounds[i + 1] <= a:
                i += 1
            while a < b:
                end = min(b, bounds[i + 1])
                found.append((a, end, ranges[i][0] + a - bounds[i]))
                a = end
                if a < b:
                    i += 1
        if not found:
            return
        # one private copy for all of them; both CRCs while the bytes are in cache
        kept = np.empty(sum(end - a for a, end, _start in found), np.uint8)
        kept_mv = kept.data
        at = 0
        for a, end, start in found:
            n = end - a
            piece = kept_mv[at:at + n]
            piece[:] = new_mv[a:end]
            self._add(Change(index, start, kept[at:at + n], zlib.crc32(old_mv[a:end]),
                             zlib.crc32(piece)))
            at += n

    def compare_deferred(self) -> None:
        """Compare the copies a deferring scan kept with the file; fills ``changes``.

        Never raises TooMuch: the copies are all there is left to save from.
        """
        deferred, self.deferred, self.defer = self.deferred, [], False
        self.budget = sys.maxsize
        for compare in deferred:
            compare()
        self.release()

    def release(self) -> None:
        """Hand the snapshot's page copies back (the changes keep copies of their own)."""
        snapshots, self.snapshots = self.snapshots, []
        for snap in snapshots:
            _spare.give(snap)


class _Spare:
    """One snapshot buffer kept from a background save for the next.

    Its pages stay resident, so the next save's copy does not pay a page
    fault per page (about a third of the stall of a fresh buffer, measured
    on 135 MiB). Kept up to SPARE_LIMIT; a larger need allocates afresh.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer: np.ndarray | None = None

    def take(self) -> np.ndarray:
        """The kept buffer (empty if none), now the caller's until it gives it back."""
        with self._lock:
            buffer, self._buffer = self._buffer, None
        return np.empty(0, np.uint8) if buffer is None else buffer

    def warm(self, nbytes: int) -> None:
        """Have a buffer of at least ``nbytes`` (at most SPARE_LIMIT) with its pages in."""
        nbytes = min(nbytes, SPARE_LIMIT) // PAGE * PAGE
        with self._lock:
            if nbytes <= 0 or self._buffer is not None and self._buffer.size >= nbytes:
                return
        buffer = np.empty(nbytes, np.uint8)
        ctypes.memset(buffer.ctypes.data, 0, nbytes)   # the page faults, without the GIL
        self.give(buffer)

    def give(self, buffer: np.ndarray) -> None:
        """Offer a 1-d buffer nobody uses any more; the largest within SPARE_LIMIT is kept."""
        if buffer.size == 0 or buffer.size > SPARE_LIMIT:
            return
        with self._lock:
            if self._buffer is None or self._buffer.size < buffer.size:
                self._buffer = buffer


_spare = _Spare()


def _forget_spare_in_child() -> None:
    global _spare
    _spare = _Spare()   # a fork child never saves in the background from its parent's buffer


_process.on_fork_child("checkpoint.tracking", _forget_spare_in_child)


def warm_spare(data_bytes: int) -> None:
    """Ready the next background incremental save's snapshot buffer (in a writer thread).

    Sized SPARE_FRACTION of the checkpoint's data (at most SPARE_LIMIT): a
    fresh buffer costs a page fault per page at the first copy into it, which
    was most of the first incremental save's stall (93 of 103 ms for 80 MiB).
    """
    _spare.warm(int(data_bytes * SPARE_FRACTION))


def _gather(memory: np.ndarray, where: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = memory[where]``, split over two threads when large."""
    if out.nbytes < _SPLIT:
        np.take(memory, where, axis=0, out=out, mode="clip")   # "clip": no buffering
        return
    half = where.size // 2
    failed: list[BaseException] = []

    def first_half() -> None:
        try:
            np.take(memory, where[:half], axis=0, out=out[:half], mode="clip")
        except BaseException as exc:   # handed to the caller: never a half-filled snapshot
            failed.append(exc)

    helper = threading.Thread(target=first_half, name="namedschema-snapshot")
    helper.start()
    np.take(memory, where[half:], axis=0, out=out[half:], mode="clip")
    helper.join()
    if failed:
        raise failed[0]


def _groups(runs: np.ndarray, phase: int, nbytes: int, packed: bool
            ) -> Iterator[list[tuple[int, int, int]]]:
    """The block byte ranges of page ``runs``, in groups of at most _PIECE bytes.

    Ranges are ``(start, stop, at)``: where their bytes are in the source, the
    block itself (``at == start``) or, ``packed``, the runs' pages copied side
    by side (``_snapshot``).
    """
    group: list[tuple[int, int, int]] = []
    size = position = 0
    for a, b in runs.tolist():
        s, e = max(a * PAGE - phase, 0), min(b * PAGE - phase, nbytes)
        delta = (position - a) * PAGE + phase if packed else 0
        for p in range(s, e, _PIECE):
            q = min(p + _PIECE, e)
            if size + q - p > _PIECE:
                yield group
                group, size = [], 0
            group.append((p, q, p + delta))
            size += q - p
        position += b - a
    if group:
        yield group


def crc_updates(old: Header, changes: list[Change]) -> tuple[dict[int, int], list]:
    """New CRC-32 per changed data block, and the journal pieces (file offset, bytes, crc).

    Each change carries the CRC-32s of the bytes it replaces (read by the scan)
    and of its own, so nothing is read or hashed here.
    """
    by_block: dict[int, list[tuple[int, int]]] = {}
    pieces = []
    starts = [old.block_file_start(i) for i in range(len(old.blocks))]
    for c in changes:
        data = c.data.data
        by_block.setdefault(c.block, []).append((c.start + data.nbytes, c.old_crc ^ c.new_crc))
        pieces.append((starts[c.block] + c.start, data, c.new_crc))
    crcs = {i: updated_crc(old.blocks[i].crc32, old.blocks[i].nbytes, sorted(ch))
            for i, ch in by_block.items()}
    return crcs, pieces


def write_in_place(fd: int, size: int, pieces: list, bar: Any = None) -> None:
    """Copy data ``pieces`` (file offset, bytes, crc; in file order) into the file.

    With ``pwrite`` (measured faster here than copying through a shared map,
    whose first write to each page costs a fault and the file system's
    bookkeeping). ``bar`` (a ``Progress``), if given, advances by each piece
    but the one at offset 0 (a header).
    """
    del size  # (the file's size: pieces lie inside it)
    for offset, data, _crc in pieces:
        view = memoryview(data).cast("B")
        done = 0
        while done < view.nbytes:
            done += os.pwrite(fd, view[done:], offset + done)
        if bar is not None and offset:
            bar.advance(view.nbytes)
