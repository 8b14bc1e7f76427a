"""Schema definition: validation, defaults, identity, equality, class behaviour."""

import collections
import sys

import pytest

import namedschema
from namedschema import (
    NamedArrayTuple,
    NamedArrayTupleSchema,
    NamedTuple,
    NamedTupleSchema,
    SchemaDefinitionError,
)
from namedschema._core.schema import same_definition


@pytest.mark.parametrize("typename, fields, fragment", [
    ("abc%", "x y", "type name 'abc%' is not a valid identifier"),
    ("class", "x y", "type name 'class' is a keyword"),
    ("Obs", "2d y", "field name '2d' is not a valid identifier"),
    ("Obs", "pos def", "field name 'def' is a keyword"),
    ("Obs", "pos _t", "field name '_t' starts with an underscore"),
    ("Obs", "pos vel pos", "duplicate field name 'pos'"),
])
def test_invalid_names_raise_valueerror_naming_schema_and_name(typename, fields, fragment):
    """Bad names raise SchemaDefinitionError (a ValueError) naming the schema and the name."""
    with pytest.raises(SchemaDefinitionError) as info:
        NamedTupleSchema(typename, fields)
    assert isinstance(info.value, ValueError)
    assert fragment in str(info.value)
    assert f"NamedTupleSchema {typename!r}" in str(info.value)
    with pytest.raises(ValueError):  # stdlib raises the same builtin type
        collections.namedtuple(typename, fields)


@pytest.mark.parametrize("name", ["get", "items"])
def test_array_schema_refuses_method_names(name):
    """NamedArrayTupleSchema refuses 'get'/'items' and says which method they would hide."""
    with pytest.raises(SchemaDefinitionError, match=rf"'{name}' would hide the method"):
        NamedArrayTupleSchema("Batch", ["obs", name])
    assert NamedTupleSchema("Batch", ["obs", name])._fields == ("obs", name)
    assert NamedArrayTupleSchema("Batch", ["obs", name], rename=True)._fields == ("obs", "_1")


def test_defaults_errors_are_typeerrors_naming_schema():
    """Too many or non-iterable defaults raise TypeError that names the schema."""
    with pytest.raises(TypeError, match="'P': got 3 default values for 2 fields"):
        NamedTupleSchema("P", "x y", defaults=(1, 2, 3))
    with pytest.raises(TypeError, match="'P': defaults must be an iterable, got int"):
        NamedTupleSchema("P", "x y", defaults=10)


