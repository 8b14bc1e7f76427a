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

available   whether this process can track (probed once; ``NAMEDSCHEMA_TRACKING``
            other than ``auto``/unset turns it off)
arm         register and write-protect the pages inside ``[lo, hi)``; a token
scan        written page runs of ``[lo, hi)`` since the token, re-armed; None if lost
token       the current token of a range (None if not armed)
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

__all__ = ["available", "arm", "scan", "token", "forced_off"]

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


class _Region(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64),
                ("categories", ctypes.c_uint64)]


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
        self.vec = (_Region * _VEC)()


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


os.register_at_fork(after_in_child=_drop_in_child)


def forced_off() -> bool:
    """Whether ``NAMEDSCHEMA_TRACKING`` asks for the portable fallback."""
    return os.environ.get("NAMEDSCHEMA_TRACKING", "auto") not in ("auto", "")


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
        return first == [(lo + PAGE, lo + 2 * PAGE)] and second == []
    except OSError:
        return False
    finally:
        try:
            memory.close()
        except BufferError:
            pass


def available() -> bool:
    """Whether write-protect tracking works here (and is not turned off)."""
    return not forced_off() and _probe()


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


def _regions(lo: int, hi: int, flags: int, inverted: int, mask: int) -> list[tuple[int, int]]:
    arg = _ScanArg(size=ctypes.sizeof(_ScanArg), flags=flags, start=lo, end=hi,
                   vec=ctypes.addressof(_state.vec), vec_len=_VEC, category_inverted=inverted,
                   category_mask=mask, return_mask=mask)
    out: list[tuple[int, int]] = []
    while arg.start < hi:
        n = _ioctl(_state.pagemap, _PAGEMAP_SCAN, arg)
        for r in _state.vec[:n]:
            if out and out[-1][1] == r.start:
                out[-1] = (out[-1][0], r.end)
            else:
                out.append((r.start, r.end))
        if arg.walk_end <= arg.start or n == 0 and arg.walk_end >= hi:
            break
        arg.start = arg.walk_end
    return out


def _scan(lo: int, hi: int) -> list[tuple[int, int]] | None:
    """Written runs of ``[lo, hi)``, re-armed; None if part of it is not armed."""
    if _regions(lo, hi, 0, _PAGE_IS_WPALLOWED, _PAGE_IS_WPALLOWED):
        return None  # not (or no longer) registered: unmapped, remapped, or forked
    return _regions(lo, hi, _PM_SCAN_WP_MATCHING | _PM_SCAN_CHECK_WPASYNC, 0, _PAGE_IS_WRITTEN)


def _pages(lo: int, hi: int) -> tuple[int, int]:
    return lo + (-lo % PAGE), hi // PAGE * PAGE


def arm(lo: int, hi: int) -> int | None:
    """Write-protect the whole pages inside ``[lo, hi)``; their token, or None if impossible.

    Only for private memory of this process (never memory other processes write).
    """
    first, last = _pages(lo, hi)
    if last <= first or not available():
        return None
    with _state.lock:
        if (first, last) in _state.tokens and not _regions(first, last, 0, _PAGE_IS_WPALLOWED,
                                                          _PAGE_IS_WPALLOWED):
            return _protect(first, last)
        _state.tokens.pop((first, last), None)
        return _register(first, last)


def token(lo: int, hi: int) -> int | None:
    """The token of the last arming of the pages inside ``[lo, hi)``, or None."""
    return _state.tokens.get(_pages(lo, hi))


def scan(lo: int, hi: int, since: int) -> list[tuple[int, int]] | None:
    """Page runs ``(start, stop)`` of ``[lo, hi)`` written since arming ``since``, re-armed.

    None when that cannot be known (another arming since, the memory was
    unmapped or remapped, the process forked): compare instead. On success
    the range gets a new token (``token``).
    """
    first, last = _pages(lo, hi)
    if not available():
        return None
    with _state.lock:
        if _state.tokens.get((first, last)) != since:
            return None
        del _state.tokens[(first, last)]
        try:
            runs = _scan(first, last)
        except OSError:
            return None
        if runs is None:
            return None
        _state.tokens[(first, last)] = next(_counter)
        return runs

