"""Which pages of a buffer were written since a checkpoint, from the kernel (Linux).

A page of a *private* mapping of a file (``load(..., mmap_mode='c')``, or
memory namedschema remapped after a save) reads the file until it is written;
the first write gives the process its own anonymous copy.
``/proc/self/pagemap`` says which pages are such copies (present and not
file-backed, or swapped out), so comparing memory with the file it maps
reduces to reading 8 bytes per page. ``/proc/self/maps`` says which file, at
which offset, every address range maps, so nothing here trusts a record of
its own about what is mapped where.

available      whether this process can use any of this
Mapping        one file-backed mapping: addresses, file, offset, private or shared
file_mappings  every file-backed mapping of this process
overlapping    the mappings that cover parts of an address range, clipped to it
written_pages  per-page flags: written since the page was last read from the file
forget_pages   drop the process's copies of pages (they read the file again)
remap          map a file region privately over existing memory, at the same address
PAGE           the page size
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from dataclasses import dataclass
from functools import cache

import numpy as np

__all__ = ["available", "Mapping", "file_mappings", "overlapping", "written_pages",
           "forget_pages", "remap", "PAGE"]

PAGE = mmap.PAGESIZE
_MADV_DONTNEED = 4
_MAP_FIXED = 0x10
_MAP_PRIVATE = 0x02
_PROT_READ, _PROT_WRITE = 1, 2
_PRESENT, _SWAPPED, _FILE = np.uint64(1 << 63), np.uint64(1 << 62), np.uint64(1 << 61)


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.madvise.restype = ctypes.c_int
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


@cache
def available() -> bool:
    """Whether pagemap, maps, mmap and madvise all work in this process."""
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


def written_pages(lo: int, npages: int) -> np.ndarray:
    """For the ``npages`` pages from page-aligned ``lo``: True where the process has its own copy.

    In a private file mapping that is exactly the pages written since they
    were last read from the file (swapped-out copies included).
    """
    with open("/proc/self/pagemap", "rb", buffering=0) as f:
        raw = os.pread(f.fileno(), npages * 8, (lo // PAGE) * 8)
    if len(raw) != npages * 8:
        raise OSError(f"short read of /proc/self/pagemap at {lo:#x}")
    entries = np.frombuffer(raw, np.uint64)
    present = (entries & _PRESENT) != 0
    return (present & ((entries & _FILE) == 0)) | ((entries & _SWAPPED) != 0)


def _errno_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def forget_pages(lo: int, nbytes: int) -> None:
    """Drop this process's copies of the pages of ``[lo, lo + nbytes)`` (page-aligned).

    Only for pages of a private file mapping whose file holds exactly what
    they hold now: they then read the file again, with no change visible.
    """
    libc = _libc()
    if libc is None or libc.madvise(lo, nbytes, _MADV_DONTNEED) != 0:
        raise _errno_error("madvise(MADV_DONTNEED)")


def remap(lo: int, nbytes: int, fd: int, offset: int, writable: bool) -> None:
    """Map ``nbytes`` of file ``fd`` at ``offset`` privately at address ``lo`` (both page-aligned).

    Replaces whatever was mapped there. Only for memory that holds exactly
    those file bytes and that nothing else relies on being anonymous.
    """
    libc = _libc()
    prot = _PROT_READ | (_PROT_WRITE if writable else 0)
    if libc is None:
        raise OSError("remapping memory needs Linux")
    got = libc.mmap(lo, nbytes, prot, _MAP_PRIVATE | _MAP_FIXED, fd, offset)
    if got != lo:
        raise _errno_error("mmap(MAP_FIXED)")
