"""Property tests for buffer_from_example: structure, shapes, dtypes and pickling."""

import collections
import keyword
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from namedschema import NamedArrayTuple, NamedArrayTupleSchema, NamedTupleSchema
from namedschema.buffer import buffer_from_example, is_shared_memory, to_shared_memory
from tests.helpers import examples as n_examples
from tests.helpers import run_fresh

DTYPES = [np.uint8, np.int16, np.int64, np.float32, np.float64, np.bool_, np.complex64]
PROTOCOLS = list(range(pickle.HIGHEST_PROTOCOL + 1))

names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s) and s not in ("get", "items"))


def classic_nat(typename, fields):
    """A class shaped like rlpyt's classic namedarraytuple."""
    base = collections.namedtuple(typename, fields)
    return type(typename, (base,), {
        "__slots__": (),
        "__getitem__": lambda self, loc: type(self)(*(v if v is None else v[loc] for v in self)),
        "get": tuple.__getitem__,
        "items": lambda self: zip(self._fields, self, strict=True)})


MAKERS = {
    "stdlib": collections.namedtuple,
    "schema": NamedTupleSchema,
    "array_schema": NamedArrayTupleSchema,
    "classic": classic_nat,
}

leaves = st.one_of(
    st.none(),
    hnp.arrays(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)),
    st.integers(-2**62, 2**62), st.floats(allow_nan=False), st.booleans(),
    st.tuples(st.floats(allow_nan=False), st.floats(allow_nan=False)))


@st.composite
def named_node(draw, children):
    kind = draw(st.sampled_from(sorted(MAKERS)))
    fields = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    typename = draw(names).capitalize()
    cls = MAKERS[kind](typename, fields)
    return cls(*draw(st.lists(children, min_size=len(fields), max_size=len(fields))))


examples = st.recursive(leaves, named_node, max_leaves=8)
leading = st.lists(st.integers(0, 3), min_size=0, max_size=2).map(tuple)


def check_matches(buf, ex, lead):
    """Buffer mirrors example: array schemas for named nodes, None kept, shapes/dtypes."""
    if ex is None:
        assert buf is None
    elif hasattr(type(ex), "_fields"):
        assert isinstance(buf, NamedArrayTuple) and isinstance(type(buf), NamedArrayTupleSchema)
        assert type(buf)._fields == tuple(type(ex)._fields)
        assert type(buf)._typename == type(ex).__name__
        for b, e in zip(buf, ex, strict=True):
            check_matches(b, e, lead)
    else:
        a = np.asarray(ex)
        assert type(buf) is np.ndarray
        assert buf.shape == lead + a.shape and buf.dtype == a.dtype
        assert not buf.any()


def assert_same(a, b):
    """Same class all the way down and arrays equal bit for bit."""
    assert type(a) is type(b)
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    else:
        assert a is None and b is None


def fill(buf, seed):
    """Write deterministic non-zero data into every array leaf."""
    if isinstance(buf, tuple):
        for i, x in enumerate(buf):
            fill(x, seed + i + 1)
    elif isinstance(buf, np.ndarray):
        buf[...] = (np.arange(buf.size).reshape(buf.shape) + seed) % 2


@pytest.mark.slow
@given(examples, leading, st.booleans())
def test_structure_shapes_and_dtypes(ex, lead, shared):
    """buffer_from_example mirrors any nested example with leading dims prepended."""
    buf = buffer_from_example(ex, lead, share_memory=shared)
    check_matches(buf, ex, lead)


@pytest.mark.slow
@given(examples, leading, st.booleans(), st.sampled_from(PROTOCOLS))
def test_pickle_round_trip_in_process(ex, lead, shared, protocol):
    """Any buffer, shared or not, pickles into an equal buffer of the same classes."""
    buf = buffer_from_example(ex, lead, share_memory=shared)
    fill(buf, 3)
    back = pickle.loads(pickle.dumps(buf, protocol=protocol))
    assert_same(back, buf)


@pytest.mark.slow
@given(examples, leading)
def test_forking_pickler_and_to_shared_keep_values(ex, lead):
    """to_shared_memory and multiprocessing's pickler keep values; leaves end up shared."""
    buf = buffer_from_example(ex, lead)
    fill(buf, 1)
    shared = to_shared_memory(buf)
    assert_same(shared, buf)
    sent = ForkingPickler.loads(ForkingPickler.dumps(shared))
    assert_same(sent, buf)

    def all_shared(x):
        if isinstance(x, tuple):
            return all(all_shared(v) for v in x)
        return x is None or is_shared_memory(x)

    assert all_shared(sent)


@pytest.mark.subprocess
@settings(max_examples=n_examples(8))
@given(examples, leading, st.booleans())
def test_every_protocol_loads_in_fresh_interpreter(ex, lead, shared):
    """Pickles of a buffer with every protocol load in a fresh interpreter, one class per schema."""
    buf = buffer_from_example(ex, lead, share_memory=shared)
    fill(buf, 5)
    blobs = [pickle.dumps(buf, protocol=p) for p in PROTOCOLS]
    proc = run_fresh("""
        import pickle, sys
        blobs = pickle.loads(sys.stdin.buffer.read())
        loaded = [pickle.loads(b) for b in blobs]
        def types(x):
            if isinstance(x, tuple):
                return [type(x)] + [t for v in x for t in types(v)]
            return [type(x)]
        first = types(loaded[0])
        for other in loaded[1:]:
            assert all(a is b for a, b in zip(first, types(other), strict=True))
        out = [pickle.dumps(x, protocol=p) for p, x in enumerate(loaded)]
        sys.stdout.buffer.write(pickle.dumps(out, protocol=4))
        """, stdin=pickle.dumps(blobs, protocol=4))
    for echoed in pickle.loads(proc.stdout):
        assert_same(pickle.loads(echoed), buf)
