"""Where an array's elements lie in memory, and which arrays overlap: computed in one place.

Checkpoint layout and header validation, shared memory, rlpyt buffer pickling
and schema evolution all need the bytes a strided view touches, the object that
owns an array's memory, and which arrays share memory. Negative strides reach
below the first element.

byte_span       (lowest, highest) byte offset of an element of a non-empty view
extent          (start, end) addresses of an array's or CPU tensor's elements, None if empty
memory_owner    the object at the end of an array's ``.base`` chain (owns its memory)
overlap         whether two extents share a byte
overlap_groups  indices of arrays grouped where their memory overlaps (transitively)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from .optional import is_tensor

__all__ = ["byte_span", "extent", "memory_owner", "overlap", "overlap_groups"]

Extent = tuple[int, int]


def byte_span(offset: int, shape: Iterable[int], strides: Iterable[int]) -> tuple[int, int]:
    """(lowest, highest) byte offset at which an element of the view starts.

    Add the item size to the second value for one past the last byte. Meant for
    non-empty views: a zero-length dimension gives a meaningless span.
    """
    lo = hi = offset
    for n, s in zip(shape, strides, strict=True):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi


def extent(x: Any) -> Extent | None:
    """``(lowest, one past highest)`` address of the elements of a numpy array or tensor.

    None for an empty one (it touches no memory) and for a tensor that is not
    on the CPU (its addresses are not host memory).
    """
    if is_tensor(x):
        if x.numel() == 0 or x.device.type != "cpu":
            return None
        size = x.element_size()
        lo, hi = byte_span(x.data_ptr(), x.shape, [s * size for s in x.stride()])
        return lo, hi + size
    if x.size == 0:
        return None
    lo, hi = byte_span(x.__array_interface__["data"][0], x.shape, x.strides)
    return lo, hi + x.itemsize


def memory_owner(arr: np.ndarray) -> Any:
    """What owns ``arr``'s memory: the outermost array's ``base`` (an mmap, a
    ctypes array, bytes...), or that array itself when it owns its data.
    Views of one array have the same owner."""
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr.base if arr.base is not None else arr


def overlap(a: Extent | None, b: Extent | None) -> bool:
    """Whether two extents share at least one byte (an empty one shares none)."""
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def overlap_groups(extents: Sequence[Extent | None], owners: Sequence[Hashable] | None = None
                   ) -> list[tuple[list[int], Extent]]:
    """The indices of ``extents`` grouped by shared memory, with each group's whole extent.

    Two indices are in one group when their extents overlap, or (given
    ``owners``) their owners are equal, or through a chain of such pairs.
    Indices whose extent is None are in no group. Members are in index
    order, groups in the order of their smallest index.
    """
    parent = list(range(len(extents)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    spans = {i: e for i, e in enumerate(extents) if e is not None}
    present = list(spans)
    if owners is not None:
        first: dict[Hashable, int] = {}
        for i in present:
            j = first.setdefault(owners[i], i)
            if j != i:
                parent[find(i)] = find(j)
    # Sweep by start address: an extent that starts before the furthest end
    # reached so far overlaps the extent that reached it.
    reach, last = None, -1
    for i in sorted(present, key=lambda i: spans[i][0]):
        lo, hi = spans[i]
        if reach is not None and lo < reach:
            parent[find(i)] = find(last)
        if reach is None or hi > reach:
            reach, last = hi, i
    groups: dict[int, list[int]] = {}
    for i in present:
        groups.setdefault(find(i), []).append(i)
    return [(g, (min(spans[i][0] for i in g), max(spans[i][1] for i in g)))
            for g in sorted(groups.values(), key=lambda g: g[0])]
