"""Extreme schemas: 0, 1 and 10,000 fields, unicode and internal names, deep nesting.

Each case must work, or fail with a clear namedschema (or documented builtin)
error, and never hang or crash the interpreter. Cases that would hang run in a
child process with a time limit. Complements ``tests/core/test_schema.py``,
which covers the basic 0/1/10,000-field and unicode cases in-process.
"""

import pickle
import sys

import numpy as np
import pytest

from namedschema import NamedArrayTupleSchema, NamedTupleSchema
from namedschema.errors import FieldError, NamedSchemaError, SchemaDefinitionError
from tests.figures import record
from tests.helpers import echo_fresh, run_fresh

KINDS = [NamedTupleSchema, NamedArrayTupleSchema]


@pytest.mark.subprocess
@pytest.mark.parametrize("kind", KINDS)
def test_zero_field_schema_round_trips_in_a_fresh_interpreter(kind):
    """A schema with no fields, and its empty instance, load in a fresh interpreter."""
    Empty = kind("Empty", [])
    back_cls, back = echo_fresh((Empty, Empty()))
    assert back_cls == Empty and back == () and type(back) is back_cls
    assert back._asdict() == {} and back._replace() == () and repr(back) == "Empty()"
    record("extreme.schemas")


def test_zero_field_array_tuple_assignment_and_indexing_are_no_ops():
    """Indexing or assigning an array tuple with no fields does nothing and raises nothing."""
    Empty = NamedArrayTupleSchema("Empty", "")
    e = Empty()
    e[0] = 5
    e[1:3] = Empty()
    assert e[::2] == () and type(e[0]) is Empty and Empty._make([]) == ()
    with pytest.raises(TypeError, match="Empty"):
        Empty._make([1])
    record("extreme.schemas")


@pytest.mark.subprocess
@pytest.mark.parametrize("kind", KINDS)
def test_one_field_schema_round_trips_with_default(kind):
    """A one-field schema with a default keeps its signature and default through pickling."""
    One = kind("One", "a", defaults=(7,))
    back = echo_fresh(One())
    assert back == (7,) and type(back)._field_defaults == {"a": 7}
    assert type(back).__doc__ == "One(a,)" and type(back)() == (7,)
    record("extreme.schemas")


@pytest.mark.subprocess
def test_ten_thousand_fields_pickle_in_a_fresh_interpreter():
    """A 10,000-field array schema and an instance load in a fresh interpreter as one class."""
    names = [f"f{i}" for i in range(10_000)]
    Big = NamedArrayTupleSchema("Big", names, defaults=(0,) * 10)
    b = Big(*range(9_990))
    cls_back, back = echo_fresh((Big, b))
    assert type(back) is cls_back and back.f9999 == 0 and back.f9989 == 9_989
    assert cls_back._fields == tuple(names)
    record("extreme.schemas")


@pytest.mark.slow
def test_ten_thousand_fields_partial_assignment_names_the_failing_field():
    """A shape error in the last of 10,000 fields names it and says the others were written."""
    n = 10_000
    Big = NamedArrayTupleSchema("Big", [f"f{i}" for i in range(n)])
    b = Big(*[np.zeros(3) for _ in range(n - 1)], np.zeros(2))
    with pytest.raises(FieldError) as info:
        b[:] = np.ones(3)
    err = info.value
    assert err.path == (f"f{n - 1}",) and len(err.written) == n - 1
    assert str(err).startswith(f"Big.f{n - 1}[") and "partial assignment" in str(err)
    assert all(float(v[0]) == 1.0 for v in tuple(b)[: n - 1])  # really written, as reported
    record("extreme.schemas")


@pytest.mark.subprocess
@pytest.mark.parametrize("typename, fields", [
    ("Größe", ["länge", "breite", "λ"]),
    ("数据", ["观测", "奖励"]),
    ("Ωmega", ["ƒ", "Ж", "א0"]),
])
def test_unicode_names_round_trip_in_a_fresh_interpreter(typename, fields):
    """Non-ASCII type and field names survive pickling into a fresh interpreter."""
    S = NamedArrayTupleSchema(typename, fields)
    back = echo_fresh(S(*[np.arange(2) + i for i in range(len(fields))]))
    assert type(back)._typename == typename and type(back)._fields == tuple(fields)
    assert int(getattr(back, fields[-1])[1]) == len(fields)
    record("extreme.schemas")


def test_non_nfkc_field_name_is_refused_or_usable():
    """A field name that Python normalises (the ligature U+FB01) is refused or fully usable."""
    try:
        T = NamedTupleSchema("T", ["\ufb01"])
    except SchemaDefinitionError:
        return
    name = "\ufb01"  # a variable: the parser would normalise it in ``t.<name>``
    t = T(**{name: 1})
    assert getattr(t, name) == 1


def test_field_names_equal_after_normalisation_are_a_definition_error():
    """Two field names equal after NFKC normalisation give SchemaDefinitionError."""
    with pytest.raises(SchemaDefinitionError, match="T"):
        NamedTupleSchema("T", ["fi", "\ufb01"])


INTERNAL_TYPENAMES = ["_tuple_new", "_cls", "NamedTuple", "NamedArrayTuple", "tuple",
                      "__builtins__", "__new__", "rebuild_schema", "_registry", "object"]


@pytest.mark.subprocess
@pytest.mark.parametrize("typename", INTERNAL_TYPENAMES)
def test_typenames_equal_to_internal_identifiers(typename):
    """Type names that the library uses internally make working, picklable schemas."""
    S = NamedArrayTupleSchema(typename, "a b")
    s = S(np.arange(3), None)
    s[1] = 9
    back = echo_fresh(s) if typename in ("_tuple_new", "NamedTuple") else pickle.loads(
        pickle.dumps(s))
    assert type(back)._typename == typename and int(back.a[1]) == 9 and back.b is None
    assert repr(s).startswith(typename + "(")
    record("extreme.schemas")


