"""Pickle protocol 5 out-of-band buffers: contiguous fields leave the stream uncopied."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import namedschema as ns
from tests.helpers import run_fresh

Inner = ns.NamedArrayTupleSchema("Inner", "pos vel")
Traj = ns.NamedArrayTupleSchema("Traj", "obs inner done strided fortran")
Plain = ns.NamedTupleSchema("Plain", "a b")


def _dump(obj):
    buffers = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return data, buffers


def _example():
    grid = np.arange(24.0).reshape(4, 6)
    return Traj(np.arange(84 * 84, dtype=np.uint8).reshape(84, 84),
                Inner(np.ones((5, 3)), None), None, grid[:, ::2],
                np.asfortranarray(grid))


def test_contiguous_fields_handed_out_as_pickle_buffers():
    """Every contiguous field (nested too) reaches buffer_callback as a PickleBuffer."""
    x = _example()
    data, buffers = _dump(x)
    assert all(isinstance(b, pickle.PickleBuffer) for b in buffers)
    sizes = sorted(memoryview(b).nbytes for b in buffers)
    assert sizes == sorted([x.obs.nbytes, x.inner.pos.nbytes, x.fortran.nbytes])
    assert len(data) < x.obs.nbytes // 4  # the big field is not in the stream


def test_pickle_buffers_are_not_copies():
    """Each PickleBuffer exposes the field's own memory, not a copy of it."""
    x = _example()
    _, buffers = _dump(x)
    views = [np.frombuffer(b.raw(), dtype=np.uint8) for b in buffers]
    for field in (x.obs, x.inner.pos, x.fortran):
        assert sum(np.shares_memory(v, field) for v in views) == 1


def test_load_with_same_buffers_shares_memory():
    """Loading with the handed-out buffers gives arrays backed by the original memory."""
    x = _example()
    data, buffers = _dump(x)
    y = pickle.loads(data, buffers=buffers)
    assert type(y) is Traj and type(y.inner) is Inner
    assert y.done is None and y.inner.vel is None
    assert np.shares_memory(y.obs, x.obs) and np.shares_memory(y.inner.pos, x.inner.pos)
    assert np.shares_memory(y.fortran, x.fortran) and y.fortran.flags.f_contiguous
    assert not np.shares_memory(y.strided, x.strided)  # non-contiguous: copied in band
    np.testing.assert_array_equal(y.strided, x.strided)
    y.obs[0, 0] = 200
    assert x.obs[0, 0] == 200


def test_load_with_foreign_buffers_backed_by_them():
    """Arrays loaded from received bytearrays are views of those bytearrays (writable) or bytes (read-only)."""
    x = _example()
    data, buffers = _dump(x)
    received = [bytearray(b.raw()) for b in buffers]
    y = pickle.loads(data, buffers=received)
    backing = [np.frombuffer(r, dtype=np.uint8) for r in received]
    assert any(np.shares_memory(y.obs, b) for b in backing)
    assert any(np.shares_memory(y.inner.pos, b) for b in backing)
    assert y.obs.flags.writeable
    frozen = pickle.loads(data, buffers=[bytes(b.raw()) for b in buffers])
    assert not frozen.obs.flags.writeable
    np.testing.assert_array_equal(frozen.inner.pos, x.inner.pos)


def test_missing_buffers_is_an_error():
    """A protocol-5 stream with out-of-band data refuses to load without its buffers."""
    data, buffers = _dump(_example())
    assert buffers
    try:
        pickle.loads(data)
    except pickle.UnpicklingError as exc:
        assert "out-of-band" in str(exc) or "buffers" in str(exc)
    else:
        raise AssertionError("loaded without buffers")


def test_namedtuple_of_arrays_and_scalars():
    """A plain NamedTuple schema also hands its array fields out of band."""
    x = Plain(np.zeros(1000), 3)
    data, buffers = _dump(x)
    assert len(buffers) == 1 and len(data) < 1000
    y = pickle.loads(data, buffers=buffers)
    assert type(y) is Plain and y.b == 3 and np.shares_memory(y.a, x.a)


def test_in_band_when_no_callback():
    """Without buffer_callback, protocol 5 keeps the data in band and loads alone."""
    x = _example()
    y = pickle.loads(pickle.dumps(x, protocol=5))
    assert type(y) is Traj and not np.shares_memory(y.obs, x.obs)
    np.testing.assert_array_equal(y.obs, x.obs)


def test_fresh_interpreter_loads_out_of_band():
    """A fresh interpreter loads the stream plus raw buffers into the same schema structure."""
    x = _example()
    data, buffers = _dump(x)
    parts = [data] + [bytes(b.raw()) for b in buffers]
    payload = pickle.dumps(parts, protocol=5)
    out = run_fresh("""
        import pickle, sys
        import numpy as np
        data, *raw = pickle.loads(sys.stdin.buffer.read())
        raw = [bytearray(r) for r in raw]
        y = pickle.loads(data, buffers=raw)
        backed = any(np.shares_memory(y.obs, np.frombuffer(r, np.uint8)) for r in raw)
        print(type(y).__name__, type(y.inner).__name__, y.done is None, backed,
              int(y.obs.sum()), y.fortran.flags.f_contiguous)
        """, stdin=payload)
    assert out.stdout.decode().split() == [
        "Traj", "Inner", "True", "True", str(int(x.obs.sum())), "True"]


_dtypes = st.sampled_from([np.uint8, np.int32, np.float32, np.float64, np.bool_])


@st.composite
def _trees(draw, depth=0):
    names = draw(st.lists(st.sampled_from(list("abcdefgh")), min_size=1,
                          max_size=4, unique=True))
    values = []
    for _ in names:
        choice = draw(st.integers(0, 3 if depth < 2 else 2))
        if choice == 0:
            values.append(None)
        elif choice == 3:
            values.append(draw(_trees(depth + 1)))
        else:
            arr = draw(hnp.arrays(draw(_dtypes), hnp.array_shapes(max_dims=3, max_side=5)))
            values.append(np.asfortranarray(arr) if choice == 2 else arr)
    return ns.NamedArrayTupleSchema(f"N{depth}", names)(*values)


def _leaves(tree):
    for value in tree:
        if isinstance(value, tuple):
            yield from _leaves(value)
        elif value is not None:
            yield value


@given(_trees())
def test_out_of_band_roundtrip_property(tree):
    """Any nesting of arrays and None round-trips out of band, one buffer per array, no copies."""
    data, buffers = _dump(tree)
    leaves = list(_leaves(tree))
    assert len(buffers) == len(leaves)
    back = pickle.loads(data, buffers=buffers)
    assert type(back) is type(tree)
    for a, b in zip(leaves, _leaves(back), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
        assert a.size == 0 or np.shares_memory(a, b)
    assert [v is None for v in tree] == [v is None for v in back]
