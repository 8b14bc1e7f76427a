"""The structure model (namedschema._core.tree): kinds, paths, predicates and the map."""

from __future__ import annotations

import collections
import typing

import pytest

import namedschema
from namedschema._core import tree
from namedschema._core.tree import (
    CONTAINERS,
    DICT,
    FROZENSET,
    LIST,
    MEMBER,
    NAMED,
    SET,
    TUPLE,
    attributes,
    is_named,
    is_named_class,
    join_path,
    map_structure,
    node_of,
)

Point = collections.namedtuple("Point", "x y")
NT = namedschema.NamedTupleSchema("NT", "a b")
NAT = namedschema.NamedArrayTupleSchema("NAT", "a b")


class Typed(typing.NamedTuple):
    a: int
    b: int


class FieldsOnly(tuple):
    """A tuple that has ``_fields`` but none of a named tuple's methods."""

    _fields = ("a", "b")


class Classic(Point):
    """rlpyt's classic namedarraytuple: a namedtuple overriding __getitem__, with get/items."""

    def __getitem__(self, loc):
        return tuple.__getitem__(self, loc)

    def get(self, name):
        return getattr(self, name)

    def items(self):
        return zip(self._fields, self, strict=True)


@pytest.mark.parametrize("cls", [Point, NT, NAT, Typed, Classic])
def test_named_classes(cls):
    assert is_named_class(cls)
    assert is_named(cls(1, 2))
    assert node_of(cls(1, 2)) is NAMED


@pytest.mark.parametrize("obj", [tuple, FieldsOnly, int, None, (1, 2), Point(1, 2)])
def test_not_named_classes(obj):
    assert not is_named_class(obj)


def test_only_named_tuple_instances_are_named():
    assert not is_named(Point)            # the class, not an instance
    assert not is_named(FieldsOnly((1, 2)))
    assert not is_named((1, 2))


@pytest.mark.parametrize("path, key, dotted, expected", [
    ("", "samples", False, "samples"),
    ("replay", "samples", False, "replay.samples"),
    ("x", 0, False, "x[0]"),
    ("x", True, False, "x[True]"),
    ("opt", "a b", False, "opt['a b']"),
    ("opt", "0", False, "opt['0']"),
    ("", "0", False, "['0']"),
    ("opt", "é", False, "opt.é"),
    ("opt", (1, 2), False, "opt[(1, 2)]"),
    ("s", MEMBER, False, "s{...}"),
    # state_dict names in the pickle path's array names (the file stores them)
    ("m", "conv.0.weight", True, "m.conv.0.weight"),
    ("", "0", True, "0"),
    ("m", "é", True, "m['é']"),
    ("m", "a b", True, "m['a b']"),
])
def test_join_path(path, key, dotted, expected):
    assert join_path(path, key, dotted=dotted) == expected


def test_long_keys_are_spelled_whole():
    key = "observations of the second camera, kept for the replay buffer"
    assert join_path("runs[0]", key) == f"runs[0][{key!r}]"


def test_node_of_exact_types_and_subclasses():
    od = collections.OrderedDict(a=1)
    assert node_of({}) is DICT and node_of([]) is LIST and node_of(()) is TUPLE
    assert node_of(od) is None and node_of(od, subclasses=True) is DICT
    assert node_of(FieldsOnly((1, 2)), subclasses=True) is TUPLE
    assert node_of({1}) is None                      # sets are not among CONTAINERS
    assert node_of({1}, (SET,)) is SET and node_of(frozenset(), (FROZENSET,)) is FROZENSET
    assert node_of(Point(1, 2), (TUPLE,)) is None    # a named tuple is NAMED, not TUPLE
    assert node_of("ab") is None and node_of(b"ab") is None


def test_items_and_rebuild():
    assert list(NAMED.items(NT(1, 2))) == [("a", 1), ("b", 2)]
    assert NAMED.rebuild(NAT(1, 2), [3, 4]) == NAT(3, 4) and type(NAMED.rebuild(NAT(1, 2), [3, 4])) is NAT
    od = collections.OrderedDict(a=1, b=2)
    assert DICT.rebuild(od, [3, 4]) == collections.OrderedDict(a=3, b=4)
    assert type(DICT.rebuild(od, [3, 4])) is collections.OrderedDict
    assert list(SET.items({5})) == [(MEMBER, 5)] and SET.rebuild({5}, [6]) == {6}


def test_attributes_skip_classes_modules_and_functions():
    class Holder:
        def __init__(self):
            self.value = 1

    assert attributes(Holder()) == {"value": 1}
    for opaque in (Holder, collections, test_join_path, print, len.__call__):
        assert attributes(opaque) is None
    assert attributes(3) is None


def test_map_structure_paths_and_rebuilds():
    obj = {"step": NT([1, 2], (3,)), "a b": [4]}
    seen = []
    out = map_structure(obj, lambda leaf, path: seen.append(path) or leaf * 10, path="root")
    assert seen == ["root.step.a[0]", "root.step.a[1]", "root.step.b[0]", "root['a b'][0]"]
    assert out == {"step": NT([10, 20], (30,)), "a b": [40]} and type(out["step"]) is NT


def test_map_structure_keeps_what_did_not_change_and_shared_parts():
    inner = [1, 2]
    obj = {"x": inner, "y": inner, "z": (3,)}
    calls = []
    out = map_structure(obj, lambda leaf, _path: calls.append(leaf) or leaf)
    assert out is obj and calls == [1, 2, 3]          # shared list mapped once
    out = map_structure(obj, lambda leaf, _path: leaf + 1)
    assert out["x"] is out["y"] and out["x"] == [2, 3]  # sharing kept


def test_map_structure_as_a_tree_rebuilds_each_place():
    inner = (1,)
    obj = (inner, inner)
    out = map_structure(obj, lambda leaf, _path: leaf, shared=False)
    assert out == obj and out is not obj and out[0] is not inner


def test_map_structure_cycles_and_depth():
    cyclic: list = [1]
    cyclic.append(cyclic)
    out = map_structure(cyclic, lambda leaf, _path: leaf)
    assert out is cyclic
    deep = [[[[1]]]]
    out = map_structure(deep, lambda leaf, _path: 2, max_depth=2)
    assert out == [[[[1]]]] and out[0][0] is deep[0][0]  # kept as is below the depth


def test_containers_are_the_default_kinds():
    assert CONTAINERS == frozenset({DICT, LIST, TUPLE, NAMED})
    assert tree.OPAQUE and type in tree.OPAQUE
