"""Property: the view-keeping reduction keeps any set of views aliased exactly as before.

A random base array, random views of it (slices with any step, transposes,
reshapes), with or without the base itself in the object, pickled with any
protocol: afterwards, writing through any array changes exactly the same
elements of every other array as it does in the original.
"""

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from namedschema.rlpyt.patch.pickling import reduce_keeping_views

DTYPES = ["uint8", "int16", "int32", "float32", "float64", "complex128", "bool"]


class Holder:
    __reduce_ex__ = reduce_keeping_views


@st.composite
def views_of(draw, base):
    """A view of ``base``: a slice per dimension, maybe transposed or flattened."""
    index = []
    for n in base.shape:
        start = draw(st.integers(0, n - 1))
        step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        stop = draw(st.integers(start + 1, n)) if step > 0 else None
        index.append(slice(start, stop, step))
    view = base[tuple(index)]
    how = draw(st.sampled_from(["as is", "transpose", "flat", "window"]))
    if how == "transpose":
        view = view.T
    elif how == "flat" and view.flags.c_contiguous:
        view = view.reshape(-1)
    elif how == "window" and view.ndim == 1 and view.size >= 2:
        view = np.lib.stride_tricks.sliding_window_view(view, 2, writeable=True)
    return view


@st.composite
def aliased_sets(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    base = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    views = draw(st.lists(views_of(base), min_size=1, max_size=5))
    others = [np.ones(3, dtype=dtype)] if draw(st.booleans()) else []
    return ([base] if draw(st.booleans()) else []) + views + others


def _strides(a):
    """Strides of the dimensions longer than 1 (numpy may change the others)."""
    return [s for n, s in zip(a.shape, a.strides, strict=False) if n > 1]


def _attach(arrays):
    h = Holder()
    h.arrays = arrays
    h.first = arrays[0]
    return h


@pytest.mark.slow
@given(aliased_sets(), st.integers(0, pickle.HIGHEST_PROTOCOL))
def test_property_aliasing_survives(arrays, protocol):
    """Property: equal values, same strides of views, and writes alias as before."""
    back = pickle.loads(pickle.dumps(_attach(arrays), protocol))
    assert back.first is back.arrays[0]
    restored = back.arrays
    for i, (a, b) in enumerate(zip(arrays, restored, strict=False)):
        assert a.dtype == b.dtype and a.shape == b.shape
        if any(np.shares_memory(a, x) for j, x in enumerate(arrays) if j != i):
            assert _strides(a) == _strides(b)  # a lone array may come back compacted
        assert np.array_equal(a, b)
    for i, (a, b) in enumerate(zip(arrays, restored, strict=False)):
        if a.flags.writeable:
            marker = np.array(1 + i, dtype=a.dtype)
            a[...] = marker
            b[...] = marker
            for x, y in zip(arrays, restored, strict=False):
                assert np.array_equal(x, y), "a write reached different elements"


@pytest.mark.slow
@given(aliased_sets())
def test_property_pickle_holds_each_byte_once(arrays):
    """Property: the pickle is no bigger than the distinct memory plus a bounded overhead."""
    spans = []
    for a in arrays:
        lo = hi = a.__array_interface__["data"][0]
        for n, s in zip(a.shape, a.strides, strict=False):
            lo, hi = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
        spans.append((lo, hi + a.itemsize))
    covered, end = 0, None
    for lo, hi in sorted(spans):
        if end is None or lo >= end:
            covered, end = covered + hi - lo, hi
        elif hi > end:
            covered, end = covered + hi - end, hi
    size = len(pickle.dumps(_attach(arrays), 5))
    assert size <= covered + 600 + 250 * len(arrays)
