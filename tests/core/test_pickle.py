"""Pickling by value in one process: every protocol, copy, cloudpickle, dill, identity, safety."""

import collections
import copy
import gc
import pickle
import pickletools
import uuid

import numpy as np
import pytest

from namedschema import (
    NamedArrayTupleSchema,
    NamedTupleSchema,
    SchemaConflictError,
    SchemaDefinitionError,
)
from namedschema._core.pickling import rebuild_schema
from namedschema._core.schema import same_definition

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def make_local_schemas():
    """Schemas made inside a function: impossible to pickle by reference."""
    return (NamedTupleSchema("Point", "x y", defaults=(0,)),
            NamedArrayTupleSchema("Batch", "obs act"))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_instances_and_schemas_roundtrip_every_protocol(protocol):
    """Instances and schemas made in a function round-trip with every protocol to the same class."""
    Point, Batch = make_local_schemas()
    b = Batch(np.arange(6).reshape(3, 2), None)
    for obj in (Point(1), b, Point, Batch, [Point(1), Point(2, 3), Batch]):
        back = pickle.loads(pickle.dumps(obj, protocol))
        if isinstance(obj, list):
            assert back[0] == obj[0] and type(back[1]) is Point and back[2] is Batch
        elif isinstance(obj, type):
            assert back is obj
        else:
            assert type(back) is type(obj)
    back = pickle.loads(pickle.dumps(b, protocol))
    assert np.array_equal(back.obs, b.obs) and back.act is None


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy])
def test_copy_and_deepcopy(copier):
    """copy and deepcopy keep the schema and copy values as tuples do."""
    _, Batch = make_local_schemas()
    b = Batch(np.zeros(3), [1])
    c = copier(b)
    assert type(c) is Batch and np.array_equal(c.obs, b.obs)
    assert (c.act is b.act) == (copier is copy.copy)
    assert copier(Batch) is Batch


@pytest.mark.parametrize("modname", ["cloudpickle", "dill"])
def test_cloudpickle_and_dill_keep_the_schema(modname):
    """cloudpickle and dill round-trip instances to the very same schema in this process."""
    mod = pytest.importorskip(modname)
    Point, Batch = make_local_schemas()
    for obj in (Point(1, 2), Batch(np.ones(2), None)):
        back = mod.loads(mod.dumps(obj))
        assert type(back) is type(obj)
        assert pickle.loads(mod.dumps(obj)).__class__ is type(obj)


def test_same_schema_gives_same_bytes():
    """Pickling the same schema twice gives identical bytes (deterministic reducer)."""
    Point, _ = make_local_schemas()
    a, b = pickle.dumps(Point(1, 2), 4), pickle.dumps(Point(1, 2), 4)
    if a != b:  # pragma: no cover - show the difference
        pytest.fail("\n".join([pickletools.dis(a), pickletools.dis(b)]))
    assert a == b


def test_schema_stored_once_per_pickle():
    """Many instances of one schema pickle to about the size of the namedtuple list."""
    Point, _ = make_local_schemas()
    ours = len(pickle.dumps([Point(i, -i) for i in range(10_000)], 4))
    theirs = len(pickle.dumps([ClassicPoint(i, -i) for i in range(10_000)], 4))
    assert ours <= theirs * 1.01 + 300


def test_unpickle_returns_original_even_after_equal_schema_made():
    """In the pickling process, loads return the original schema, not a later twin."""
    Point, _ = make_local_schemas()
    data = pickle.dumps(Point(1, 2))
    Later = NamedTupleSchema("Point", "x y", defaults=(0,))
    assert same_definition(Later, Point) and Later is not Point
    assert type(pickle.loads(data)) is Point


def test_schema_rebuilt_after_original_is_gone_and_reused():
    """Once the original is collected, loading builds one schema and reuses it for later loads."""
    Point, _ = make_local_schemas()
    data = pickle.dumps(Point(1, 2))
    schema_id = Point._schema_id
    del Point
    gc.collect()
    first = pickle.loads(data)
    second = pickle.loads(data)
    assert type(first) is type(second) and type(first)._schema_id == schema_id
    assert first == (1, 2) and type(first)._field_defaults == {"y": 0}