def test_keyword_only_options():
    """rename/defaults/module are keyword-only, as in namedtuple."""
    with pytest.raises(TypeError, match="keyword-only"):
        NamedTupleSchema("P", ["x", "y"], True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        NamedTupleSchema("P", "x", verbose=True)


def test_class_is_schema_and_instances_are_tuples():
    """The schema is the instance's exact type, and a tuple subclass with the base classes."""
    Point = NamedTupleSchema("Point", "x y")
    Step = NamedArrayTupleSchema("Step", "obs act")
    p, s = Point(1, 2), Step(1, 2)
    assert type(p) is Point and type(s) is Step
    assert isinstance(p, Point) and isinstance(p, NamedTuple) and isinstance(p, tuple)
    assert not isinstance(p, NamedArrayTuple)
    assert isinstance(s, NamedArrayTuple) and isinstance(s, NamedTuple)
    assert isinstance(Step, NamedTupleSchema) and isinstance(Step, NamedArrayTupleSchema)
    assert not isinstance(Point, NamedArrayTupleSchema)
    assert p._typename == "Point" and Point._typename == "Point"
    assert Point.__module__ == __name__ and Point.__qualname__ == "Point"


def test_each_call_makes_a_new_schema_that_compares_by_identity():
    """Separate calls give distinct classes that, like namedtuple classes, compare and
    hash by identity; same_definition compares what defines them."""
    A = NamedTupleSchema("P", "x y", defaults=(0,))
    B = NamedTupleSchema("P", "x y", defaults=(0,))
    assert A is not B and A != B and not isinstance(A(1), B)
    assert A == A and hash(A) == object.__hash__(A) and hash(B) == object.__hash__(B)
    assert {A: "a"}.get(B) is None and len({A, B}) == 2
    # The stdlib does the same for namedtuple classes.
    C, D = collections.namedtuple("P", "x y"), collections.namedtuple("P", "x y")
    assert C != D and {C: 1}.get(D) is None
    assert same_definition(A, B) and same_definition(A, A)
    assert not same_definition(A, NamedTupleSchema("P", "x y"))                      # defaults
    assert not same_definition(A, NamedTupleSchema("Q", "x y", defaults=(0,)))       # name
    assert not same_definition(A, NamedTupleSchema("P", "x z", defaults=(0,)))       # fields
    assert not same_definition(A, NamedArrayTupleSchema("P", "x y", defaults=(0,)))  # kind
    assert not same_definition(A, collections.namedtuple("P", "x y", defaults=(0,)))
    A.x.__doc__ = "changed"
    assert B.x.__doc__ == "Alias for field number 0"


def test_singledispatch_tells_schemas_with_one_definition_apart():
    """functools.singledispatch registered for one schema does not take its twin."""
    import functools
    A = NamedTupleSchema("P", "x y")
    B = NamedTupleSchema("P", "x y")

    @functools.singledispatch
    def kind(value):
        return "other"

    kind.register(A, lambda value: "A")
    assert kind(A(1, 2)) == "A" and kind(B(1, 2)) == "other"


def test_defaults_that_are_arrays_do_not_break_same_definition():
    """Array defaults compare without raising (arrays compare by identity)."""
    import numpy as np
    a = np.zeros(3)
    assert same_definition(NamedTupleSchema("P", "x", defaults=(a,)),
                           NamedTupleSchema("P", "x", defaults=(a,)))
    assert not same_definition(NamedTupleSchema("P", "x", defaults=(a,)),
                               NamedTupleSchema("P", "x", defaults=(np.zeros(3),)))


def test_subclass_by_class_statement_is_an_ordinary_class():
    """A class statement deriving from a schema works like subclassing a namedtuple class."""
    Base = NamedTupleSchema("Base", "x y")

    class Point(Base):
        def norm2(self):
            return self.x ** 2 + self.y ** 2

    p = Point(3, 4)
    assert p.norm2() == 25 and repr(p) == "Point(x=3, y=4)" and p._replace(x=0) == (0, 4)
    assert Point != Base and Point == Point and hash(Point) == hash(Point)
    assert isinstance(p, Base)


def test_zero_one_and_many_fields():
    """Zero, one and 10,000 fields work (the generic, non-unrolled path included)."""
    Empty = NamedArrayTupleSchema("Empty", "")
    assert Empty() == () and Empty()[3] == () and repr(Empty()) == "Empty()"
    One = NamedArrayTupleSchema("One", "a")
    assert One([1, 2])[1] == (2,)
    names = [f"f{i}" for i in range(10_000)]
    Big = NamedArrayTupleSchema("Big", names)
    b = Big(*[[i, i + 1] for i in range(10_000)])
    assert b[1] == tuple(range(1, 10_001)) and b.f9999 == [9999, 10000]


def test_unicode_identifiers():
    """Non-ASCII identifiers are valid names, as in namedtuple."""
    T = NamedTupleSchema("Größe", "länge breite λ")
    assert T(1, 2, 3).λ == 3 and T._fields == ("länge", "breite", "λ")


def test_names_equal_to_internal_identifiers():
    """Field names used inside the library (cls, self, loc, value, exc, j, f0, v0) are fine."""
    names = ["cls", "self", "loc", "value", "exc", "j", "f0", "v0", "tuple_new", "index", "count"]
    T = NamedArrayTupleSchema("T", names)
    import numpy as np
    t = T(*[np.arange(3) for _ in names])
    t[1] = T(*[10 + i for i in range(len(names))])
    assert [int(v) for v in t[1]] == [10 + i for i in range(len(names))]
    assert t._replace(cls=None).cls is None


def test_module_defaults_to_caller_and_function_api_matches():
    """__module__ is the caller's module, also through namedschema.namedtuple."""
    assert NamedTupleSchema("P", "x").__module__ == __name__
    assert namedschema.namedtuple("P", "x").__module__ == __name__
    assert namedschema.namedarraytuple("P", "x").__module__ == __name__
    assert NamedTupleSchema("P", "x", module="elsewhere").__module__ == "elsewhere"


def test_schema_creation_does_not_grow_builtins_or_leak_globals():
    """The generated __new__ sees no builtins and only the tuple constructor."""
    P = NamedTupleSchema("P", "x")
    assert P.__new__.__globals__["__builtins__"] == {}
    assert set(P.__new__.__globals__) <= {"_tuple_new", "__builtins__", "__name__", "__new__"}


def test_getframe_unavailable_is_not_needed_when_module_given(monkeypatch):
    """Passing module= avoids frame inspection entirely."""
    monkeypatch.setattr(sys, "_getframe", None)
    assert NamedTupleSchema("P", "x", module="m").__module__ == "m"
