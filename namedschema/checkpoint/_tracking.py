"""Which parts of an array changed since the last save (incremental saves).

The change-tracking routes (write protection, page checksums, comparison), what the
last save of each file wrote (its baseline), and the log of the ranges a save
rewrote, for the audit.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import mmap
import os
import sys
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from .. import _process
from ..errors import FormatError
from . import _storage
from ._header import Header, updated_crc
from ._storage import MIN_CONGRUENT, MemorySpan, congruence

__all__ = ["available", "arm", "scan", "scan_and_token", "token", "union", "Runs", "NO_RUNS",
           "Rewrite", "watch", "unwatch", "watching", "take", "note", "add", "MAX_PENDING",
           "Block", "Baseline", "lookup", "record", "forget", "identity", "page_crcs",
           "others_map", "congruence", "Scan", "Change", "TooMuch", "crc_updates",
           "write_in_place", "MIN_TRACKED", "arm_for_full_save", "mode", "compare_only",
           "warm_spare"]


# ---------------------------------------- writeprotect
#
# Which pages of this process's memory were written since a moment, from the kernel (Linux).
#
# userfaultfd in asynchronous write-protect mode (``UFFD_FEATURE_WP_ASYNC``,
# Linux 6.7+) marks pages write-protected without any handler thread: the
# first write to a protected page, by any route that goes through this
# process's page tables (numpy, torch, ctypes, ``readinto`` and other system
# calls writing into it, other threads), makes the kernel drop the mark and go
# on. ``PAGEMAP_SCAN`` on ``/proc/self/pagemap`` lists the unmarked (written)
# pages and marks them again in the same call, atomically, so a write can never
# fall between listing and re-arming. Memory stays ordinary memory of this
# process: nothing is mapped onto a file.
#
# Pages dropped with ``madvise(MADV_DONTNEED)`` (they read zero again) are
# reported as written too (their entries are gone; a test covers it). What it
# cannot see: writes through another process's page tables (shared memory
# written by another process) -- callers track only private mappings.
# The userfaultfd is opened with ``UFFD_USER_MODE_ONLY`` (no handler ever runs,
# so kernel-mode faults need none), which Linux also grants to unprivileged
# processes when ``vm.unprivileged_userfaultfd`` is 0.
# A fork child loses the registration (no ``UFFD_FEATURE_EVENT_FORK``): its
# state here is dropped at fork.
#
# available   whether this process can track (probed once)
# arm         register and write-protect the pages inside ``[lo, hi)``; a token
# scan        written page runs of ``[lo, hi)`` since the token, re-armed; None if lost
# scan_and_token  the same and the new token, taken together (another thread may arm next)
# token       the current token of a range (None if not armed)
# union       sort and join ``(n, 2)`` run arrays (vectorized; tracking uses it for page runs)
#
# Each re-arming of a range keeps the runs written in the interval it closes
# (the last ``HISTORY`` intervals), so a token armed a few savings ago stays
# good: ``scan`` gives the union of the runs since then. That is what lets a
# program save the same memory alternately to two files (a latest and a
# previous checkpoint, or the two slots of a sharded replay) and still write
# only what changed since each file's own last save.
#
# Ranges may overlap (an array saved to one file, a view of it to another):
# re-arming pages re-arms them for every range holding them, so the runs a
# scan (or an arming) of one range closes are handed to every armed range
# they touch (``pending``), and each range's next scan includes them.

PAGE = mmap.PAGESIZE
_NR_USERFAULTFD = {"x86_64": 323, "aarch64": 282}.get(os.uname().machine)
_UFFD_USER_MODE_ONLY = 1
_UFFD_API = 0xAA
_FEATURE_WP_UNPOPULATED = 1 << 13
_FEATURE_WP_ASYNC = 1 << 15
_UFFDIO_API = 0xC018AA3F
_UFFDIO_REGISTER = 0xC020AA00
_UFFDIO_WRITEPROTECT = 0xC018AA06
_REGISTER_MODE_WP = 2
_WRITEPROTECT_MODE_WP = 1
_PAGEMAP_SCAN = 0xC0606610
_PM_SCAN_WP_MATCHING = 1
_PM_SCAN_CHECK_WPASYNC = 2
_PAGE_IS_WPALLOWED = 1
_PAGE_IS_WRITTEN = 2
_VEC = 4096                       # page regions per PAGEMAP_SCAN call
HISTORY = 8                       # closed intervals kept per range, for older tokens
_HISTORY_RUNS = 65536             # runs kept per range at most (else older tokens are lost)


class _ScanArg(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "size", "flags", "start", "end", "walk_end", "vec", "vec_len", "max_pages",
        "category_inverted", "category_mask", "category_anyof_mask", "return_mask")]


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.uffd = -1
        self.pagemap = -1
        self.tokens: dict[tuple[int, int], int] = {}   # (lo, hi) -> token of its last arming
        # (lo, hi) -> [(token, runs written from that arming to the next)], oldest first
        self.history: dict[tuple[int, int], list[tuple[int, Runs]]] = {}
        # (lo, hi) -> runs written in its current interval that another range's
        # scan or arming has re-armed already (overlapping ranges)
        self.pending: dict[tuple[int, int], list[Runs]] = {}
        # PAGEMAP_SCAN's output: struct page_region {start, end, categories} (u64 each)
        self.vec = np.zeros((_VEC, 3), np.uint64)


Runs = np.ndarray   # (n, 2) int64 [start, stop) runs, sorted, disjoint, not touching
NO_RUNS = np.empty((0, 2), np.int64)
NO_RUNS.flags.writeable = False


def union(runs: Runs) -> Runs:
    """``runs`` (any order, possibly overlapping or empty ones) sorted, with overlapping or
    touching runs joined: one vectorized pass, whatever the count."""
    runs = runs[runs[:, 1] > runs[:, 0]]
    if len(runs) <= 1:
        return runs
    runs = runs[np.argsort(runs[:, 0], kind="stable")]
    reach = np.maximum.accumulate(runs[:, 1])
    first = np.flatnonzero(np.concatenate(([True], runs[1:, 0] > reach[:-1])))
    last = np.concatenate((first[1:] - 1, [len(runs) - 1]))
    return np.stack((runs[first, 0], reach[last]), axis=1)


def _joined(parts: list[Runs]) -> Runs:
    return union(np.concatenate(parts)) if parts else NO_RUNS


_state = _State()
_counter = itertools.count(1)


def _drop_in_child() -> None:
    # The child's mappings lost their registration; its descriptors are the parent's.
    global _state
    for fd in (_state.uffd, _state.pagemap):
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
    _state = _State()
    _open.cache_clear()
    _probe.cache_clear()  # the child may open a userfaultfd of its own


_process.on_fork_child("checkpoint._tracking:writeprotect", _drop_in_child)


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or _NR_USERFAULTFD is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        libc.ioctl.restype = ctypes.c_long
        libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return libc


def _ioctl(fd: int, request: int, arg: ctypes.Structure | ctypes.Array[Any]) -> int:
    libc = _libc()
    assert libc is not None
    result = libc.ioctl(fd, request, ctypes.byref(arg))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


@cache
def _open() -> bool:
    """Open this process's userfaultfd and pagemap (once per process)."""
    libc = _libc()
    if libc is None:
        return False
    fd = int(libc.syscall(_NR_USERFAULTFD, os.O_CLOEXEC | os.O_NONBLOCK | _UFFD_USER_MODE_ONLY))
    if fd < 0:
        return False
    try:
        api = (ctypes.c_uint64 * 3)(_UFFD_API, _FEATURE_WP_ASYNC | _FEATURE_WP_UNPOPULATED, 0)
        _ioctl(fd, _UFFDIO_API, api)
        pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        os.close(fd)
        return False
    _state.uffd, _state.pagemap = fd, pagemap
    return True