INTERNAL_FIELDS = ["isinstance", "getattr", "tuple", "self", "loc", "value", "exc", "j",
                   "f0", "v0", "f1", "v1", "cls", "iterable", "result", "n_fields",
                   "typename", "count", "index", "mro", "kwds"]


@pytest.mark.parametrize("n_extra", [0, 70])  # unrolled and generic accessors
def test_fields_named_like_generated_code_and_tuple_methods(n_extra):
    """Field names that appear in generated code or shadow tuple methods work on both paths."""
    names = INTERNAL_FIELDS + [f"x{i}" for i in range(n_extra)]
    S = NamedArrayTupleSchema("S", names)
    s = S(*[np.zeros(2) for _ in names])
    s[0] = S(*range(len(names)))
    assert [int(v[0]) for v in s] == list(range(len(names)))
    assert s._replace(index=None).index is None and S._make(list(s)) == s
    with pytest.raises(FieldError, match=r"S\.isinstance\["):
        s[0] = S(*([np.zeros(5)] + [0] * (len(names) - 1)))
    record("extreme.schemas")


def _nested(depth, leaf):
    L = NamedArrayTupleSchema("L", "a b")
    x = leaf
    for _ in range(depth):
        x = L(x, np.arange(4))
    return x


@pytest.mark.subprocess
def test_three_hundred_levels_of_nesting_work_everywhere():
    """300 nested array tuples index, assign, repr, compare and pickle into a fresh interpreter."""
    x = _nested(300, np.arange(4))
    y = x[1:3]
    inner = y
    for _ in range(300):
        inner = inner.a
    assert list(inner) == [1, 2]
    x[0] = 7
    assert int(x.b[0]) == 7 and repr(x).count("L(") == 300
    back = echo_fresh(x)
    inner = back
    for _ in range(300):
        inner = inner.a
    assert int(inner[0]) == 7
    record("extreme.schemas")


_DEEP_CHILD = """
import faulthandler, pickle, sys
faulthandler.dump_traceback_later({limit}, exit=True)
import numpy as np
from namedschema import NamedArrayTupleSchema
from namedschema.errors import FieldError
L = NamedArrayTupleSchema("L", "a b")
x = np.arange(4)
for _ in range(1000):
    x = L(x, np.arange(4))
op = sys.argv[1] if len(sys.argv) > 1 else {op!r}
try:
    if op == "setitem":
        x[1] = 5
    elif op == "repr":
        repr(x)
    elif op == "pickle":
        pickle.loads(pickle.dumps(x))
    elif op == "getitem":
        x[1]
    elif op == "eq":
        x == x
    print("worked")
except (RecursionError, FieldError) as exc:
    kind = "FieldError" if isinstance(exc, FieldError) else type(exc).__name__
    print("error", kind, type(exc).__name__, str(exc)[:40], str(exc)[-120:])
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("op", ["setitem", "repr", "pickle", "eq"])
def test_thousand_levels_of_nesting_work_or_fail_cleanly(op):
    """At 1,000 levels each operation works or raises RecursionError/FieldError promptly."""
    proc = run_fresh(_DEEP_CHILD.format(op=op, limit=120), timeout=180)
    out = proc.stdout.decode()
    # A field's RecursionError is reported as a FieldError that is a RecursionError too.
    assert out.startswith(("worked", "error RecursionError", "error FieldError",
                           "error FieldRecursionError")), out
    if op == "setitem" and out.startswith("error"):
        # The deepest level hit the recursion limit: the message must say so.
        assert "RecursionError" in out and "L.a.a" in out
    record("extreme.schemas")


@pytest.mark.subprocess
def test_thousand_levels_of_nesting_getitem_does_not_hang():
    """Indexing 1,000 nested array tuples works or raises within 5 s (it hangs today)."""
    proc = run_fresh(_DEEP_CHILD.format(op="getitem", limit=5), timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith((b"worked", b"error")), \
        proc.stderr[-300:]


class _CountingLeaf:
    """A leaf whose indexing always fails, counting how often it was tried."""

    calls = 0

    def __getitem__(self, loc):
        type(self).calls += 1
        raise IndexError("no such row")


def test_failing_index_on_nested_tuples_costs_linear_work():
    """A failing index 12 levels deep tries the failing leaf O(depth) times, not 2**depth."""
    _CountingLeaf.calls = 0
    x = _nested(12, _CountingLeaf())
    with pytest.raises(FieldError) as info:
        x[0]
    assert info.value.path == ("a",) * 12
    assert _CountingLeaf.calls <= 2 * 12, _CountingLeaf.calls


def test_failing_index_on_nested_tuples_names_the_full_path():
    """A failing index 5 levels deep names the dotted path to the failing leaf."""
    x = _nested(5, _CountingLeaf())
    with pytest.raises(FieldError) as info:
        x[0]
    assert str(info.value).startswith("L.a.a.a.a.a: cannot index with 0: IndexError")
    assert isinstance(info.value, IndexError)
    record("extreme.schemas")


def test_recursion_limit_is_restored_and_interpreter_usable_after_deep_failures():
    """After deep-nesting failures in this process the interpreter still works normally."""
    limit = sys.getrecursionlimit()
    x = _nested(1000, np.arange(4))
    with pytest.raises(RecursionError):
        repr(x)
    assert sys.getrecursionlimit() == limit
    assert repr(_nested(2, np.arange(1))).startswith("L(a=L(")
    assert isinstance(SchemaDefinitionError("x"), NamedSchemaError)
