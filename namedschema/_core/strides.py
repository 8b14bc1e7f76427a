"""The bytes a strided view touches, computed in one place.

Checkpoint layout and header validation, shared memory and rlpyt buffer
pickling all need the lowest and highest element address of a view given as
(offset, shape, strides); negative strides reach below the offset.

byte_span    (lowest, highest) byte offset of an element of a non-empty view
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["byte_span"]


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