@cache
def _probe() -> bool:
    """Track a scratch mapping: a write must show, and re-arming must hide it."""
    if not _open():
        return False
    memory = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        view = np.frombuffer(memory, np.uint8)
        lo = view.__array_interface__["data"][0]
        view[:] = 1
        if _register(lo, lo + 4 * PAGE) is None:
            return False
        view[PAGE + 5] = 2
        first = _scan(lo, lo + 4 * PAGE)
        second = _scan(lo, lo + 4 * PAGE)
        del view
        return (first is not None and first.tolist() == [[lo + PAGE, lo + 2 * PAGE]]
                and second is not None and len(second) == 0)
    except OSError:
        return False
    finally:
        try:
            memory.close()
        except BufferError:
            pass


def available() -> bool:
    """Whether write-protect tracking works here."""
    return _probe()


def _register(lo: int, hi: int) -> int | None:
    """Register ``[lo, hi)`` (page-aligned) and write-protect it; the new token or None."""
    rng = (ctypes.c_uint64 * 4)(lo, hi - lo, _REGISTER_MODE_WP, 0)
    try:
        _ioctl(_state.uffd, _UFFDIO_REGISTER, rng)
    except OSError:
        return None  # already registered by someone else's userfaultfd, or not allowed
    return _protect(lo, hi)


