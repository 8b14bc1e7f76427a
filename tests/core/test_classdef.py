"""Class-syntax schemas in one process: what they are, what their body may hold, what is refused."""

from __future__ import annotations

import copy
import inspect
import pickle
import typing
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest

import namedschema
from namedschema import (
    NamedArrayTuple,
    NamedArrayTupleSchema,
    NamedTuple,
    NamedTupleSchema,
    SchemaClassError,
    SchemaDefinitionError,
)
from namedschema._core.schema import declared_dtypes, has_class_body
from namedschema.buffer import buffer_from_example
from tests.core import class_schemas as cs

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def make_pair():
    """The same definition, once by class syntax and once by the factory (inside a function)."""
    class Samples(NamedArrayTuple):
        observation: np.ndarray
        action: np.ndarray
        reward: Any = 0.0
    return Samples, NamedArrayTupleSchema("Samples", "observation action reward",
                                          defaults=(0.0,))


def test_class_syntax_makes_a_schema_like_the_factory():
    """Kind, fields, defaults, signature, getters and accessors are the factory's."""
    cls, factory = make_pair()
    assert type(cls) is NamedArrayTupleSchema and issubclass(cls, NamedArrayTuple)
    assert cls.__bases__ == factory.__bases__ == (NamedArrayTuple,)
    assert cls._fields == factory._fields and cls._field_defaults == factory._field_defaults
    assert str(inspect.signature(cls)) == str(inspect.signature(factory))
    assert cls.__new__.__code__.co_code == factory.__new__.__code__.co_code
    assert cls.__new__.__defaults__ == factory.__new__.__defaults__
    assert cls.__getitem__ is factory.__getitem__ and cls.__setitem__ is factory.__setitem__
    assert type(cls.__dict__["action"]) is type(factory.__dict__["action"])
    assert cls.__slots__ == () and cls.__match_args__ == cls._fields
    assert cls.__qualname__ == "make_pair.<locals>.Samples" and cls.__module__ == __name__
    assert namedschema.is_namedarraytuple_class(cls) and cls._schema_id != factory._schema_id
    assert cls(1, 2).reward == 0.0
    s = cls(np.arange(4.0), np.arange(4), np.zeros(4))
    assert s[1:3].observation.tolist() == [1.0, 2.0]
    assert type(s[1]) is cls and s._replace(reward=1).reward == 1
    s[0] = cls(9.0, 9, 0.0)
    assert s.observation[0] == 9 and s.action[0] == 9
    assert not hasattr(s, "__dict__")


def test_plain_kind_and_empty_body():
    class Point(NamedTuple):
        x: int
        y: int = 0

    class Empty(NamedTuple):
        pass
    assert type(Point) is NamedTupleSchema and Point(1) == (1, 0) and repr(Point(2, 3)) == \
        "Point(x=2, y=3)"
    assert Point.__doc__ == "Point(x, y)" and Point._make([4, 5]).y == 5
    assert Empty._fields == () and Empty() == () and Empty.__annotations__ == {}
    with pytest.raises(AttributeError):
        Point(1).x = 2


def test_docstring_methods_properties_class_attributes_and_super():
    class Pair(NamedArrayTuple):
        """A pair of arrays."""
        left: np.ndarray
        right: np.ndarray
        scale: ClassVar[float] = 2.0   # ClassVar: a class attribute, not a field
        UNITS = "m"

        def total(self):
            return (self.left + self.right) * self.scale

        @property
        def width(self):
            return len(self.left)

        @classmethod
        def zeros(cls, n):
            return cls(np.zeros(n), np.zeros(n))

        @staticmethod
        def kind():
            return "pair"

        def __repr__(self):
            return f"<Pair of {self.width}> " + super().__repr__()

        def me(self):
            return __class__
    p = Pair(np.ones(3), np.arange(3.0))
    assert Pair.__doc__ == "A pair of arrays." and Pair._fields == ("left", "right")
    assert p.total().tolist() == [2.0, 4.0, 6.0] and p.width == 3 and Pair.UNITS == "m"
    assert Pair.zeros(2).left.tolist() == [0, 0] and type(Pair.zeros(2)) is Pair
    assert Pair.kind() == "pair" and p.me() is Pair
    assert repr(p).startswith("<Pair of 3> Pair(left=array(")
    assert p[1:].total().tolist() == [4.0, 6.0]   # indexing keeps the class and its methods
    assert has_class_body(Pair) and Pair._schema_body == (
        "scale", "UNITS", "total", "width", "zeros", "kind", "__repr__", "me")
    assert Pair.__annotations__ == {"left": "np.ndarray", "right": "np.ndarray",
                                    "scale": "ClassVar[float]"}


