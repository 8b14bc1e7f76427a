"""Property tests: random structures and array layouts round-trip through save/load exactly."""

from __future__ import annotations

import ctypes
import os
import tempfile

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import namedschema
from namedschema.checkpoint._header import ALLOWED_DTYPES as _ALLOWED_DTYPES
from tests.helpers import examples

DTYPES = sorted(_ALLOWED_DTYPES)
SCHEMAS = [namedschema.NamedArrayTupleSchema("Pair", "a b"),
           namedschema.NamedTupleSchema("Trio", "x y z"),
           namedschema.NamedArrayTupleSchema("Solo", "only")]


@st.composite
def arrays(draw):
    """An array of any allowed dtype and small shape, possibly as a strided/Fortran view."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    arr = draw(hnp.arrays(dtype, shape, elements=None if dtype.kind != "b" else st.booleans()))
    layout = draw(st.sampled_from(["c", "f", "view", "transpose"]))
    if layout == "f":
        arr = np.asfortranarray(arr)
    elif layout == "transpose":
        arr = arr.T
    elif layout == "view" and arr.ndim:
        steps = draw(st.lists(st.sampled_from([1, 2, -1, -2]), min_size=arr.ndim,
                              max_size=arr.ndim))
        arr = arr[tuple(slice(None, None, s) for s in steps)]
    return arr


leaves = st.one_of(arrays(), st.none(), st.booleans(), st.integers(), st.text(max_size=5),
                   st.floats(allow_nan=False))


def extend(children):
    schema_values = st.sampled_from(SCHEMAS).flatmap(
        lambda S: st.lists(children, min_size=len(S._fields),
                           max_size=len(S._fields)).map(S._make))
    return st.one_of(st.lists(children, max_size=3), st.tuples(children, children),
                     st.dictionaries(st.text(max_size=4), children, max_size=3),
                     schema_values)


structures = st.recursive(leaves, extend, max_leaves=8)


def assert_same(got, want):
    if isinstance(want, np.ndarray):
        assert type(got) is np.ndarray and got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()  # bitwise, so NaNs compare too
    elif isinstance(want, dict):
        assert type(got) is dict and list(got) == list(want)
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
    else:
        assert type(got) is type(want) and got == want


def save_load(obj, **kwargs):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.nsb")
        namedschema.save(obj, path)
        return namedschema.load(path, **kwargs), path


@pytest.mark.slow
@settings(max_examples=examples(30))
@given(structures, st.sampled_from([None, "r", "c"]))
def test_random_structures_round_trip(obj, mode):
    """Any nested structure of schemas, containers, scalars and arrays round-trips exactly."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.nsb")
        namedschema.save(obj, path)
        assert_same(namedschema.load(path, mmap_mode=mode, verify=True), obj)


@pytest.mark.slow
@settings(max_examples=examples(30))
@given(st.sampled_from(DTYPES), st.integers(1, 40), st.data())
def test_views_of_views_keep_aliasing(dtype, n, data):
    """Random (nested) views of one base share memory after load exactly when they did before."""
    base = np.arange(n * 6, dtype=np.int64).astype(dtype).reshape(n, 6)
    views = [base]
    for _ in range(data.draw(st.integers(1, 4))):
        parent = views[data.draw(st.integers(0, len(views) - 1))]
        start = data.draw(st.integers(0, max(parent.shape[0] - 1, 0)))
        step = data.draw(st.sampled_from([1, 2, -1, 3]))
        views.append(parent[start::step] if step > 0 else parent[start::step, ::-1])
    other = np.zeros(3, dtype)
    mode = data.draw(st.sampled_from([None, "r"]))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "v.nsb")
        namedschema.save(views + [other], path)
        back = namedschema.load(path, mmap_mode=mode)
    originals = views + [other]
    for i, (g, w) in enumerate(zip(back, originals, strict=True)):
        assert_same(g, w)
        for j in range(i):
            assert np.shares_memory(back[i], back[j]) == np.shares_memory(originals[i], originals[j])


# numpy dtype.str of the dtypes safetensors has a name for (little-endian only).
SAFETENSORS_DTYPES = {"|b1", "|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8",
                      "<f2", "<f4", "<f8", "<c8"}


def _span_bytes(a):
    """The bytes of memory from the lowest to the highest byte a non-empty view touches."""
    lo = hi = a.__array_interface__["data"][0]
    for n, s in zip(a.shape, a.strides, strict=True):
        lo, hi = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
    return ctypes.string_at(lo, hi + a.itemsize - lo)


def expected_tensor(a):
    """What safetensors must read for the block of ``a`` (the only array in its block).

    The spec: a C-order array of a dtype safetensors knows is declared as itself,
    a Fortran-order one as its transpose; a sparse view (span over twice its
    bytes) is stored as a C-order copy of its elements; anything else is the
    bytes of its span as U8.
    """
    span = _span_bytes(a)
    known = a.dtype.str in SAFETENSORS_DTYPES
    if len(span) > 2 * a.nbytes:
        copy = np.ascontiguousarray(a)
        return copy if known else np.frombuffer(copy.tobytes(), np.uint8)
    if known and a.flags.c_contiguous:
        return a
    if known and a.flags.f_contiguous:
        return a.T
    return np.frombuffer(span, np.uint8)