def _protect(lo: int, hi: int) -> int | None:
    wp = (ctypes.c_uint64 * 3)(lo, hi - lo, _WRITEPROTECT_MODE_WP)
    try:
        _ioctl(_state.uffd, _UFFDIO_WRITEPROTECT, wp)
    except OSError:
        return None
    value = next(_counter)
    _state.tokens[(lo, hi)] = value
    return value


def _regions(lo: int, hi: int, flags: int, inverted: int, mask: int) -> Runs:
    vec = _state.vec
    arg = _ScanArg(size=ctypes.sizeof(_ScanArg), flags=flags, start=lo, end=hi,
                   vec=vec.ctypes.data, vec_len=_VEC, category_inverted=inverted,
                   category_mask=mask, return_mask=mask)
    parts: list[Runs] = []
    while arg.start < hi:
        n = _ioctl(_state.pagemap, _PAGEMAP_SCAN, arg)
        if n:
            parts.append(vec[:n, :2].astype(np.int64))
        if arg.walk_end <= arg.start or n == 0 and arg.walk_end >= hi:
            break
        arg.start = arg.walk_end
    return _joined(parts)


def _scan(lo: int, hi: int) -> Runs | None:
    """Written runs of ``[lo, hi)``, re-armed; None if part of it is not armed."""
    if len(_regions(lo, hi, 0, _PAGE_IS_WPALLOWED, _PAGE_IS_WPALLOWED)):
        return None  # not (or no longer) registered: unmapped, remapped, or forked
    return _regions(lo, hi, _PM_SCAN_WP_MATCHING | _PM_SCAN_CHECK_WPASYNC, 0, _PAGE_IS_WRITTEN)


def _drop(key: tuple[int, int]) -> None:
    _state.tokens.pop(key, None)
    _state.history.pop(key, None)
    _state.pending.pop(key, None)


def _collect(key: tuple[int, int]) -> bool:
    """Re-arm the pages of armed range ``key``, handing the runs written since to every
    armed range they touch (``key`` included); False (and ``key`` dropped) if lost."""
    try:
        runs = _scan(*key)
    except OSError:
        runs = None
    if runs is None:
        _drop(key)
        return False
    if not len(runs):
        return True
    for other in list(_state.tokens):
        inside = runs[(runs[:, 0] < other[1]) & (runs[:, 1] > other[0])]
        if not len(inside):
            continue
        pending = _state.pending.setdefault(other, [])
        pending.append(np.clip(inside, other[0], other[1]))
        if len(pending) > 64 or sum(map(len, pending)) > _HISTORY_RUNS:
            pending[:] = [_joined(pending)]
            if len(pending[0]) > _HISTORY_RUNS and other != key:
                _drop(other)   # a range nobody scans any more: its next scan says None
    return True