def test_set_name_runs_for_descriptors_in_the_body():
    class Named:
        def __set_name__(self, owner, name):
            self.where = (owner.__name__, name)

    class Holder(NamedTuple):
        x: int
        tag = Named()
    assert Holder.tag.where == ("Holder", "tag")


def test_count_and_index_fields_are_allowed_as_with_namedtuple():
    class Stats(NamedTuple):
        count: int
        index: int
    assert Stats(1, 2).count == 1 and Stats(1, 2).index == 2


REFUSED = [
    ("_private: int", "field '_private' starts with an underscore"),
    ("x: int = 1\n    y: int", "field 'y' without a default follows field 'x'"),
    ("__slots__ = ('a',)", "'__slots__' cannot be defined"),
    ("def __init__(self, x): pass", "'__init__' cannot be defined"),
    ("def __new__(cls, x): pass", "'__new__' cannot be defined"),
    ("def _replace(self, **kw): pass", "'_replace' cannot be defined"),
    ("_fields = ('a',)", "'_fields' cannot be defined"),
    ("def _make(cls, it): pass", "'_make' cannot be defined"),
    ("def __getnewargs__(self): pass", "'__getnewargs__' cannot be defined"),
    ("def __reduce__(self): pass", "'__reduce__' cannot be defined"),
    ("def __eq__(self, other): return True", "'__eq__' cannot be defined"),
    ("def __hash__(self): return 0", "'__hash__' cannot be defined"),
    ("def __len__(self): return 0", "'__len__' cannot be defined"),
    ("def __add__(self, other): return 0", "'__add__' cannot be defined"),
    ("def __getitem__(self, i): return 0", "'__getitem__' cannot be defined"),
    ("def __bool__(self): return False", "'__bool__' cannot be defined"),
    ("def __array__(self): return None", "'__array__' cannot be defined"),
    ("def __init_subclass__(cls): pass", "'__init_subclass__' cannot be defined"),
    ("_schema_id = 'x'", "'_schema_id' cannot be defined"),
    ("_schema_extra = 1", "names starting with '_schema' are reserved"),
    ("def __copy__(self): return self", "'__copy__' cannot be defined"),
    ("def __iadd__(self, other): return self", "'__iadd__' cannot be defined"),
]


@pytest.mark.parametrize("base", [NamedTuple, NamedArrayTuple])
@pytest.mark.parametrize("body, message", REFUSED)
def test_what_cannot_work_is_refused_naming_class_and_member(base, body, message):
    source = f"class Bad({base.__name__}):\n    a: int\n    {body}\n"
    with pytest.raises(SchemaClassError) as info:
        exec(source, {base.__name__: base, "Any": Any})
    assert str(info.value).startswith(f"class Bad({base.__name__}): ")
    assert message in str(info.value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, SchemaDefinitionError)


def test_array_tuple_methods_cannot_become_fields():
    with pytest.raises(SchemaClassError, match=r"class Bad\(NamedArrayTuple\): field 'get' "
                                               r"would hide the method NamedArrayTuple.get\(\)"):
        class Bad(NamedArrayTuple):
            get: int
    with pytest.raises(SchemaClassError, match="'items' cannot be defined"):
        class Bad2(NamedArrayTuple):
            def items(self):
                return []


