"""Bad input to every public core function: wrong types, mismatched structures and shapes.

Errors must be namedschema errors (or the builtin the API documents), name the
schema and field path, and say when an assignment was partially applied.
"""

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import namedschema
from namedschema import (
    NamedArrayTupleSchema,
    NamedTupleSchema,
    namedarraytuple,
    namedarraytuple_like,
    namedtuple,
)
from namedschema._core import pickling as _pickle
from namedschema.errors import FieldError, NamedSchemaError, SchemaDefinitionError
from tests.figures import record

# Each field-name argument with what it must give: the fields of a schema that
# is made (as collections.namedtuple would), or the error and a message fragment.
WRONG = [
    (None, TypeError, "field_names must be a str"),
    (3, TypeError, "field_names must be a str"),
    (2.5, TypeError, "field_names must be a str"),
    (object(), TypeError, "field_names must be a str"),
    (b"bytes", SchemaDefinitionError, "field name '98' is not a valid identifier"),
    (np.zeros(2), SchemaDefinitionError, "field name '0.0' is not a valid identifier"),
    (["1bad"], SchemaDefinitionError, "field name '1bad' is not a valid identifier"),
    (["a", "a"], SchemaDefinitionError, "duplicate field name 'a'"),
    (["class"], SchemaDefinitionError, "field name 'class' is a keyword"),
    ("a b-c", SchemaDefinitionError, "field name 'b-c' is not a valid identifier"),
    ("_x", SchemaDefinitionError, "field name '_x' starts with an underscore"),
    ({"a": 1}, ("a",), None),    # an iterable of names, like namedtuple's
    ("", (), None),              # no fields, like namedtuple's
]


@pytest.mark.slow
@pytest.mark.parametrize("factory", [NamedTupleSchema, NamedArrayTupleSchema, namedtuple,
                                     namedarraytuple])
@pytest.mark.parametrize("fields, expected, message", WRONG, ids=repr)
def test_wrong_field_names_give_clear_errors(factory, fields, expected, message):
    """Each wrong field-name argument is refused with the error naming the schema, or gives the namedtuple fields."""
    if isinstance(expected, tuple):
        assert factory("Sch", fields)._fields == expected
    else:
        with pytest.raises(expected) as info:
            factory("Sch", fields)
        assert "'Sch'" in str(info.value) and message in str(info.value)
    record("bad_input.calls")


@pytest.mark.parametrize("fields", [5, None, 2.5])
def test_non_iterable_field_names_error_names_the_schema(fields):
    """A non-iterable field_names gives an error that names the schema being defined."""
    with pytest.raises((SchemaDefinitionError, TypeError), match="Sch"):
        NamedTupleSchema("Sch", fields)


@pytest.mark.parametrize("typename", [None, 5, "", "a b", "class", "1x", b"T"], ids=repr)
def test_wrong_typenames_give_schema_definition_errors(typename):
    """Typenames that are not identifiers give SchemaDefinitionError naming the type name."""
    with pytest.raises(SchemaDefinitionError, match="type name"):
        NamedArrayTupleSchema(typename, "a")
    record("bad_input.calls")


@pytest.mark.parametrize("defaults", [5, (1, 2, 3), object()], ids=repr)
def test_wrong_defaults_give_type_errors_naming_the_schema(defaults):
    """Non-iterable or too many defaults give TypeError naming the schema."""
    with pytest.raises(TypeError, match="'Sch'"):
        NamedTupleSchema("Sch", "a b", defaults=defaults)
    record("bad_input.calls")


def test_construction_errors_name_the_schema():
    """Missing, extra or unknown arguments and bad _make/_replace name the schema."""
    S = NamedArrayTupleSchema("Sch", "a b")
    for call in (lambda: S(1), lambda: S(1, 2, 3), lambda: S(1, 2, c=3), lambda: S._make([1]),
                 lambda: S(1, 2)._replace(c=1)):
        with pytest.raises((TypeError, ValueError), match="Sch"):
            call()
        record("bad_input.calls")


@pytest.mark.parametrize("obj", [5, None, "Sch", (1, 2), [1], np.zeros(2), type, tuple])
def test_namedarraytuple_like_refuses_non_named_input(obj):
    """namedarraytuple_like on something unnamed raises TypeError saying what it got."""
    with pytest.raises(TypeError, match="expected a named tuple"):
        namedarraytuple_like(obj)
    record("bad_input.calls")


@pytest.mark.parametrize("obj", [5, None, "x", (1,), type, tuple, np.zeros(2), object(),
                                 NamedTupleSchema, NamedArrayTupleSchema])
def test_predicates_never_raise(obj):
    """The is_* predicates answer False for arbitrary objects instead of raising."""
    for pred in (namedschema.is_namedtuple, namedschema.is_namedarraytuple,
                 namedschema.is_namedtuple_class, namedschema.is_namedarraytuple_class):
        assert pred(obj) is False
    record("bad_input.calls", 4)