def _collect_others(first: int, last: int) -> None:
    """Before ``[first, last)`` is protected blindly: keep what overlapping ranges saw."""
    for other in [k for k in _state.tokens
                  if k != (first, last) and k[0] < last and k[1] > first]:
        _collect(other)


def _pages(lo: int, hi: int) -> tuple[int, int]:
    return lo + (-lo % PAGE), hi // PAGE * PAGE


def arm(lo: int, hi: int) -> int | None:
    """Write-protect the whole pages inside ``[lo, hi)``; their token, or None if impossible.

    Only for private memory of this process (never memory other processes write).
    """
    first, last = _pages(lo, hi)
    if last <= first or not available():
        return None
    key = (first, last)
    with _state.lock:
        # armed already: close the current interval (keeping its runs for older
        # tokens) instead of protecting blindly, which would forget them
        if key in _state.tokens and not len(_regions(first, last, 0, _PAGE_IS_WPALLOWED,
                                                     _PAGE_IS_WPALLOWED)) and _collect(key):
            return _rearm(first, last, _joined(_state.pending.pop(key, [])))
        _drop(key)
        _collect_others(first, last)
        return _register(first, last)


def _rearm(first: int, last: int, runs: Runs) -> int:
    """Record ``runs`` as the interval the current token closes; the new token."""
    key = (first, last)
    closed = _state.history.setdefault(key, [])
    closed.append((_state.tokens[key], runs))
    del closed[:max(0, len(closed) - HISTORY)]
    while closed and sum(len(r) for _, r in closed) > _HISTORY_RUNS:
        del closed[0]
    _state.tokens[key] = next(_counter)
    return _state.tokens[key]


def token(lo: int, hi: int) -> int | None:
    """The token of the last arming of the pages inside ``[lo, hi)``, or None."""
    return _state.tokens.get(_pages(lo, hi))


def scan(lo: int, hi: int, since: int) -> Runs | None:
    """The runs of :func:`scan_and_token`, or None."""
    found = scan_and_token(lo, hi, since)
    return None if found is None else found[0]


def scan_and_token(lo: int, hi: int, since: int) -> tuple[Runs, int] | None:
    """Page runs of ``[lo, hi)`` written since arming ``since``, re-armed.

    The runs are an ``(n, 2)`` int64 array of ``[start, stop)`` addresses,
    sorted and disjoint (numpy all the way: a scan of a few GiB with tens of
    thousands of runs costs milliseconds, which a background save's stall is).

    ``since`` may be the current token or one of the last ``HISTORY`` before
    it (the runs of the intervals between are kept). None when that cannot
    be known (an older token, the memory was unmapped or remapped, the
    process forked): compare instead. On success the range gets a new token,
    returned with the runs: asking ``token`` afterwards could get the token of
    another thread's arming since, whose interval misses writes made between.
    """
    first, last = _pages(lo, hi)
    if not available():
        return None
    with _state.lock:
        key = (first, last)
        current = _state.tokens.get(key)
        if current is None:
            return None
        earlier: list[Runs] = []
        if since != current:
            closed = _state.history.get(key, [])
            at = next((i for i, (t, _) in enumerate(closed) if t == since), None)
            if at is None:
                return None
            earlier = [runs for _, runs in closed[at:]]
        if not _collect(key):
            return None
        fresh = _joined(_state.pending.pop(key, []))
        new_token = _rearm(first, last, fresh)
        return (_joined([*earlier, fresh]) if earlier else fresh), new_token


