"""Property tests for the core: pickle round trips and array-tuple indexing invariants."""

import copy
import pickle

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

from namedschema import (
    NamedArrayTuple,
    NamedArrayTupleSchema,
    NamedTupleSchema,
    SchemaDefinitionError,
)
from tests.strategies import field_lists, identifiers, nested_instances, plain_instances, schemas

PROTOCOLS = st.integers(0, pickle.HIGHEST_PROTOCOL)


def assert_same_structure(a, b):
    """Equal values, same schema class all the way down, arrays equal bit for bit."""
    assert type(a) is type(b)
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same_structure(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    else:
        assert a == b or (a != a and b != b)


@given(plain_instances(), PROTOCOLS)
def test_plain_instances_roundtrip_every_protocol(x, protocol):
    """Any schema instance of plain values round-trips with every protocol to the same schema."""
    assert_same_structure(pickle.loads(pickle.dumps(x, protocol)), x)


@given(nested_instances(), PROTOCOLS)
def test_nested_array_instances_roundtrip(x, protocol):
    """Nested array tuples with None fields round-trip with every protocol, deepcopy too."""
    assert_same_structure(pickle.loads(pickle.dumps(x, protocol)), x)
    assert_same_structure(copy.deepcopy(x), x)


@given(schemas(), PROTOCOLS)
def test_schemas_roundtrip_to_themselves(schema, protocol):
    """A schema pickled on its own loads as the very same class in this process."""
    assert pickle.loads(pickle.dumps(schema, protocol)) is schema


@given(identifiers, field_lists, st.booleans())
def test_valid_definitions_match_namedtuple(typename, fields, array):
    """Any namedtuple-valid definition is accepted, with the same fields and repr."""
    import collections
    kind = NamedArrayTupleSchema if array else NamedTupleSchema
    S, C = kind(typename, fields), collections.namedtuple(typename, fields)
    assert S._fields == C._fields and S.__doc__ == C.__doc__
    values = list(range(len(fields)))
    assert repr(S._make(values)) == repr(C._make(values))


@given(st.lists(st.text(max_size=4), max_size=6))
def test_rename_matches_namedtuple(names):
    """rename=True produces exactly namedtuple's renamed fields (for NFKC-normal names)."""
    import collections
    import unicodedata
    # Deliberate difference: names Python would read differently (not NFKC-normal)
    # are renamed here, where namedtuple keeps them unusable.
    assume(all(unicodedata.normalize("NFKC", n) == n for n in names))
    try:
        expected = collections.namedtuple("T", names, rename=True)._fields
    except ValueError:
        try:
            NamedTupleSchema("T", names, rename=True)
        except SchemaDefinitionError:
            return
        raise AssertionError(
            "namedtuple refused a definition that NamedTupleSchema accepted") from None
    assert NamedTupleSchema("T", names, rename=True)._fields == expected


locs = st.one_of(st.integers(-3, 2), st.slices(3),
                 st.lists(st.integers(0, 2), max_size=4).map(lambda idx: np.array(idx, dtype=np.intp)))


def index_reference(x, loc):
    """Per-field indexing, the definition x[loc] must match."""
    if isinstance(x, NamedArrayTuple):
        return type(x)(*(None if v is None else index_reference(v, loc) for v in x))
    return x[loc]


@given(nested_instances(), locs)
def test_getitem_equals_per_field_indexing(x, loc):
    """x[loc] equals indexing every field separately, None fields kept."""
    assert_same_structure(x[loc], index_reference(x, loc))


@given(nested_instances(), st.integers(-3, 2), st.data())
def test_reading_a_slot_returns_what_was_assigned(x, loc, data):
    """After x[i] = y (y drawn from another instance's row), x[i] equals y."""
    source = copy.deepcopy(x)
    row = data.draw(st.integers(0, 2))
    value = source[row]
    x[loc] = value
    assert_same_structure(x[loc], value)
