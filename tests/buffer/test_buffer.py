"""Unit tests for namedschema.buffer (numpy parts) and its shared-memory arrays."""

import collections
import gc
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

from namedschema import (
    NamedArrayTuple,
    NamedArrayTupleSchema,
    NamedTupleSchema,
    StructureMismatchError,
    is_namedarraytuple,
)
from namedschema.buffer import (
    buffer_from_example,
    buffer_func,
    buffer_method,
    build_array,
    get_leading_dims,
    is_shared_memory,
    np_mp_array,
    to_shared_memory,
)
from namedschema.errors import BufferShapeError

Samples = collections.namedtuple("Samples", "agent_info env")
AgentInfo = collections.namedtuple("AgentInfo", "prev_action value")


def classic_nat(typename, fields):
    """A class shaped like rlpyt's classic namedarraytuple (no rlpyt needed)."""
    base = collections.namedtuple(typename, fields)

    def __getitem__(self, loc):
        return type(self)(*(None if v is None else v[loc] for v in self))

    def get(self, index):
        return tuple.__getitem__(self, index)

    def items(self):
        return zip(self._fields, self, strict=True)

    return type(typename, (base,), {"__slots__": (), "__getitem__": __getitem__,
                                    "get": get, "items": items})


def example():
    return Samples(AgentInfo(np.zeros(3, np.float32), None), np.zeros((2, 2), np.int16))


def test_namedtuple_example_becomes_schema_buffer():
    """A stdlib namedtuple example gives schema NamedArrayTuples with shapes and dtypes."""
    ex = Samples(AgentInfo(np.zeros(3, np.float32), None), np.zeros((84, 84), np.uint8))
    buf = buffer_from_example(ex, (5, 2))
    assert isinstance(buf, NamedArrayTuple)
    assert isinstance(type(buf), NamedArrayTupleSchema)
    assert type(buf)._typename == "Samples" and type(buf)._fields == ("agent_info", "env")
    assert isinstance(buf.agent_info, NamedArrayTuple)
    assert buf.agent_info.prev_action.shape == (5, 2, 3)
    assert buf.agent_info.prev_action.dtype == np.float32
    assert buf.agent_info.value is None
    assert buf.env.shape == (5, 2, 84, 84) and buf.env.dtype == np.uint8
    assert not buf.env.any()


def test_plain_tuple_is_an_array_leaf():
    """As in rlpyt, a plain tuple goes through np.asarray and becomes one array."""
    buf = buffer_from_example(Samples(None, (1, 2, 3)), 4)
    assert isinstance(buf.env, np.ndarray)
    assert buf.env.shape == (4, 3) and buf.env.dtype == np.int64


def test_scalars_give_default_dtypes():
    """Python and numpy scalars become arrays of numpy's default dtype for them."""
    ex = collections.namedtuple("S", "f i b u")(1.5, 3, True, np.uint16(2))
    buf = buffer_from_example(ex, [7])
    assert [a.dtype for a in buf] == [np.float64, np.int64, np.bool_, np.uint16]
    assert all(a.shape == (7,) for a in buf)


@pytest.mark.parametrize("dims, shape", [(3, (3, 2)), ((3,), (3, 2)), ([3, 4], (3, 4, 2)),
                                         ((), (2,)), (np.int64(2), (2, 2))])
def test_leading_dims_forms(dims, shape):
    """leading_dims may be an int, numpy int, tuple, list or empty tuple."""
    buf = buffer_from_example(AgentInfo(np.zeros(2), None), dims)
    assert buf.prev_action.shape == shape


def test_schema_array_example_reuses_its_class():
    """A schema NamedArrayTuple example's class is the buffer's class."""
    S = NamedArrayTupleSchema("S", "a b")
    ex = S(np.zeros(2), None)
    buf = buffer_from_example(ex, 3)
    assert type(buf) is S


def test_plain_schema_and_classic_nat_examples():
    """NamedTupleSchema and classic namedarraytuple examples become array schemas."""
    P = NamedTupleSchema("P", "x y")
    C = classic_nat("C", "p q")
    assert is_namedarraytuple(C(1, 2))
    buf = buffer_from_example(C(P(1.0, 2), np.zeros(2)), 4)
    assert isinstance(type(buf), NamedArrayTupleSchema) and type(buf)._typename == "C"
    assert isinstance(type(buf.p), NamedArrayTupleSchema) and type(buf.p)._fields == ("x", "y")
    assert buf.p.y.dtype == np.int64 and buf.q.shape == (4, 2)