# ---------------------------------------- writelog
#
# Which bytes of a checkpoint file its in-place saves rewrote, for readers that keep
# what they computed from the file between saves (check-resume's audit digests).
#
# A reader :func:`watch` es a file; from then on every incremental save of it in
# this process (foreground, writer thread, or a snapshot child that reports
# back) notes a :class:`Rewrite` before it writes a byte: the file's identity,
# the checkpoint ids it goes from and to, and the byte ranges it writes. The
# reader :func:`take` s them and knows that the rest of the file is as it read
# it, provided the ids chain from the state it read to the state it finds
# (anything else that changed the file, another process's save, a journal
# replayed at recovery, a full save's new file, breaks the chain: the reader
# then starts over). Unwatched files cost one dict lookup per save.
#
# Rewrite   one in-place save: identity, checkpoint ids before and after, byte ranges
# watch     keep the rewrites of a file from now on
# take      the rewrites of a watched file since the last take (None: unknown)
# note      (incremental saves) a rewrite is about to be written
# add       rewrites a snapshot child noted (its report)

#: Rewrites kept per file between two takes; past this the log says it lost count.
MAX_PENDING = 256


@dataclass(frozen=True)
class Rewrite:
    """One in-place save of a file: it went from checkpoint ``before`` to ``after``,
    writing at most the bytes ``ranges`` (``(start, stop)`` file offsets)."""

    identity: tuple[int, int]            # (st_dev, st_ino)
    before: str
    after: str
    ranges: tuple[tuple[int, int], ...]


# (guarded by _process.LOCK) real path -> the rewrites noted since the last take; None: more than MAX_PENDING, or a
# save whose rewrites could not be known (a snapshot child that died).
_pending: dict[str, list[Rewrite] | None] = {}


def _forget_in_child() -> None:
    # A fork child keeps watching (a snapshot child reports its rewrites back), but starts
    # with none noted: the parent's are the parent's to take.
    for key in _pending:
        _pending[key] = []


_process.on_fork_child("checkpoint._tracking:writelog", _forget_in_child)


def watch(path: str | os.PathLike[str]) -> None:
    """Keep the rewrites of ``path`` (the file it names now) from now on."""
    key = os.path.realpath(path)
    with _process.LOCK:
        _pending.setdefault(key, [])


def unwatch(path: str | os.PathLike[str]) -> None:
    """Stop keeping the rewrites of ``path``."""
    with _process.LOCK:
        _pending.pop(os.path.realpath(path), None)


def watching(real: str) -> bool:
    """Whether the file at the real path ``real`` is watched (no lock: a hint)."""
    return real in _pending


def take(path: str | os.PathLike[str]) -> list[Rewrite] | None:
    """The rewrites of ``path`` noted since the last take, oldest first; None when they
    are not known (not watched, too many, or a save that could not report them)."""
    key = os.path.realpath(path)
    with _process.LOCK:
        if key not in _pending:
            return None
        found = _pending[key]
        _pending[key] = []
    return found


def _put(real: str, rewrites: list[Rewrite] | None) -> None:
    with _process.LOCK:
        if real not in _pending:
            return
        kept = _pending[real]
        if kept is None or rewrites is None or len(kept) + len(rewrites) > MAX_PENDING:
            _pending[real] = None
        else:
            kept.extend(rewrites)


def note(real: str, st: os.stat_result, before: str, after: str,
         pieces: Iterable[tuple[int, Any, int]], grown_from: int | None = None) -> None:
    """An in-place save of ``real`` (open as ``st``) from checkpoint ``before`` to
    ``after`` is about to write ``pieces`` (``(file offset, bytes-like, ...)``) and
    grow the file from ``grown_from`` bytes (None: it does not grow)."""
    if real not in _pending:
        return
    ranges = [(int(p[0]), int(p[0]) + memoryview(p[1]).nbytes) for p in pieces]
    if grown_from is not None:
        ranges.append((grown_from, 1 << 62))
    _put(real, [Rewrite((st.st_dev, st.st_ino), before, after, tuple(sorted(ranges)))])


def add(path: str | os.PathLike[str], rewrites: list[Rewrite] | None) -> None:
    """Rewrites noted elsewhere (a snapshot child's); None: a save whose rewrites are
    unknown (the next take says so)."""
    _put(os.path.realpath(path), rewrites)