def test_invalid_bases_metaclasses_and_keywords_are_refused():
    class Mixin:
        pass

    class B(NamedTuple):
        x: int
    with pytest.raises(SchemaClassError, match=r"class X\(NamedTuple\): a schema has exactly "
                                               "one base class.*inherit from .*Mixin"):
        class X(NamedTuple, Mixin):
            x: int
    with pytest.raises(SchemaClassError, match="exactly one base class"):
        class Y(NamedTuple, NamedArrayTuple):
            x: int
    with pytest.raises(SchemaClassError, match="exactly one base class"):
        class G(NamedTuple, typing.Generic[typing.TypeVar("T")]):
            x: int
    with pytest.raises(SchemaClassError, match="class keywords"):
        class K(NamedTuple, flavour=1):
            x: int

    class Meta(type(NamedTuple)):
        pass
    with pytest.raises(SchemaClassError, match="metaclass Meta is not supported"):
        class M(NamedTuple, metaclass=Meta):
            x: int
    with pytest.raises(SchemaClassError, match="exactly one base class"):
        class C(NamedTuple, B):
            y: str


def test_names_python_rejects_are_refused_with_the_class_name():
    with pytest.raises(SchemaClassError, match=r"class Bad\(NamedTuple\): .*keyword"):
        NamedTuple.__class__("Bad", (NamedTuple,), {"__annotations__": {"def": int},
                                                     "__qualname__": "Bad"})


def test_subclass_of_a_class_schema_keeps_methods_but_adds_no_fields():
    class Point(NamedTuple):
        x: int
        y: int = 0

        def norm1(self):
            return abs(self.x) + abs(self.y)

    class Labelled(Point):
        label: ClassVar[str] = "p"

        def twice(self):
            return self.norm1() * 2
    assert Labelled(-2, 1).twice() == 6 and Labelled._fields == ("x", "y")
    with pytest.raises(SchemaClassError, match=r"class Wider\(.*Point\): annotation 'z' "
                                               "would add a field"):
        class Wider(Point):
            z: int
    with pytest.raises(SchemaClassError, match="would add a field"):
        class AlsoWider(Labelled):
            w: int


def test_non_generic_subscript_gives_an_alias_that_constructs():
    class Group(NamedTuple):
        key: Any
        group: list
    alias = Group[int]
    assert alias.__origin__ is Group and alias.__args__ == (int,)
    assert type(alias(1, [2])) is Group


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_pickle_every_protocol_in_process_returns_the_same_class(protocol):
    cls, _ = make_pair()
    s = cls(np.arange(3.0), np.arange(3))
    back = pickle.loads(pickle.dumps([s, cls, cs.Transition, cs.Config(0.1)], protocol))
    assert type(back[0]) is cls and back[1] is cls and back[2] is cs.Transition
    assert back[3].discount(2) == pytest.approx(0.99 ** 2)
    assert np.array_equal(back[0].observation, s.observation)


def test_pickle_of_a_class_schema_is_the_pickle_of_a_factory_schema():
    """A class schema pickles as its definition (as the factory's do), never its class body."""
    import copyreg

    from namedschema._core.pickling import rebuild_schema
    func, args = copyreg.dispatch_table[type(cs.Transition)](cs.Transition)
    assert func is rebuild_schema
    assert args == ("NamedArrayTupleSchema", cs.Transition._schema_id, "Transition",
                    cs.Transition._fields, (None,), "tests.core.class_schemas")
    data = pickle.dumps(cs.Transition(1, 2, 3), 4)
    assert b"total_reward" not in data and b"rebuild_schema" in data


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy])
def test_copy_keeps_class(copier):
    c = copier(cs.Config(0.5))
    assert type(c) is cs.Config and c.discount(1) == 0.99