def test_one_schema_per_example_class():
    """Two buffers built from one example type share one schema class."""
    a = buffer_from_example(example(), 2)
    b = buffer_from_example(example(), 3)
    assert type(a) is type(b) and type(a.agent_info) is type(b.agent_info)


def test_none_example_gives_none():
    """An example of None allocates nothing."""
    assert buffer_from_example(None, 3) is None


def test_object_dtype_is_refused_with_field_path():
    """An object leaf is refused, naming the dotted field path."""
    ex = Samples(AgentInfo(np.zeros(3), {"a": 1}), 1.0)
    with pytest.raises(StructureMismatchError, match=r"Samples\.agent_info\.value") as info:
        buffer_from_example(ex, 2)
    assert isinstance(info.value, TypeError)
    assert "dtype=object" in str(info.value)


def test_ragged_tuple_is_refused_with_field_path():
    """A ragged plain tuple cannot become an array; the error names the field."""
    ex = Samples(None, (np.zeros(2), np.zeros(3)))
    with pytest.raises(StructureMismatchError, match=r"Samples\.env"):
        buffer_from_example(ex, 2)


@pytest.mark.parametrize("dims, error", [((2, -1), BufferShapeError), (2.5, StructureMismatchError),
                                         (("a",), StructureMismatchError),
                                         (True, StructureMismatchError)])
def test_bad_leading_dims(dims, error):
    """Negative or non-integer leading dims raise an error naming the schema."""
    with pytest.raises(error, match=r"buffer_from_example\(Samples\): leading_dims"):
        buffer_from_example(example(), dims)


def test_build_array_matches_example():
    """build_array keeps dtype and trailing shape, and refuses objects."""
    a = build_array(np.zeros((3, 2), np.float16), (4,))
    assert a.shape == (4, 3, 2) and a.dtype == np.float16 and not is_shared_memory(a)
    s = build_array(1, 5, share_memory=True)
    assert s.shape == (5,) and is_shared_memory(s)
    with pytest.raises(StructureMismatchError, match="build_array"):
        build_array(object(), 2)


def test_np_mp_array_is_plain_zeroed_and_shared():
    """np_mp_array returns a writable, zeroed, C-contiguous plain ndarray in shared memory."""
    a = np_mp_array((4, 5), np.float32)
    assert type(a) is np.ndarray and a.flags.c_contiguous and a.flags.writeable
    assert a.shape == (4, 5) and a.dtype == np.float32 and not a.any()
    assert is_shared_memory(a) and is_shared_memory(a[1:, ::2]) and is_shared_memory(a.T)
    assert not is_shared_memory(a.copy()) and not is_shared_memory(np.zeros(3))
    assert is_shared_memory(np_mp_array(0, np.int8))


def test_np_mp_array_errors():
    """Negative shapes and object dtypes are refused."""
    with pytest.raises(BufferShapeError, match="np_mp_array: shape"):
        np_mp_array((2, -2), np.int8)
    with pytest.raises(StructureMismatchError, match="np_mp_array: dtype"):
        np_mp_array(3, object)


def test_shared_buffer_is_one_aligned_segment():
    """A shared buffer's leaves are aligned and independent (writes don't overlap)."""
    buf = buffer_from_example(example(), (3, 2), share_memory=True)
    leaves = [buf.agent_info.prev_action, buf.env]
    for a in leaves:
        assert is_shared_memory(a) and a.ctypes.data % 64 == 0
    buf.env[...] = 255
    assert not buf.agent_info.prev_action.any()


def test_plain_pickle_writes_data_not_handles():
    """Plain pickle of a shared buffer loads as ordinary, equal, unshared arrays."""
    buf = buffer_from_example(example(), 3, share_memory=True)
    buf.env[1] = 7
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(buf, protocol=protocol))
        assert type(back) is type(buf)
        assert np.array_equal(back.env, buf.env) and not is_shared_memory(back.env)