@pytest.mark.slow
@settings(max_examples=examples(20))
@given(st.lists(arrays(), min_size=1, max_size=4))
@example([np.arange(100.0).reshape(10, 10)[::2, ::3],           # sparse: compact copy
          np.arange(100, dtype=">i4").reshape(10, 10)[::3, ::2],  # compact, no st dtype
          np.asfortranarray(np.ones((3, 4), np.float32)),        # Fortran order
          np.arange(12, dtype=np.int16)[::-1],                   # reversed: U8 span
          np.array(7, np.uint8), np.arange(6.0).reshape(2, 3)[:, ::2]])
def test_safetensors_reads_every_block(arrs):
    """The safetensors package reads every block as the spec says: name, dtype, shape, bytes."""
    from safetensors.numpy import load_file

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.nsb")
        namedschema.save(arrs, path)
        tensors = load_file(path)
    blocks = {name for name in tensors if not name.startswith("__pad__")}
    assert blocks == {f"[{i}]" for i, a in enumerate(arrs) if a.size}
    for i, a in enumerate(arrs):
        if not a.size:
            continue
        got, want = tensors[f"[{i}]"], expected_tensor(a)
        assert (got.dtype, got.shape) == (want.dtype, want.shape), (a.flags, a.strides)
        assert got.tobytes() == want.tobytes()


@pytest.mark.slow
@settings(max_examples=examples(20))
@given(st.lists(arrays(), min_size=1, max_size=3))
def test_pickled_path_round_trips(arrs):
    """Arrays inside a non-data object round-trip through the pickled path with allow_pickle."""
    holder = Box(arrs)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "b.nsb")
        namedschema.save(holder, path, allow_pickle=True)
        back = namedschema.load(path, allow_pickle=True)
    assert type(back) is Box
    assert_same(back.items, arrs)


class Box:
    """A non-data container (forces the pickled path)."""

    def __init__(self, items):
        self.items = items



file_names = st.builds(
    lambda name, repeat: name * repeat,
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"),
            min_size=1, max_size=60),
    st.sampled_from([1, 1, 2, 8])).filter(lambda n: n not in (".", ".."))


@st.composite
def name_pairs(draw):
    """Two target names: unrelated, equal, or one a prefix/extension of the other."""
    a = draw(file_names)
    kind = draw(st.sampled_from(["other", "same", "longer", "tmp-like"]))
    if kind == "other":
        return a, draw(file_names)
    if kind == "same":
        return a, a
    if kind == "longer":
        return a, a + draw(st.sampled_from(["x", ".tmp-", "-1"]))
    return a, f"{a}.tmp-0123abcd-7"


@pytest.mark.slow
@given(name_pairs(), st.integers(1, 2**22), st.binary(min_size=4, max_size=4),
       st.booleans())
def test_temp_names_belong_to_exactly_one_target(pair, pid, token, swap):
    """A target's temp name fits in 255 bytes and matches another target's cleanup pattern never."""
    from namedschema.checkpoint import _write as atomic
    a, b = reversed(pair) if swap else pair
    tag = "0123abcd"
    name = f"{atomic.temp_prefix(a, tag)}{pid}-{token.hex()}"
    assert len(os.fsencode(name)) <= 255
    prefix_b = atomic.temp_prefix(b, tag)
    matches_b = (name.startswith(prefix_b)
                 and atomic.TEMP_TAIL.fullmatch(name, len(prefix_b)) is not None)
    assert matches_b == (a == b)


huge_dims = st.sampled_from([0, 1, 3, 2**20, 2**31, 2**40, 2**59, 2**61, 2**62, 2**63 - 1, 2**64])


@pytest.mark.slow
@settings(max_examples=examples(60))
@given(st.lists(huge_dims, min_size=1, max_size=4).map(lambda dims: [0] + dims),
       st.sampled_from(DTYPES), st.permutations(range(5)))
def test_empty_array_shapes_load_exactly_when_numpy_can_make_them(dims, dtype, order):
    """An empty array of any declared shape loads iff numpy can make it, else FormatError."""
    from namedschema.errors import FormatError
    from tests.checkpoint.test_format_errors import rewrite
    shape = [dims[i] for i in order if i < len(dims)]
    try:
        expected = np.empty(shape, np.dtype(dtype))
    except ValueError:
        expected = None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "e.nsb")
        namedschema.save({"e": np.zeros(0)}, path)

        def edit(header, desc):
            desc["arrays"][0].update(shape=shape, strides=[1] * len(shape), dtype=dtype)
        rewrite(path, edit)
        if expected is None:
            try:
                namedschema.load(path)
            except FormatError:
                return
            raise AssertionError(f"shape {shape} of {dtype} loaded; numpy refuses it")
        got = namedschema.load(path)["e"]
        assert got.shape == expected.shape and got.dtype == expected.dtype