def test_conflicting_unpickled_schema_is_refused():
    """A pickle claiming a live schema's id with other fields raises SchemaConflictError."""
    Point, _ = make_local_schemas()
    with pytest.raises(SchemaConflictError, match="already registered"):
        rebuild_schema("NamedTupleSchema", Point._schema_id, "Point", ("x", "y", "z"), (), "m")


@pytest.mark.parametrize("fields", [("x): import os; os.system('echo pwned') #",),
                                    ("__class__",), ("a b",)])
def test_crafted_field_names_are_validated_before_code_generation(fields):
    """A crafted pickle cannot inject code through field names: they are validated first."""
    with pytest.raises(SchemaDefinitionError):
        rebuild_schema("NamedTupleSchema", "crafted-id", "Evil", fields, (), "m")


def test_unknown_kind_is_refused():
    """A pickle naming an unknown schema kind is refused with a clear error."""
    with pytest.raises(SchemaDefinitionError, match="unknown kind 'os.system'"):
        rebuild_schema("os.system", "x", "Evil", ("a",), (), "m")


def test_subclass_defined_by_class_statement_pickles_by_reference():
    """A module-level class statement subclass pickles by name like an ordinary class."""
    p = ModulePoint(1, 2)
    data = pickle.dumps(p)
    assert b"ModulePoint" in data
    assert type(pickle.loads(data)) is ModulePoint


ClassicPoint = collections.namedtuple("ClassicPoint", "x y")  # importable: pickles by name
ModulePoint_base = NamedTupleSchema("ModulePoint_base", "x y")


class ModulePoint(ModulePoint_base):
    pass


def test_is_registered_schema_is_true_only_for_live_factory_schemas():
    """Factory schemas are registered; class-statement subclasses, namedtuples and
    instances are not, nor a class that copies a live schema's id."""
    from namedschema._core.pickling import is_registered_schema
    S = NamedTupleSchema("S", "a b")
    A = NamedArrayTupleSchema("A", "a b")

    class Sub(S):
        pass

    Impostor = type("Impostor", (tuple,), {"_schema_id": S._schema_id})
    assert is_registered_schema(S) and is_registered_schema(A)
    for other in (Sub, Impostor, collections.namedtuple("S", "a b"), S(1, 2), tuple,
                  NamedTupleSchema, None, S._schema_id):
        assert not is_registered_schema(other), other


def test_derived_schema_id_is_the_one_deterministic_id():
    """Module-level schemas get derived_schema_id's id (occurrence 0, then 1, ...)."""
    from namedschema._core.pickling import derived_schema_id
    first = derived_schema_id("NamedTupleSchema", "m", "P", ("x", "y"), None)
    assert first == derived_schema_id("NamedTupleSchema", "m", "P", ("x", "y"), None)
    assert first == derived_schema_id("NamedTupleSchema", "m", "P", ("x", "y"), None, 0)
    others = {derived_schema_id("NamedTupleSchema", "m", "P", ("x", "y"), None, 1),
              derived_schema_id("NamedTupleSchema", "m", "P", ("x", "y"), (0,)),
              derived_schema_id("NamedArrayTupleSchema", "m", "P", ("x", "y"), None),
              derived_schema_id("NamedTupleSchema", "n", "P", ("x", "y"), None),
              derived_schema_id("NamedTupleSchema", "m", "Q", ("x", "y"), None),
              derived_schema_id("NamedTupleSchema", "m", "P", ("x", "z"), None)}
    assert first not in others and len(others) == 6
    assert derived_schema_id("NamedTupleSchema", "__mp_main__", "P", ("x",), None) == \
        derived_schema_id("NamedTupleSchema", "__main__", "P", ("x",), None)

    class Unrepresentable:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert derived_schema_id("NamedTupleSchema", "m", "P", ("x",), (Unrepresentable(),)) is None
    code = ("from namedschema import NamedTupleSchema\n"
            "A = NamedTupleSchema('P', 'x y')\nB = NamedTupleSchema('P', 'x y')\n")
    module = f"module_{uuid.uuid4().hex}"  # a fresh name: occurrences count per process
    namespace = {"__name__": module}
    exec(compile(code, f"{module}.py", "exec"), namespace)
    assert namespace["A"]._schema_id == derived_schema_id(
        "NamedTupleSchema", module, "P", ("x", "y"), None, 0)
    assert namespace["B"]._schema_id == derived_schema_id(
        "NamedTupleSchema", module, "P", ("x", "y"), None, 1)
