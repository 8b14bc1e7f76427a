"""rlpyt-compatible functions: factories, *_like helpers, is_* predicates, AttrDict."""

import collections

import numpy as np
import pytest

from namedschema import (
    AttrDict,
    NamedArrayTupleSchema,
    NamedArrayTupleSchema_like,
    NamedTupleSchema,
    is_namedarraytuple,
    is_namedarraytuple_class,
    is_namedtuple,
    is_namedtuple_class,
    namedarraytuple,
    namedarraytuple_like,
    namedtuple,
)


def classic_namedarraytuple(name, fields):
    """A class-per-type named array tuple built the way rlpyt builds them (namedtuple subclass)."""
    base = collections.namedtuple(name, fields)

    def get(self, i):
        return tuple.__getitem__(self, i)

    def items(self):
        return zip(self._fields, self, strict=True)

    def getitem(self, loc):
        return type(self)(*(None if v is None else v[loc] for v in self))

    return type(name, (base,), {"__slots__": (), "__getitem__": getitem,
                                "get": get, "items": items})


def test_namedtuple_function_returns_schema():
    """namedschema.namedtuple has the stdlib signature and returns a NamedTupleSchema."""
    P = namedtuple("P", "x y", defaults=(1,), rename=False)
    assert isinstance(P, NamedTupleSchema) and P(0) == (0, 1)


def test_namedarraytuple_options():
    """return_namedtuple_cls and classname_suffix behave as in rlpyt."""
    nat, nt = namedarraytuple("Obs", ["a", "b"], return_namedtuple_cls=True, classname_suffix=True)
    assert isinstance(nat, NamedArrayTupleSchema) and nat.__name__ == "Obs_nat"
    assert isinstance(nt, NamedTupleSchema) and not isinstance(nt, NamedArrayTupleSchema)
    assert nt.__name__ == "Obs_nt" and nt._fields == nat._fields == ("a", "b")


@pytest.mark.parametrize("example_kind", ["stdlib", "classic_nat", "schema", "schema_nat"])
def test_like_helpers_accept_every_named_kind(example_kind):
    """namedarraytuple_like / NamedArrayTupleSchema_like accept classes and instances of each kind."""
    cls = {"stdlib": collections.namedtuple("Ex", "a b"),
           "classic_nat": classic_namedarraytuple("Ex", "a b"),
           "schema": NamedTupleSchema("Ex", "a b"),
           "schema_nat": NamedArrayTupleSchema("Ex", "a b")}[example_kind]
    for example in (cls, cls(1, 2)):
        for helper in (namedarraytuple_like, NamedArrayTupleSchema_like):
            out = helper(example)
            assert isinstance(out, NamedArrayTupleSchema)
            assert out.__name__ == "Ex" and out._fields == ("a", "b")
            if example_kind == "schema_nat":
                assert out is cls
    assert namedarraytuple_like(cls, classname_suffix=True).__name__ == (
        "Ex" if example_kind == "schema_nat" else "Ex_nat")


def test_like_helpers_reject_non_named():
    """Non-named inputs raise TypeError saying what was expected."""
    with pytest.raises(TypeError, match="expected a named tuple .* got list"):
        namedarraytuple_like([1, 2])


def test_predicates_recognise_classic_and_schema_types():
    """is_namedtuple* / is_namedarraytuple* agree for classic classes and schemas."""
    std = collections.namedtuple("A", "x")
    classic = classic_namedarraytuple("B", "x")
    nt, nat = NamedTupleSchema("C", "x"), NamedArrayTupleSchema("D", "x")
    assert [is_namedtuple_class(c) for c in (std, classic, nt, nat)] == [True, False, True, False]
    assert [is_namedarraytuple_class(c) for c in (std, classic, nt, nat)] == [False, True, False, True]
    assert [is_namedtuple(c(1)) for c in (std, classic, nt, nat)] == [True, False, True, False]
    assert [is_namedarraytuple(c(np.zeros(1))) for c in (std, classic, nt, nat)] == [
        False, True, False, True]
    for other in (tuple, (1,), type, int, None, "x"):
        assert not (is_namedtuple_class(other) or is_namedarraytuple_class(other)
                    or is_namedtuple(other) or is_namedarraytuple(other))


def test_attrdict():
    """AttrDict keys are attributes; copy() recurses into nested AttrDicts only."""
    inner = AttrDict(lr=0.1)
    arr = np.zeros(2)
    d = AttrDict(opt=inner, buf=arr)
    d.batch = 4
    assert d["batch"] == 4 and d.opt.lr == 0.1
    c = d.copy()
    assert c.opt is not inner and c.opt == inner and c.buf is arr