# ---------------------------------------- baselines
#
# What this process knows about the checkpoint files it saved last: the baseline of the next save.
#
# After a save to a file the process keeps, per data block, how it can later
# find what changed in that block's memory: the token of the write protection
# armed at the save (``writeprotect``), or the CRC-32 of every memory page as
# the file holds it (``digests``), or nothing. A baseline is trusted only while
# the file is exactly as the save left it (same device, inode, size,
# modification and change times, and header id): any other writer (a second
# process's save, ``cp`` over the file, a truncation, a replacement) makes the
# next save compare memory with the file instead, which is always exact.
#
# Block       what is known about one block's memory
# Baseline    the state of one file after this process's last save to it
# lookup      the baseline of a file, if it still holds
# record      remember the state a save left
# forget      drop it (a save that failed after re-arming tracking)
# page_crcs   CRC-32 of each memory page of a byte range

@dataclass
class Block:
    """One block's memory at the last save: ``[lo, lo + nbytes)``.

    ``token``: the write-protect token armed then (writes since are listed by
    the kernel); ``digests``: CRC-32 per memory page of the block (page ``j``
    covers block bytes ``[j * PAGE - lo % PAGE, (j + 1) * PAGE - lo % PAGE)``,
    clipped), equal to the file's bytes there.
    """

    lo: int
    nbytes: int
    token: int | None = None
    digests: np.ndarray | None = None


@dataclass
class Baseline:
    """What the last save of a file left on disk: its identity, id and block CRCs."""

    identity: tuple[int, ...]
    checkpoint_id: str
    blocks: list[Block | None]

    def block_at(self, index: int) -> Block | None:
        """What is known about block ``index`` (None when nothing)."""
        return self.blocks[index] if index < len(self.blocks) else None

    def block(self, index: int, lo: int, nbytes: int) -> Block | None:
        """What is known about block ``index`` if its memory is still ``[lo, lo + nbytes)``."""
        if index >= len(self.blocks):
            return None
        known = self.blocks[index]
        if known is None or (known.lo, known.nbytes) != (lo, nbytes):
            return None
        return known


_baselines: dict[str, Baseline] = {}   # (guarded by _process.LOCK)


def _clear_in_child() -> None:
    # A fork child's memory is not what the parent's tracking describes.
    _baselines.clear()


_process.on_fork_child("checkpoint._tracking:baselines", _clear_in_child)


def identity(st: os.stat_result) -> tuple[int, ...]:
    """What must not change for a baseline to hold (any write changes the times)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def lookup(real_path: str, st: os.stat_result, header: Header) -> Baseline | None:
    """The baseline of ``real_path`` if the file (``st``, ``header``) is as this process left it."""
    with _process.LOCK:
        known = _baselines.get(real_path)
    if known is None or known.identity != identity(st) or \
            known.checkpoint_id != header.description.checkpoint_id:
        return None
    return known


def record(real_path: str, st: os.stat_result, checkpoint_id: str,
           blocks: list[Block | None]) -> None:
    """Remember the blocks a save of ``real_path`` just wrote, as the next save's baseline."""
    with _process.LOCK:
        _baselines[real_path] = Baseline(identity(st), checkpoint_id, blocks)


def forget(real_path: str) -> None:
    """Drop the baseline of ``real_path`` (the next save compares with nothing)."""
    with _process.LOCK:
        _baselines.pop(real_path, None)


def page_crcs(data: np.ndarray, phase: int) -> np.ndarray:
    """CRC-32 of each memory page of ``data`` (uint8), whose first byte is at page offset ``phase``.

    Measured here at 1.6 GB/s (a CRC call per page); the first and last
    entries may cover partial pages.
    """
    first = min(PAGE - phase, data.size) if phase else min(PAGE, data.size)
    bounds = list(range(first, data.size, PAGE))
    out = np.empty(len(bounds) + 1, np.uint32)
    view = data.data
    start = 0
    for k, stop in enumerate([*bounds, data.size]):
        out[k] = zlib.crc32(view[start:stop])
        start = stop
    return out