@pytest.mark.parametrize("modname", ["cloudpickle", "dill"])
def test_cloudpickle_and_dill_keep_the_class(modname):
    mod = pytest.importorskip(modname)
    local = cs.make_local()
    for obj in (local(np.ones(2)), cs.Config(1.0)):
        back = mod.loads(mod.dumps(obj))
        assert type(back) is type(obj)
    assert mod.loads(mod.dumps(local)) is local


def test_declared_dtypes():
    class Typed(NamedArrayTuple):
        a: npt.NDArray[np.float32]
        b: np.ndarray[Any, np.dtype[np.uint8]]
        c: np.ndarray
        d: npt.NDArray[np.int16] | None
        e: np.float64
        f: typing.Annotated[npt.NDArray[np.bool_], "mask"]
        g: float
        h: npt.NDArray[np.floating]
        i: npt.NDArray[Any]
        j: npt.NDArray[np.int8] | npt.NDArray[np.int16]
    assert declared_dtypes(Typed) == {
        "a": np.float32, "b": np.uint8, "c": None, "d": np.int16, "e": np.float64,
        "f": np.bool_, "g": None, "h": None, "i": None, "j": None}
    assert declared_dtypes(cs.Transition) == {"observation": np.uint8, "action": np.int64,
                                              "reward": np.float32, "done": np.bool_}
    assert declared_dtypes(NamedArrayTupleSchema("F", "a b")) == {"a": None, "b": None}
    for value in declared_dtypes(Typed).values():
        assert value is None or isinstance(value, np.dtype)


def test_declared_dtypes_reports_an_unresolvable_string_annotation():
    class Forward(NamedTuple):
        a: NotDefinedAnywhere  # noqa: F821 - a string under `from __future__ import annotations`
    with pytest.raises(SchemaDefinitionError, match=r"Forward.a: cannot evaluate the "
                                                    r"annotation 'NotDefinedAnywhere'"):
        declared_dtypes(Forward)


def test_buffers_and_rlpyt_helpers_accept_class_schemas():
    example = cs.Transition(np.zeros((2, 2), np.uint8), np.int64(0), np.float32(0), np.False_)
    buf = buffer_from_example(example, (5,))
    assert type(buf) is cs.Transition and buf.observation.shape == (5, 2, 2)
    buf[1] = cs.Transition(np.ones((2, 2), np.uint8), 3, 1.5, True)
    assert buf[1].action == 3 and buf.total_reward() == 1.5 and buf.steps == 5
    assert namedschema.namedarraytuple_like(buf) is cs.Transition


def test_checkpoint_round_trip_in_process(tmp_path):
    buf = cs.Transition(np.arange(12, dtype=np.uint8).reshape(3, 4), np.arange(3),
                        np.ones(3, np.float32))
    path = tmp_path / "t.nsb"
    namedschema.save({"buf": buf, "cfg": cs.Config(0.1)}, path)
    for mode in (None, "r"):
        back = namedschema.load(path, mmap_mode=mode)
        assert type(back["buf"]) is cs.Transition and back["buf"].total_reward() == 3.0
        assert np.array_equal(back["buf"].observation, buf.observation)
        assert back["cfg"].discount(0) == 1.0


@pytest.mark.subprocess
def test_bench_core_times_class_syntax_against_the_factory(tmp_path):
    import json

    from benchmarks.suite import core
    out = tmp_path / "core.json"
    cases = "class_construct_keyword,class_attr_access_8,class_getitem_slice"
    assert core.main(["--quick", "--cases", cases, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert {(r["case"], r["contender"]) for r in rows} == {
        (case, who) for case in cases.split(",") for who in ("factory", "class syntax")}
    assert all(r.get("reference") == "factory" for r in rows if r["contender"] != "factory")


def test_get_type_hints_lists_the_fields_only():
    assert typing.get_type_hints(cs.Config) == {"lr": float, "gamma": float}
    assert typing.get_type_hints(NamedTupleSchema("P", "a b")) == {}
