"""AttrDict stays its own ``__dict__`` through pickle (every protocol), copy and namedschema.load."""

import copy
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import namedschema
from namedschema import AttrDict
from namedschema._core.attrdict import reduce_attrdict, setstate_attrdict
from tests.helpers import run_fresh
from tests.strategies import identifiers

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


class Traj(AttrDict):
    """Like rlpyt's TrajInfo: counters kept as attributes, logged as items."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.Length = 0
        self.Return = 0.0

    def step(self, reward):
        self.Length += 1
        self.Return += reward


def assert_self_dict(d, seen=None):
    seen = set() if seen is None else seen
    seen.add(id(d))
    assert d.__dict__ is d
    for value in d.values():
        if isinstance(value, AttrDict) and id(value) not in seen:
            assert_self_dict(value, seen)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_round_trip_keeps_dict_is_self_and_counting(protocol):
    """After pickling, ``t.Length += 1`` updates the item: an in-progress trajectory keeps counting."""
    t = Traj()
    t.step(1.0)
    back = pickle.loads(pickle.dumps(t, protocol))
    assert type(back) is Traj and back == t
    assert_self_dict(back)
    back.step(2.0)
    t.step(2.0)
    assert back["Length"] == t["Length"] == 2 and back["Return"] == t["Return"] == 3.0
    back.new = 5
    assert back["new"] == 5 and "new" in back


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_nested_shared_and_self_containing(protocol):
    """Nested AttrDicts, one object referenced twice, and an AttrDict that contains itself."""
    inner = AttrDict(lr=0.1)
    outer = AttrDict(a=inner, b=inner, arr=np.arange(3))
    outer.me = outer
    back = pickle.loads(pickle.dumps(outer, protocol))
    assert_self_dict(back)
    assert back.a is back.b and back.me is back
    back.a.lr += 1
    assert back["b"]["lr"] == 1.1
    assert np.array_equal(back.arr, np.arange(3))


def test_copy_and_deepcopy():
    """copy.copy and copy.deepcopy keep keys and attributes one entry."""
    t = Traj(x=AttrDict(y=1))
    for c in (copy.copy(t), copy.deepcopy(t)):
        assert type(c) is Traj and c == t
        assert_self_dict(c)
        c.step(1.0)
        assert c["Length"] == 1 and t["Length"] == 0
    assert copy.copy(t).x is t.x and copy.deepcopy(t).x is not t.x


def _default_pickle(obj, protocol, monkeypatch):
    """A pickle made by the default reduction of a dict subclass (the old bytes)."""
    with monkeypatch.context() as m:
        m.delattr(AttrDict, "__reduce_ex__")
        return pickle.dumps(obj, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_old_pickles_are_repaired_on_load(protocol, monkeypatch):
    """Pickles written with the default reduction (before the fix) load self-dict too."""
    t = Traj()
    t.step(1.0)
    data = _default_pickle(t, protocol, monkeypatch)
    assert b"namedschema._core.attrdict" not in data  # really the default reduction
    back = pickle.loads(data)
    assert_self_dict(back)
    back.step(1.0)
    assert back["Length"] == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_negative_default_reduction_diverges(protocol, monkeypatch):
    """The bug reproduced: with neither method, the loaded object's attributes leave its items."""
    t = Traj()
    t.step(1.0)
    data = _default_pickle(t, protocol, monkeypatch)
    monkeypatch.delattr(AttrDict, "__setstate__")
    back = pickle.loads(data)
    assert back.__dict__ is not back
    back.step(1.0)
    assert back.Length == 2 and back["Length"] == 1  # the logged item stopped counting


def test_namedschema_save_load(tmp_path):
    """namedschema.save/load (the pickle path) keeps ``__dict__ is self``."""
    t = Traj(info=AttrDict(k=1))
    t.step(0.5)
    path = tmp_path / "t.nsc"
    namedschema.save({"traj": t, "n": 3}, path, allow_pickle=True)
    back = namedschema.load(path, allow_pickle=True)["traj"]
    assert_self_dict(back)
    back.step(0.5)
    assert back["Length"] == 2 and back["Return"] == 1.0


def test_fresh_interpreter():
    """A pickle of a module-level AttrDict subclass loads self-dict in a fresh interpreter."""
    t = Traj(info=AttrDict(k=1))
    t.step(1.0)
    data = pickle.dumps(t, 2)
    proc = run_fresh("""
        import pickle, sys
        t = pickle.loads(sys.stdin.buffer.read())
        t.step(1.0)
        t.info.k += 1
        assert t.__dict__ is t and t.info.__dict__ is t.info
        sys.stdout.write(repr((t["Length"], t["Return"], t["info"]["k"])))
        """, stdin=data)
    assert proc.stdout.decode() == "(2, 2.0, 2)"


def test_functions_are_the_class_methods():
    """The patch installs these same two functions on rlpyt's AttrDict."""
    assert AttrDict.__reduce_ex__ is reduce_attrdict
    assert AttrDict.__setstate__ is setstate_attrdict


@given(st.dictionaries(identifiers.filter(lambda k: k not in dir(dict)),
                       st.one_of(st.integers(), st.floats(allow_nan=False), st.text(),
                                 st.none()), max_size=8),
       st.integers(0, pickle.HIGHEST_PROTOCOL))
def test_property_round_trip(items, protocol):
    """Property: any AttrDict round-trips equal, self-dict, with attribute writes reaching items."""
    d = AttrDict(items)
    back = pickle.loads(pickle.dumps(d, protocol))
    assert back == d and back.__dict__ is back
    for key in items:
        setattr(back, key, "changed")
        assert back[key] == "changed"