# ---------------------------------------- tracking
#
# Which bytes of a checkpoint's blocks changed since the last save, leaving memory alone.
#
# Nothing here maps anything onto the checkpoint file: the arrays a program
# holds stay ordinary memory of that program, whatever happens to the file.
# For each block held in memory, the pages that may have changed (candidates)
# come from, in order of preference:
#
# * write protection (``writeprotect``: userfaultfd async + PAGEMAP_SCAN),
#   armed at the last save to this file, for private memory: the kernel lists
#   the pages written since, by any route through this process's page tables;
# * the per-page CRC-32s of the last save (``baselines``): the portable
#   fallback, also for shared memory that other processes write;
# * for a private map of this very file at the block's offset (a buffer loaded
#   with ``mmap_mode='c'``), the pages the process has its own copy of
#   (``_storage.own_copies``): the others are the file;
# * otherwise every page.
#
# Candidates are then copied aside (a private snapshot: the bytes the save
# writes, whatever the program does meanwhile) and compared with the file; only
# the byte runs that differ are written. Baselines are trusted only while the
# file is as this process's last save left it, so another writer (a second
# process, ``cp``, a truncation) can only make a save compare more, never miss.
#
# others_map     whether memory outside the saved object maps the file's data
# congruence     the page offset a block should have in the file
# Scan           finds the changed byte ranges of the blocks of one save
# Change         one changed range: block, offset, a private copy of the new bytes
# TooMuch        raised by Scan when more changed than its budget
# crc_updates    new block CRC-32s and the journal pieces for a list of changes
# write_in_place write changed data into the file
# arm_for_full_save  arm write protection before a full save reads memory
# warm_spare     ready a snapshot buffer for the next background incremental save

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
    return "writeprotect" if available() else "checksums"


def compare_only() -> None:
    """Make this process's saves compare memory with the file, arming nothing.

    For a snapshot child (``background``): its baselines went at the fork and
    it saves once, so arming write protection or taking page checksums would
    be work thrown away.
    """
    global _forced
    _forced = "compare"


def arm_for_full_save(sources: Any, nbytes: list[int]) -> list[Block | None]:
    """Arm write protection on the large private blocks a full save is about to write."""
    out: list[Block | None] = []
    armed = mode() == "writeprotect"
    for source, n in zip(sources, nbytes, strict=True):
        if not isinstance(source, MemorySpan) or n < MIN_TRACKED:
            out.append(None)
            continue
        token = arm(source.lo, source.lo + n) if armed and _storage.private(
            source.lo, source.lo + n) else None
        out.append(Block(source.lo, n, token))
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


