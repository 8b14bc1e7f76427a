"""Instance behaviour: namedtuple API, array indexing/assignment, errors with field paths."""

import numpy as np
import pytest

from namedschema import FieldError, NamedArrayTupleSchema, NamedTupleSchema
from namedschema._core.schema import MAX_UNROLLED_FIELDS
from namedschema.errors import FieldIndexError, FieldTypeError, FieldValueError

Step = NamedArrayTupleSchema("Step", "obs reward info")
Inner = NamedArrayTupleSchema("Inner", "pos vel")
Traj = NamedArrayTupleSchema("Traj", "obs act")


def make_step(n=5):
    return Step(np.zeros((n, 2)), np.zeros(n), None)


def test_namedtuple_api_on_instances():
    """_make, _replace, _asdict, __match_args__, __getnewargs__, repr, hashing behave as namedtuple."""
    P = NamedTupleSchema("P", "x y", defaults=(9,))
    p = P(1)
    assert p == (1, 9) and p._asdict() == {"x": 1, "y": 9} and type(p._asdict()) is dict
    assert P._make([3, 4]) == (3, 4) and P.__match_args__ == ("x", "y")
    assert p.__getnewargs__() == (1, 9) and hash(p) == hash((1, 9)) and repr(p) == "P(x=1, y=9)"
    with pytest.raises(ValueError, match=r"P._replace: unexpected field names \['z'\]"):
        p._replace(z=1)
    with pytest.raises(TypeError, match="P._make: expected 2 values, got 3"):
        P._make([1, 2, 3])
    with pytest.raises(AttributeError):
        p.x = 5
    match p:
        case P(x, y):
            assert (x, y) == (1, 9)


def test_getitem_applies_to_every_field_and_keeps_none():
    """x[loc] indexes every field, keeps None, and returns the same schema."""
    s = make_step()
    s.obs[2] = [1, 2]
    row = s[2]
    assert type(row) is Step and row.info is None
    assert np.array_equal(row.obs, [1, 2]) and row.reward == 0
    sl = s[1:3]
    assert sl.obs.shape == (2, 2) and np.shares_memory(sl.obs, s.obs)


def test_setitem_field_by_field_and_broadcast():
    """x[loc] = same-schema value writes per field; other values broadcast to non-None fields."""
    s = make_step()
    s[1] = Step(np.array([3.0, 4.0]), 5.0, None)
    assert np.array_equal(s.obs[1], [3, 4]) and s.reward[1] == 5
    s[2:4] = 7
    assert (s.obs[2:4] == 7).all() and (s.reward[2:4] == 7).all() and s.info is None


def test_setitem_accepts_other_tuples_with_same_fields():
    """A classic namedtuple with the same fields is written field by field (rlpyt semantics)."""
    import collections
    Classic = collections.namedtuple("Classic", "obs reward info")
    s = make_step()
    s[0] = Classic(np.ones(2), 2.0, None)
    assert np.array_equal(s.obs[0], [1, 1]) and s.reward[0] == 2


def test_nested_array_tuples_recurse():
    """Indexing and assignment recurse into nested named array tuples."""
    t = Traj(Inner(np.zeros((4, 3)), np.zeros(4)), np.zeros(4, dtype=np.int64))
    t[1] = Traj(Inner(np.ones(3), 2.0), 3)
    row = t[1]
    assert type(row.obs) is Inner and np.array_equal(row.obs.pos, [1, 1, 1]) and row.act == 3
    t[2] = 5
    assert t.obs.vel[2] == 5 and t.act[2] == 5


def test_get_items_contains():
    """get() is tuple indexing, items() yields pairs, 'in' checks field names."""
    s = make_step()
    assert s.get(0) is s.obs and s.get(-1) is None
    assert [k for k, _ in s.items()] == ["obs", "reward", "info"]
    assert "obs" in s and "nope" not in s


