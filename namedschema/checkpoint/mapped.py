"""Copying arrays out of a read-only map of a checkpoint in bounded memory.

The pages of a mapped file that a process has read count in its resident set
for as long as they stay mapped. Copying a mapped array of B bytes into memory
of the process (a resume writing a loaded checkpoint into a freshly built
replay buffer) would therefore peak at 2B resident: B of new memory plus B of
mapped file. :func:`copy_from_map` copies in ``PIECE`` pieces and drops the
map's pages behind each piece (``MADV_DONTNEED``; the data stays in the file
and in the page cache, and a later read of the map faults it back in), so it
peaks at B plus about one piece. It asks the kernel to read the next piece
ahead (``MADV_WILLNEED``) while it copies the current one.

Only read-only maps (``load(mmap_mode="r")``) are released: their pages can
only ever hold the file's bytes. Copy-on-write maps may hold writes that
dropping would lose, and arrays that view no map are copied as ``np.copyto``.

copy_from_map   ``np.copyto(target, source)`` releasing ``source``'s mapped pages
read_only_map   the read-only ``mmap`` a numpy array views, and its start address
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from .._strides import byte_span

# Bytes copied between two releases of the mapped pages: the most mapped file a
# copy holds resident at once.
PIECE = 4 * 2**20

__all__ = ["copy_from_map", "read_only_map", "PIECE"]

_CAN_RELEASE = hasattr(mmap.mmap, "madvise") and hasattr(mmap, "MADV_DONTNEED")


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


def copy_from_map(target: np.ndarray, source: np.ndarray) -> None:
    """``np.copyto(target, source, casting="no")``, in bounded resident memory.

    When ``source`` views a read-only map (of a checkpoint loaded with
    ``mmap_mode="r"``), it is copied in pieces of about ``PIECE`` bytes along
    its first axis, and the mapped pages of each piece are released once it
    is copied. Shapes and dtypes must already match (callers check them,
    naming what differs).
    """
    found = read_only_map(source) if _CAN_RELEASE and source.nbytes > PIECE else None
    if found is None:
        np.copyto(target, source, casting="no")
        return
    mapped, start = found
    _copy_pieces(target, source, mapped, start)


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