def test_to_shared_memory_restores_a_checkpoint():
    """to_shared_memory copies a loaded buffer into shared memory, keeping None and types."""
    buf = buffer_from_example(example(), 3)
    buf.env[2] = 9
    shared = to_shared_memory(pickle.loads(pickle.dumps(buf)))
    assert type(shared) is type(buf) and shared.agent_info.value is None
    assert is_shared_memory(shared.env) and np.array_equal(shared.env, buf.env)
    shared.env[0] = 1
    assert not buf.env[0].any()
    with pytest.raises(StructureMismatchError, match=r"buffer\[1\]"):
        to_shared_memory((np.zeros(2), [1, 2]))


def test_forking_pickler_keeps_sharing_and_falls_back():
    """multiprocessing's pickler sends shared arrays by handle and others by value."""
    a = np_mp_array(6, np.int32)
    view = a[::2]
    back = ForkingPickler.loads(ForkingPickler.dumps(view))
    back[1] = 5
    assert a[2] == 5 and back.strides == view.strides
    plain = np.arange(4)
    copy = ForkingPickler.loads(ForkingPickler.dumps(plain))
    assert np.array_equal(copy, plain) and not is_shared_memory(copy)


def test_forking_pickler_leaves_ndarray_subclasses_alone():
    """ndarray subclasses keep their own pickling under multiprocessing."""
    m = np.ma.masked_array([1, 2, 3], mask=[0, 1, 0])
    back = ForkingPickler.loads(ForkingPickler.dumps(m))
    assert type(back) is np.ma.MaskedArray and back.mask.tolist() == [False, True, False]


def test_segment_refuses_plain_pickle():
    """The raw segment object cannot be pickled outside multiprocessing."""
    a = np_mp_array(3, np.int8)
    seg = a.base
    while isinstance(seg, np.ndarray):
        seg = seg.base
    with pytest.raises(TypeError, match="multiprocessing"):
        pickle.dumps(seg)


def test_segment_freed_when_unreferenced():
    """Dropping every array of a segment unmaps it and closes its descriptor."""
    from namedschema.buffer import shared_memory as _shared_memory

    gc.collect()
    before = _shared_memory.segment_count()
    a = np_mp_array(1000, np.float64)
    assert _shared_memory.segment_count() == before + 1
    del a
    gc.collect()
    assert _shared_memory.segment_count() == before


def test_buffer_method_and_func_on_numpy():
    """buffer_method/buffer_func map over leaves, keeping types and None."""
    P = NamedArrayTupleSchema("P", "a b c")
    buf = P(np.arange(6).reshape(2, 3), None, (np.ones(2), np.zeros(1)))
    sums = buffer_method(buf, "sum", axis=0)
    assert type(sums) is P and sums.b is None and type(sums.c) is tuple
    assert sums.a.tolist() == [3, 5, 7] and sums.c[0] == 2.0
    doubled = buffer_func(buf, np.multiply, 2)
    assert doubled.a[1, 2] == 10 and doubled.c[0].tolist() == [2.0, 2.0]


def test_traversal_refuses_foreign_leaves():
    """Leaves that are not arrays are refused with their path."""
    with pytest.raises(StructureMismatchError, match=r"AgentInfo\.value"):
        buffer_method(AgentInfo(np.zeros(2), [1, 2]), "sum")


def test_get_leading_dims():
    """get_leading_dims returns the common dims and names paths on mismatch."""
    buf = buffer_from_example(example(), (4, 3))
    assert get_leading_dims(buf, n_dim=2) == (4, 3)
    assert get_leading_dims(None) is None
    with pytest.raises(BufferShapeError, match=r"Samples\.agent_info\.prev_action \(4,\)"):
        get_leading_dims(Samples(AgentInfo(np.zeros(4), None), np.zeros(5)))
    with pytest.raises(BufferShapeError, match="no array"):
        get_leading_dims(Samples(None, None))


def test_all_none_example_allocates_nothing():
    """An example whose fields are all None gives a buffer of Nones and no segment."""
    from namedschema.buffer import shared_memory as _shared_memory

    gc.collect()
    before = _shared_memory.segment_count()
    buf = buffer_from_example(Samples(AgentInfo(None, None), None), 3, share_memory=True)
    assert buf.env is None and buf.agent_info.value is None
    assert _shared_memory.segment_count() == before