def test_read_error_names_schema_and_field_and_keeps_builtin_type():
    """An out-of-range index raises FieldIndexError (an IndexError) naming schema and field."""
    with pytest.raises(IndexError) as info:
        make_step()[10]
    err = info.value
    assert isinstance(err, FieldIndexError) and err.path == ("obs",) and err.schema == "Step"
    assert str(err).startswith("Step.obs: cannot index with 10: IndexError")
    assert isinstance(err.__cause__, IndexError) and not isinstance(err.__cause__, FieldError)


def test_nested_read_error_has_dotted_path():
    """A failure inside a nested array tuple reports the full dotted path."""
    t = Traj(Inner(np.zeros((4, 3)), np.zeros(5)), np.zeros(5))
    with pytest.raises(FieldIndexError, match=r"^Traj\.obs\.pos: cannot index with 4"):
        t[4]


def test_write_error_reports_partial_assignment():
    """A failing assignment names the field and lists the fields already written."""
    t = Traj(Inner(np.zeros((4, 3)), np.zeros(4)), np.zeros(4))
    with pytest.raises(ValueError) as info:
        t[0] = Traj(Inner(np.ones(3), 1.0), np.ones(2))
    err = info.value
    assert isinstance(err, FieldValueError) and err.path == ("act",)
    assert err.written == ("obs",)
    assert "Traj.act[0]: cannot assign" in str(err) and "fields already written: obs" in str(err)
    assert t.obs.vel[0] == 1  # the earlier field really was written, as reported

    with pytest.raises(FieldValueError) as info:
        t[1] = Traj(Inner(np.ones(3), np.ones(2)), 1.0)
    assert info.value.path == ("obs", "vel") and info.value.written == ("obs.pos",)
    assert "Traj.obs.vel[1]" in str(info.value)


def test_a_write_that_fails_on_the_fast_route_is_reported_once_not_retried():
    """``x[i] = y`` of one schema with matching dtypes writes field by field at once; a
    write that fails there (even with an AttributeError, which the dtype test also
    catches) is reported as that field's error, and no field is written a second time."""
    calls = []

    class Refusing:
        dtype = np.dtype(np.float64)

        def __setitem__(self, loc, value):
            calls.append(loc)
            raise AttributeError("no writes here")

    Pair = NamedArrayTupleSchema("Pair", ("a", "b"))
    x = Pair(np.zeros(4), Refusing())
    with pytest.raises(AttributeError) as info:
        x[2] = Pair(np.array(1.0), np.array(5.0))
    assert isinstance(info.value, FieldError) and info.value.path == ("b",)
    assert info.value.written == ("a",) and calls == [2] and x.a[2] == 1


def test_write_into_none_field_is_a_clear_typeerror():
    """Assigning a value to a None field says the field is None."""
    s = make_step()
    with pytest.raises(FieldTypeError, match=r"Step.info\[0\]: cannot assign: the field is None, "
                                             r"so it cannot take a int value"):
        s[0] = Step(np.ones(2), 1.0, 3)


def test_first_field_failure_says_nothing_was_written():
    """When the first field fails, the message says no field was written."""
    with pytest.raises(FieldValueError, match="no field was written"):
        make_step()[0] = Step(np.ones(3), 1.0, None)


@pytest.mark.parametrize("n_fields", [1, 4, MAX_UNROLLED_FIELDS, MAX_UNROLLED_FIELDS + 1])
def test_unrolled_and_generic_paths_agree(n_fields):
    """The generated accessors and the generic loop give the same results and errors."""
    S = NamedArrayTupleSchema("S", [f"f{i}" for i in range(n_fields)])
    fields = [None if i % 3 == 2 else np.arange(6) * (i + 1) for i in range(n_fields)]
    x = S(*fields)
    y = x[1:4]
    for a, b in zip(y, fields, strict=True):
        assert (a is None and b is None) or np.array_equal(a, b[1:4])
    x[0] = -1
    assert all(f is None or f[0] == -1 for f in x)
    with pytest.raises(FieldIndexError):
        x[99]


