"""Which pages of a buffer were written since a checkpoint, from the kernel (Linux).

A page of a *private* mapping of a file (``load(..., mmap_mode='c')``) reads
the file until it is written;
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
entries        raw pagemap entries of a page range
own_copies     the same flags from entries read before and after write protection
private        whether an address range lies wholly in private mappings
PAGE           the page size

Nothing here maps or unmaps memory: the process's arrays stay its own.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from dataclasses import dataclass
from functools import cache

import numpy as np

__all__ = ["available", "Mapping", "file_mappings", "overlapping", "entries",
           "own_copies", "private", "PAGE"]

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
    return (((e & _PRESENT) != 0) & ((e & _FILE) == 0)) | ((e & _SWAPPED) != 0)


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
    return _own(before) | (present_after & ((after & _FILE) == 0)) | (
        present_before & ((after & _SWAPPED) != 0))


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
