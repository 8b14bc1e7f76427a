"""Private memory that namedschema allocates itself, one mapping per array.

Buffers made by ``buffer_from_example`` (without ``share_memory``) put each
large array in its own private anonymous mapping instead of the C heap. The
memory behaves exactly like ``np.zeros`` memory (zero-filled, private,
copy-on-write across ``fork``) and stays so: checkpoints never map it onto a
file. Incremental saves find what changed in it by write protection
(``checkpoint/_tracking.py``), as for any private memory; a mapping of its
own keeps the tracked range clear of unrelated heap objects.

allocate      a zero-filled array in its own page-aligned private mapping
owns          whether a byte range lies inside one live allocation made here
MIN_BYTES     arrays smaller than this are left to numpy's allocator
"""

from __future__ import annotations

import bisect
import mmap
import threading
import weakref

import numpy as np

__all__ = ["allocate", "owns", "MIN_BYTES"]

#: Smaller arrays cost little to compare at save time and would waste most of a page.
MIN_BYTES = 1 << 20

_lock = threading.Lock()
_starts: list[int] = []                                 # sorted start addresses
_entries: list[tuple[int, weakref.ref[mmap.mmap]]] = []  # (end, mapping) at the same index


def _forget(start: int) -> None:
    with _lock:
        i = bisect.bisect_left(_starts, start)
        if i < len(_starts) and _starts[i] == start and _entries[i][1]() is None:
            del _starts[i], _entries[i]


def allocate(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zero-filled C-order array of ``shape`` and ``dtype`` in its own private mapping.

    Arrays of fewer than MIN_BYTES bytes come from ``np.zeros``.
    """
    dtype = np.dtype(dtype)
    count = 1
    for n in shape:
        count *= n
    nbytes = count * dtype.itemsize
    if nbytes < MIN_BYTES or not hasattr(mmap, "MAP_PRIVATE"):
        return np.zeros(shape, dtype)
    memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        # What numpy asks for its own large allocations: with transparent huge pages in
        # 'madvise' mode, 4 KiB pages make the first fill ~6x slower and random reads
        # (replay sampling) ~1.25x slower than np.zeros memory.
        memory.madvise(mmap.MADV_HUGEPAGE)
    array = np.frombuffer(memory, dtype, count).reshape(shape)
    start = array.__array_interface__["data"][0]
    def forget(_ref: weakref.ref[mmap.mmap], start: int = start) -> None:
        _forget(start)

    ref = weakref.ref(memory, forget)
    with _lock:
        i = bisect.bisect_left(_starts, start)
        _starts.insert(i, start)
        _entries.insert(i, (start + nbytes, ref))
    return array


def owns(lo: int, hi: int) -> bool:
    """Whether addresses ``[lo, hi)`` lie inside one live allocation made by ``allocate``."""
    with _lock:
        i = bisect.bisect_right(_starts, lo) - 1
        if i < 0:
            return False
        end, ref = _entries[i]
        return hi <= end and ref() is not None