@pytest.mark.parametrize("args", [
    ("NoSuchKind", "id1", "T", ("a",), (), None),
    ("NamedTupleSchema", 5, "T", ("a",), (), None),
    ("NamedTupleSchema", "id2", "T", ("a", "a"), (), None),
    ("NamedTupleSchema", "id3", "T", ("import os",), (), None),
    ("NamedTupleSchema", "id4", "T", ("a",), (1, 2), None),
    (["list"], "id5", "T", ("a",), (), None),
])
def test_crafted_unpickle_arguments_are_refused(args):
    """rebuild_schema (what pickles call) refuses crafted arguments with a clear error."""
    with pytest.raises((NamedSchemaError, TypeError), match="T"):
        _pickle.rebuild_schema(*args)
    record("bad_input.calls")


def test_crafted_pickle_naming_a_conflicting_schema_is_refused():
    """A pickle reusing a live schema's id with other fields is refused, the live one untouched."""
    S = NamedTupleSchema("Sch", "a b")
    data = pickle.dumps(S(1, 2)).replace(b"\x8c\x01a", b"\x8c\x01z")
    with pytest.raises(NamedSchemaError, match="Sch"):
        pickle.loads(data)
    assert _pickle.lookup_schema(S._schema_id) is S and S._fields == ("a", "b")
    record("bad_input.calls")


_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3)


@pytest.mark.slow
@given(field_shapes=st.lists(_shapes, min_size=1, max_size=6),
       value_shape=_shapes, loc=st.integers(-5, 5), same_schema=st.booleans(),
       none_at=st.one_of(st.none(), st.integers(0, 5)))
def test_failed_assignment_reports_exactly_the_fields_it_wrote(field_shapes, value_shape,
                                                               loc, same_schema, none_at):
    """x[loc] = v either succeeds, or raises FieldError whose 'written' list is exactly what changed."""
    names = [f"f{i}" for i in range(len(field_shapes))]
    S = NamedArrayTupleSchema("Sch", names)
    fields = [np.zeros(s) for s in field_shapes]
    if none_at is not None and none_at < len(fields):
        fields[none_at] = None
    x = S(*fields)
    before = [None if f is None else f.copy() for f in x]
    if same_schema:
        value = S(*[np.full(value_shape, 1.0) for _ in names])
    else:
        value = np.full(value_shape, 1.0)
    # What numpy does field by field (a None field is skipped for a plain
    # value, and cannot receive a schema value's array): the expected outcome.
    expected = [None if f is None else f.copy() for f in before]
    must_fail = False
    sources = tuple(value) if same_schema else [value] * len(names)
    for target, source in zip(expected, sources, strict=True):
        if target is None:
            must_fail = same_schema
        else:
            try:
                target[loc] = source
            except (IndexError, ValueError, TypeError):
                must_fail = True
        if must_fail:
            break
    try:
        x[loc] = value
    except FieldError as exc:
        assert must_fail, f"numpy accepts x[{loc}] = value field by field"
        changed = {n for n, b, f in zip(names, before, x, strict=True)
                   if f is not None and not np.array_equal(b, f)}
        assert set(exc.written) >= changed
        assert exc.path[0] not in exc.written and str(exc).startswith(f"Sch.{exc.path[0]}[")
        if exc.written:
            assert "partial assignment, fields already written: " in str(exc)
        else:
            assert "no field was written" in str(exc) and not changed
        assert isinstance(exc, (IndexError, ValueError, TypeError))
    else:
        assert not must_fail, f"x[{loc}] = value was accepted; numpy refuses it"
        for got, want in zip(x, expected, strict=True):
            assert (got is None) == (want is None)
            assert got is None or got.tobytes() == want.tobytes()
    record("bad_input.calls")


@given(loc=st.one_of(st.text(max_size=3), st.floats(), st.tuples(st.integers(), st.integers()),
                     st.just(object()), st.lists(st.integers(-9, 9), max_size=3)))
def test_bad_read_index_names_the_schema_and_field(loc):
    """Indexing with a wrong key works or raises a FieldError naming Sch.<field>."""
    S = NamedArrayTupleSchema("Sch", "a b")
    a = np.arange(6.0).reshape(3, 2)
    x = S(a, None)
    try:
        want = a[loc]
    except (IndexError, ValueError, TypeError, KeyError):
        with pytest.raises(FieldError) as info:
            x[loc]
        assert str(info.value).startswith("Sch.a: cannot index with ")
        assert isinstance(info.value, (IndexError, ValueError, TypeError, KeyError))
    else:
        got = x[loc]
        assert type(got) is S and got.b is None and np.array_equal(got.a, want)
    record("bad_input.calls")