def others_map(maps: list[_storage.Mapping], dev: int, ino: int, spans: list[tuple[int, int]],
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
        return NO_RUNS
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

    ``blocks`` is the baseline the save leaves (``_tracking.record`` it once
    the save succeeded; a failed save must ``_tracking.forget`` the file,
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
        self.base = lookup(real_path, st, old)
        if self.base is not None and origin is not None:
            # a relaid save (``relayout``): block i of ``old`` was block origin[i] of the file
            self.base = Baseline(self.base.identity, self.base.checkpoint_id, [
                None if k is None else self.base.block_at(k) for k in origin])
        self.mode = mode()
        # This file's own mappings (a buffer loaded with mmap_mode='c'), by a fast parse.
        self.maps = _storage.file_mappings(self.dev, self.ino) if _storage.available() else []
        self.budget = budget
        self.changed = 0
        self.cost = 0               # estimated work, in bytes, against the budget
        # small files: a range costs less than a 64 KiB write (a full save is cheap too)
        self.range_cost = min(RANGE_COST, max(PAGE, old.data_bytes // 16384))
        self.tracked = 0            # bytes whose candidates came from the kernel
        self.changes: list[Change] = []
        self.blocks: list[Block | None] = [None] * len(old.blocks)
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
        private = trackable and _storage.private(lo, hi)
        token = None
        candidates: np.ndarray | None = None     # page runs (n, 2), in block pages
        mapped = None
        if private and self.mode == "writeprotect":
            found = (scan_and_token(lo, hi, known.token)
                     if known is not None and known.token is not None else None)
            if found is not None:
                runs, token = found
                self.tracked += int((runs[:, 1] - runs[:, 0]).sum())
                edges = np.array([[0, 1], [npages - 1, npages]], np.int64)  # partial pages
                candidates = np.concatenate(((runs - (lo - phase)) // PAGE, edges))
            else:
                mapped = self._mapped_pages(index, lo, nbytes)   # before arming (see pages)
                token = arm(lo, hi)  # before reading: later writes are seen
        block = _raw(lo, nbytes)
        digests = None
        if token is None and trackable:
            if known is not None and known.digests is not None:
                digests = known.digests.copy()
                if candidates is None:
                    fresh = page_crcs(block, phase)
                    candidates = _page_runs(fresh != digests)
            elif candidates is None:
                digests = np.zeros(npages, np.uint32)   # all pages are compared below
        if candidates is None:
            if mapped is None:
                mapped = self._mapped_pages(index, lo, nbytes)
            candidates = self._own_copies(npages, mapped)
            if digests is not None and not np.array_equal(candidates, [[0, npages]]):
                digests = None  # pages left out are not read: no checksums for them
        candidates = union(candidates)
        if self.defer:
            self._snapshot(index, lo - phase, npages, candidates, phase, nbytes, digests)
        else:
            for group in _groups(candidates, phase, nbytes, packed=False):
                self._compare(index, group, block, phase, digests)
        self.blocks[index] = Block(lo, nbytes, token, digests)

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

    def _mapped_pages(self, index: int, lo: int, nbytes: int
                      ) -> list[tuple[int, int, int, np.ndarray]]:
        """Where the block's memory privately maps this file at its offset (a load with
        ``mmap_mode='c'``): ``(first page, stop page, address, pagemap entries)``."""
        phase, hi = lo % PAGE, lo + nbytes
        delta = self.old.block_file_start(index) - lo
        out = []
        for m in _storage.overlapping(self.maps, lo, hi):
            if not (m.private and (m.dev, m.ino) == (self.dev, self.ino) and m.delta == delta):
                continue
            first, last = m.lo + (-m.lo % PAGE), m.hi // PAGE * PAGE
            if last > first:
                fp, lp = (first - lo + phase) // PAGE, (last - lo + phase) // PAGE
                out.append((fp, lp, first, _storage.entries(first, lp - fp)))
        return out

    def _own_copies(self, npages: int, mapped: list[tuple[int, int, int, np.ndarray]]
                    ) -> np.ndarray:
        """Page runs that may differ from the file: all but pages still mapping it."""
        runs, position = [], 0
        for fp, lp, first, before in mapped:
            if fp > position:
                runs.append(np.array([[position, fp]], np.int64))
            self.tracked += (lp - fp) * PAGE
            flags = _storage.own_copies(before, _storage.entries(first, lp - fp))
            runs.append(_page_runs(flags) + fp)
            position = lp
        if position < npages:
            runs.append(np.array([[position, npages]], np.int64))
        return np.concatenate(runs) if runs else NO_RUNS

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
                crcs = page_crcs(self._new[lo:lo + n], (phase + s) % PAGE)
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


_process.on_fork_child("checkpoint._tracking:tracking", _forget_spare_in_child)


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


def crc_updates(old: Header, changes: list[Change]
                ) -> tuple[dict[int, int], list[tuple[int, Any, int]]]:
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


def write_in_place(fd: int, size: int, pieces: Sequence[tuple[int, Any, int]],
                   bar: Any = None) -> None:
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