def test_torch_tensor_fields():
    """Indexing and assignment work on torch tensors as on arrays."""
    torch = pytest.importorskip("torch")
    s = Step(torch.zeros(4, 2), torch.zeros(4), None)
    s[1] = Step(torch.ones(2), torch.tensor(3.0), None)
    assert s[1].obs.tolist() == [1.0, 1.0] and float(s.reward[1]) == 3.0
    with pytest.raises(FieldIndexError, match="Step.obs"):
        s[9]


class _Raising:
    """A field whose indexing and assignment raise a given exception."""

    def __init__(self, exc):
        self.exc = exc

    def __getitem__(self, loc):
        raise self.exc

    def __setitem__(self, loc, value):
        raise self.exc

    def __len__(self):
        return 4


@pytest.mark.parametrize("exc, builtins", [
    (RuntimeError("shape mismatch"), (RuntimeError,)),
    (ZeroDivisionError("zero"), (ZeroDivisionError, ArithmeticError)),
    (NotImplementedError("later"), (NotImplementedError, RuntimeError)),
    (AttributeError("attr"), (AttributeError,)),
    (LookupError("lookup"), (LookupError,)),
    (BufferError("buffer"), (BufferError,)),
    (np.exceptions.AxisError(3, 1), (ValueError, IndexError)),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), (UnicodeError, ValueError)),
])
@pytest.mark.parametrize("n_fields", [2, 70])  # unrolled and generic paths
def test_field_error_is_still_the_builtin_class_of_the_failure(exc, builtins, n_fields):
    """A field failing with any builtin exception class (or a subclass) gives a FieldError
    that ``except <that builtin>`` still catches, for reads and writes; it pickles."""
    import pickle
    S = NamedArrayTupleSchema("S", [f"f{i}" for i in range(n_fields)])
    s = S(np.zeros(4), _Raising(exc), *[np.zeros(4)] * (n_fields - 2))
    for action in (lambda: s[1], lambda: s.__setitem__(1, 0)):
        with pytest.raises(builtins[0]) as info:
            action()
        err = info.value
        assert isinstance(err, FieldError) and all(isinstance(err, b) for b in builtins)
        assert err.path == ("f1",) and err.__cause__ is exc
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)


def test_torch_shape_mismatch_is_still_a_runtime_error():
    """torch raises RuntimeError for shape mismatches; the FieldError is one too."""
    torch = pytest.importorskip("torch")
    s = Step(torch.zeros(4, 2), torch.zeros(4), None)
    with pytest.raises(RuntimeError, match=r"Step\.obs\[1\]: cannot assign") as info:
        s[1] = Step(torch.ones(3), torch.tensor(1.0), None)
    assert isinstance(info.value, FieldError)


def test_tracebacks_show_the_lines_of_generated_methods():
    """Generated __getitem__ / __setitem__ / __new__ source is in linecache: tracebacks
    through them show their lines, and inspect.getsource finds them."""
    import inspect
    import traceback

    class Boom:
        def __getitem__(self, loc):
            raise RuntimeError("boom")

        def __setitem__(self, loc, value):
            raise RuntimeError("boom")

    S = NamedArrayTupleSchema("S", "a b")
    s = S(np.zeros(3), Boom())
    for action, line in ((lambda: s[1], "_raise_read_error(self, loc, exc)"),
                         (lambda: s.__setitem__(1, 0), "f1[loc] = value")):
        try:
            action()
        except FieldError:
            text = traceback.format_exc()
        frames = text.split('File "<namedschema accessors for 2 fields>"')
        assert len(frames) > 1, text
        assert any(f.splitlines()[1].strip() == line for f in frames[1:]), text
    P = NamedTupleSchema("P", "x y")
    assert inspect.getsource(P.__new__) == ("def __new__(_cls, x, y):\n"
                                            "    return _tuple_new(_cls, (x, y))\n")
    Wide = NamedTupleSchema("Wide", [f"field_{i}" for i in range(300)])
    assert "field_299" in inspect.getsource(Wide.__new__)
