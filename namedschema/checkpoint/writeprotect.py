"""Which pages of this process's memory were written since a moment, from the kernel (Linux).

userfaultfd in asynchronous write-protect mode (``UFFD_FEATURE_WP_ASYNC``,
Linux 6.7+) marks pages write-protected without any handler thread: the
first write to a protected page, by any route that goes through this
process's page tables (numpy, torch, ctypes, ``readinto`` and other system
calls writing into it, other threads), makes the kernel drop the mark and go
on. ``PAGEMAP_SCAN`` on ``/proc/self/pagemap`` lists the unmarked (written)
pages and marks them again in the same call, atomically, so a write can never
fall between listing and re-arming. Memory stays ordinary memory of this
process: nothing is mapped onto a file.

Pages dropped with ``madvise(MADV_DONTNEED)`` (they read zero again) are
reported as written too (their entries are gone; a test covers it). What it
cannot see: writes through another process's page tables (shared memory
written by another process) -- callers track only private mappings.
The userfaultfd is opened with ``UFFD_USER_MODE_ONLY`` (no handler ever runs,
so kernel-mode faults need none), which Linux also grants to unprivileged
processes when ``vm.unprivileged_userfaultfd`` is 0.
A fork child loses the registration (no ``UFFD_FEATURE_EVENT_FORK``): its
state here is dropped at fork.

available   whether this process can track (probed once)
arm         register and write-protect the pages inside ``[lo, hi)``; a token
scan        written page runs of ``[lo, hi)`` since the token, re-armed; None if lost
scan_and_token  the same and the new token, taken together (another thread may arm next)
token       the current token of a range (None if not armed)
union       sort and join ``(n, 2)`` run arrays (vectorized; tracking uses it for page runs)

Each re-arming of a range keeps the runs written in the interval it closes
(the last ``HISTORY`` intervals), so a token armed a few savings ago stays
good: ``scan`` gives the union of the runs since then. That is what lets a
program save the same memory alternately to two files (a latest and a
previous checkpoint, or the two slots of a sharded replay) and still write
only what changed since each file's own last save.

Ranges may overlap (an array saved to one file, a view of it to another):
re-arming pages re-arms them for every range holding them, so the runs a
scan (or an arming) of one range closes are handed to every armed range
they touch (``pending``), and each range's next scan includes them.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import sys
import threading
from functools import cache

import numpy as np

from .. import _process

__all__ = ["available", "arm", "scan", "scan_and_token", "token", "union",
           "Runs", "NO_RUNS"]

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


_process.on_fork_child("checkpoint.writeprotect", _drop_in_child)


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


def _ioctl(fd: int, request: int, arg: ctypes.Structure | ctypes.Array) -> int:
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
