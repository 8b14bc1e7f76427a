"""Memory extents, owners and overlap groups (namedschema._core.tree)."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from namedschema._core.tree import byte_span, extent, memory_owner, overlap, overlap_groups


def _start(a):
    return a.__array_interface__["data"][0]


def test_extent_of_views():
    base = np.zeros((4, 6), np.float32)
    assert extent(base) == (_start(base), _start(base) + base.nbytes)
    col = base[:, 2]
    assert extent(col) == (_start(col), _start(col) + 3 * 24 + 4)
    rev = base[::-1]
    assert extent(rev) == extent(base)  # negative strides reach below the first element
    assert extent(base[:0]) is None and extent(np.zeros(0)) is None
    assert byte_span(100, (3, 2), (-8, 4)) == (84, 104)


def test_extent_of_tensors():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    lo = t.data_ptr()
    assert extent(t) == (lo, lo + 48)
    assert extent(t[:, 1]) == (lo + 4, lo + 4 + 2 * 16 + 4)
    assert extent(t[:0]) is None
    assert extent(t.numpy()) == extent(t)


def test_memory_owner():
    base = np.zeros(10)
    assert memory_owner(base) is base
    assert memory_owner(base[2:][::2]) is base
    m = mmap.mmap(-1, 64)
    arr = np.ndarray((64,), np.uint8, buffer=m)
    assert memory_owner(arr[3:]) is m
    del arr
    m.close()


def test_overlap():
    assert overlap((0, 10), (9, 20)) and not overlap((0, 10), (10, 20))
    assert not overlap(None, (0, 10)) and not overlap((0, 10), None)


def test_overlap_groups_chain_owner_and_order():
    extents = [(50, 60), (0, 10), None, (5, 20), (19, 30), (100, 110), (200, 210)]
    groups = overlap_groups(extents)
    assert groups == [([0], (50, 60)), ([1, 3, 4], (0, 30)), ([5], (100, 110)),
                      ([6], (200, 210))]
    owners = ["a", "b", "c", "b", "b", "a", "z"]
    groups = overlap_groups(extents, owners)
    assert groups == [([0, 5], (50, 110)), ([1, 3, 4], (0, 30)), ([6], (200, 210))]
    assert overlap_groups([]) == [] and overlap_groups([None]) == []
    assert overlap_groups([(10, 20), (0, 10)]) == [([0], (10, 20)), ([1], (0, 10))]  # touching


def test_overlap_groups_of_equal_starts():
    # Extents that start together overlap whatever order they come in.
    assert overlap_groups([(0, 4), (0, 8), (0, 2)]) == [([0, 1, 2], (0, 8))]
