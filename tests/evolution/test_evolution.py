"""Unit tests for namedschema.upgrade: the schema-evolution rules, one by one."""

from __future__ import annotations

import collections
import logging
import pickle
import types

import numpy as np
import numpy.typing as npt
import pytest

import namedschema
from namedschema import (
    NamedArrayTuple,
    NamedArrayTupleSchema,
    NamedTupleSchema,
    upgrade,
)
from namedschema.errors import (
    ExtraFieldError,
    FieldMismatchError,
    MissingFieldError,
    SchemaEvolutionError,
)
from namedschema.evolution import UpgradeReport, field_dtype

T, B = 6, 2


def old_samples():
    """A saved buffer of the old schema: Samples(observation, action, reward)."""
    Old = NamedArrayTupleSchema("Samples", "observation action reward")
    return Old(np.arange(T * B * 3, dtype=np.uint8).reshape(T, B, 3),
               np.arange(T * B, dtype=np.int64).reshape(T, B),
               np.linspace(0, 1, T * B, dtype=np.float32).reshape(T, B))


class Replay:
    """Stands in for a replay-buffer object: schema instances in attributes."""

    def __init__(self, samples):
        self.samples = samples
        self.samples_return_ = samples.reward   # rlpyt aliases the reward array
        self.t = 3


# --------------------------------------------------------------------------
# Added fields
# --------------------------------------------------------------------------

def test_added_field_scalar_default_fills_leading_shape_and_keeps_other_arrays():
    """A new field with a numpy scalar default becomes a zero array of the leading shape."""
    old = old_samples()
    Samples = NamedArrayTupleSchema("Samples", "observation action reward timeout",
                                    defaults=(np.bool_(False),))
    new = upgrade(old, [Samples])
    assert type(new) is Samples
    assert new.timeout.shape == (T, B) and new.timeout.dtype == np.bool_
    assert not new.timeout.any() and new.timeout.flags.writeable
    for name in old._fields:
        assert getattr(new, name) is getattr(old, name)
    new[0] = Samples(np.ones(3, np.uint8), 1, 0.5, True)   # the buffer takes new steps
    assert new.timeout[0].all() and new.observation[0, 0, 0] == 1


def test_added_field_nonzero_scalar_and_array_defaults_broadcast():
    """A nonzero scalar fills the leading shape; an array default adds its own shape."""
    old = old_samples()
    Samples = NamedArrayTupleSchema("Samples", "observation action reward gamma prev",
                                    defaults=(np.float32(0.99), np.zeros(4, np.int16)))
    new = upgrade(old, [Samples])
    assert new.gamma.shape == (T, B) and new.gamma.dtype == np.float32
    assert np.all(new.gamma == np.float32(0.99))
    assert new.prev.shape == (T, B, 4) and new.prev.dtype == np.int16


def test_added_field_callable_default_gets_leading_shape():
    """A callable default is called once with the buffer's leading shape (T, B)."""
    calls = []

    def make(shape):
        calls.append(shape)
        return np.full(shape + (2,), 7, np.int32)

    Samples = NamedArrayTupleSchema("Samples", "observation action reward prev_action",
                                    defaults=(make,))
    new = upgrade(old_samples(), [Samples])
    assert calls == [(T, B)]
    assert new.prev_action.shape == (T, B, 2) and (new.prev_action == 7).all()


def test_callable_default_with_wrong_leading_shape_is_refused():
    """A callable whose result does not start with the leading shape is an error naming it."""
    Samples = NamedArrayTupleSchema("Samples", "observation action reward bad",
                                    defaults=(lambda shape: np.zeros(3),))
    with pytest.raises(FieldMismatchError, match=r"Samples\.bad.*shape \(3,\)") as info:
        upgrade(old_samples(), [Samples])
    assert info.value.field == "bad" and info.value.schema == "Samples"


def test_callable_default_that_raises_names_the_field():
    """An exception inside the default callable is reported with schema and field."""
    def boom(shape):
        raise RuntimeError("no memory today")

    Samples = NamedArrayTupleSchema("Samples", "observation action reward extra_f",
                                    defaults=(boom,))
    with pytest.raises(SchemaEvolutionError, match="Samples.extra_f.*no memory today"):
        upgrade(old_samples(), [Samples])


def test_leading_shape_comes_from_declared_element_shape():
    """With a declared element shape the leading shape is exact, even if every field has extra dims."""
    Old = NamedArrayTupleSchema("Obs", "pos vel")
    old = Old(np.zeros((5, 3, 3)), np.zeros((5, 3, 3)))   # common prefix would be (5, 3, 3)
    Obs = NamedArrayTupleSchema("Obs", "pos vel flag", defaults=(np.zeros(3), np.int8(0)))
    new = upgrade(old, [Obs], casting="no")
    assert new.flag.shape == (5, 3)


def test_plain_namedtuple_gets_default_as_is():
    """A NamedTupleSchema's new field takes the default itself (no broadcasting, no call)."""
    Old = NamedTupleSchema("Config", "lr")
    Config = NamedTupleSchema("Config", "lr activation", defaults=(abs,))
    new = upgrade(Old(0.1), [Config])
    assert type(new) is Config and new.activation is abs and new.lr == 0.1


def test_none_fields_and_single_step_instances():
    """A None default stays None; a one-step instance (leading shape ()) gets the scalar itself."""
    Old = NamedArrayTupleSchema("Step", "obs")
    Step = NamedArrayTupleSchema("Step", "obs info reward", defaults=(None, np.float32(0)))
    new = upgrade(Old(np.uint8(3)), [Step])
    assert new.info is None and type(new.reward) is np.float32


def test_missing_field_without_default_is_an_error_naming_it():
    """No default for a new field: MissingFieldError names schema, field and where."""
    Samples = NamedArrayTupleSchema("Samples", "observation action reward timeout")
    with pytest.raises(MissingFieldError) as info:
        upgrade({"replay": old_samples()}, [Samples])
    err = info.value
    assert (err.schema, err.field, err.path) == ("Samples", "timeout", "replay")
    assert "timeout" in str(err) and "defaults=" in str(err)
    assert isinstance(err, ValueError)


def test_defaults_argument_supplies_and_overrides():
    """defaults={'Typename.field': ...} fills a field the schema has no default for."""
    Samples = NamedArrayTupleSchema("Samples", "observation action reward timeout")
    new = upgrade(old_samples(), [Samples],
                  defaults={"Samples.timeout": lambda shape: np.ones(shape, bool)})
    assert new.timeout.all() and new.timeout.shape == (T, B)
    with pytest.raises(TypeError, match="Typename.field"):
        upgrade(old_samples(), [Samples], defaults={"timeout": 0})
    with pytest.raises(ValueError, match="names no field"):
        upgrade(old_samples(), [Samples], defaults={"Samples.timeuot": 0})


# --------------------------------------------------------------------------
# Removed and reordered fields
# --------------------------------------------------------------------------

def test_extra_field_is_an_error_by_default():
    """A saved field the current schema lacks: ExtraFieldError naming it and the options."""
    Samples = NamedArrayTupleSchema("Samples", "observation reward")
    with pytest.raises(ExtraFieldError, match=r"'action'.*extra='ignore'") as info:
        upgrade(old_samples(), [Samples])
    assert info.value.field == "action" and info.value.schema == "Samples"


def test_extra_ignore_drops_and_keep_reports():
    """extra='ignore' drops the field; extra='keep' drops it and hands it back in the report."""
    old = old_samples()
    Samples = NamedArrayTupleSchema("Samples", "observation reward")
    new = upgrade(old, [Samples], extra="ignore")
    assert new._fields == ("observation", "reward") and new.reward is old.reward
    new, rep = upgrade({"s": old}, [Samples], extra="keep", report=True)
    assert rep.kept_fields("s") == {"action": old.action}
    assert rep.kept[0].schema == "Samples" and rep.kept[0].field == "action"
    assert rep.mappings[0].dropped == ("action",)


def test_reordered_fields_map_by_name():
    """Fields are matched by name, not position."""
    old = old_samples()
    Samples = NamedArrayTupleSchema("Samples", "reward observation action")
    new = upgrade(old, [Samples])
    assert new.reward is old.reward and new.observation is old.observation
    assert np.array_equal(new[2].action, old[2].action)


# --------------------------------------------------------------------------
# Declared dtypes
# --------------------------------------------------------------------------

def test_field_dtype_reads_numpy_defaults():
    """field_dtype: numpy scalars and arrays declare; other defaults do not."""
    S = NamedTupleSchema("S", "a b c d", defaults=(np.float32(0), np.zeros((2, 3), np.int8),
                                                   0.0))
    assert field_dtype(S, "b") == (np.dtype(np.float32), ())
    assert field_dtype(S, "c") == (np.dtype(np.int8), (2, 3))
    assert field_dtype(S, "d") is None and field_dtype(S, "a") is None
    with pytest.raises(KeyError, match="no field 'z'"):
        field_dtype(S, "z")


def test_dtype_change_refused_with_casting_no():
    """A saved float32 array where float64 is declared is refused, naming everything."""
    Samples = NamedArrayTupleSchema("Samples", "observation action reward",
                                    defaults=(np.float64(0),))
    with pytest.raises(FieldMismatchError) as info:
        upgrade({"buf": old_samples()}, [Samples])
    err = info.value
    assert (err.schema, err.field, err.saved, err.expected) == (
        "Samples", "reward", "float32", "float64")
    assert "buf.reward" in str(err) and "casting='no'" in str(err)


@pytest.mark.parametrize("casting, ok", [("no", False), ("equiv", False), ("safe", True),
                                         ("same_kind", True), ("unsafe", True)])
def test_widening_follows_numpy_casting_rules(casting, ok):
    """float32 -> float64 is allowed from casting='safe' on, as np.can_cast says."""
    old = old_samples()
    Samples = NamedArrayTupleSchema("Samples", "observation action reward",
                                    defaults=(np.float64(0),))
    if not ok:
        with pytest.raises(FieldMismatchError):
            upgrade(old, [Samples], casting=casting)
        return
    new, rep = upgrade(old, [Samples], casting=casting, report=True)
    assert new.reward.dtype == np.float64 and np.array_equal(new.reward, old.reward)
    assert new.observation is old.observation
    assert rep.mappings[0].cast == (("reward", "float32", "float64"),)


def test_narrowing_needs_same_kind_or_unsafe():
    """int64 -> int16 is same_kind; int64 -> float16 is 'unsafe' only (hint in the message)."""
    old = old_samples()
    S16 = NamedArrayTupleSchema("Samples", "observation action reward", defaults=(
        np.int16(0), np.float32(0)))
    assert upgrade(old, [S16], casting="same_kind").action.dtype == np.int16
    Sbool = NamedArrayTupleSchema("Samples", "observation action reward",
                                  defaults=(np.bool_(0), np.float32(0)))
    with pytest.raises(FieldMismatchError, match="casting='unsafe'"):
        upgrade(old, [Sbool], casting="same_kind")


def test_byte_order_is_equiv():
    """A big-endian saved array needs casting='equiv' for a native declaration."""
    Old = NamedArrayTupleSchema("P", "x")
    old = Old(np.arange(4, dtype=">f8"))
    P = NamedArrayTupleSchema("P", "x", defaults=(np.float64(0),))
    with pytest.raises(FieldMismatchError, match=">f8"):
        upgrade(old, [P])
    assert upgrade(old, [P], casting="equiv").x.dtype == np.dtype("<f8")


def test_shape_change_is_never_cast():
    """An element shape that differs from the declared one is refused for every casting."""
    Old = NamedArrayTupleSchema("P", "r x")
    P = NamedArrayTupleSchema("P", "r x", defaults=(np.zeros(3),))
    with pytest.raises(FieldMismatchError, match=r"\(5, 4\).*\(3,\)") as info:
        upgrade(Old(np.zeros(5), np.zeros((5, 4))), [P], casting="unsafe")
    assert info.value.saved == (4,) and info.value.expected == (3,)
    Q = NamedArrayTupleSchema("Q", "y x", defaults=(np.float64(0),))   # x: one per step
    OldQ = NamedArrayTupleSchema("Q", "x y")
    with pytest.raises(FieldMismatchError, match=r"Q\.x has saved shape \(5, 2\)") as info:
        upgrade(OldQ(np.zeros((5, 2)), np.zeros(5)), [Q])
    assert info.value.saved == (2,) and info.value.expected == ()


def test_declared_field_holding_a_nested_schema_is_refused():
    """A declared array field whose saved value is some other object is an error."""
    Inner = NamedTupleSchema("Inner", "a")
    Old = NamedTupleSchema("P", "x")
    P = NamedTupleSchema("P", "x", defaults=(np.float32(0),))
    with pytest.raises(FieldMismatchError, match="Inner"):
        upgrade(Old(Inner(1)), [P])
    assert upgrade(Old(None), [P]).x is None and upgrade(Old(2.0), [P]).x == 2.0


def test_cast_replaces_every_reference_to_the_array():
    """The rlpyt alias samples_return_ = samples.reward follows the cast (one array stays one)."""
    replay = Replay(old_samples())
    Samples = NamedArrayTupleSchema("Samples", "observation action reward",
                                    defaults=(np.float64(0),))
    upgrade(replay, [Samples], casting="safe")
    assert replay.samples.reward.dtype == np.float64
    assert replay.samples_return_ is replay.samples.reward


def test_cast_of_an_array_that_has_views_is_refused():
    """A cast would copy the array and leave a view behind on the old data: refused."""
    replay = Replay(old_samples())
    replay.recent = replay.samples.reward[-2:]
    Samples = NamedArrayTupleSchema("Samples", "observation action reward",
                                    defaults=(np.float64(0),))
    before = replay.samples
    with pytest.raises(SchemaEvolutionError, match="Replay.recent shares its memory"):
        upgrade(replay, [Samples], casting="safe")
    assert replay.samples is before     # nothing was changed


# --------------------------------------------------------------------------
# Finding the structure's instances
# --------------------------------------------------------------------------

def test_containers_and_objects_are_updated_in_place():
    """Lists, dicts, objects and AttrDicts are updated in place; tuples and sets rebuilt."""
    old = old_samples()
    Samples = NamedArrayTupleSchema("Samples", "observation action reward timeout",
                                    defaults=(np.bool_(False),))
    replay = Replay(old)
    shared = [old]
    attrs = namedschema.AttrDict(buf=old)
    OldKey = NamedTupleSchema("Key", "k")
    Key = NamedTupleSchema("Key", "k extra_k", defaults=(0,))
    graph = {"replay": replay, "a": shared, "b": shared, "t": (old, 1), "s": {OldKey(1)},
             "f": frozenset([OldKey(2)]), "attrs": attrs, "od": collections.OrderedDict(x=old)}
    result = upgrade(graph, [Samples, Key])
    assert result is graph and graph["a"] is shared and graph["replay"] is replay
    new = replay.samples
    assert type(new) is Samples
    assert shared[0] is new and graph["t"][0] is new and graph["t"][1] == 1
    assert graph["s"] == {Key(1, 0)} and type(next(iter(graph["s"]))) is Key
    assert graph["f"] == frozenset([Key(2, 0)]) and type(next(iter(graph["f"]))) is Key
    assert attrs.buf is new and attrs["buf"] is new and graph["od"]["x"] is new
    assert replay.samples_return_ is old.reward is new.reward


def test_nothing_changes_when_a_later_part_fails():
    """An error anywhere leaves every container as it was."""
    good = old_samples()
    Bad = NamedTupleSchema("Other", "x")
    graph = [good, {"bad": Bad(1)}]
    Samples = NamedArrayTupleSchema("Samples", "observation action reward timeout",
                                    defaults=(False,))
    Other = NamedTupleSchema("Other", "x y")
    with pytest.raises(MissingFieldError, match="Other"):
        upgrade(graph, [Samples, Other])
    assert graph[0] is good and type(graph[1]["bad"]) is Bad


def test_nested_schemas_upgrade_by_their_own_typename():
    """A nested schema is mapped by its own typename, at every depth."""
    OldObs = NamedArrayTupleSchema("Obs", "pos")
    OldTraj = NamedArrayTupleSchema("Traj", "obs reward")
    traj = OldTraj(OldObs(np.zeros((4, 2))), np.zeros(4))
    Obs = NamedArrayTupleSchema("Obs", "pos vel", defaults=(np.float64(0),))
    Traj = NamedArrayTupleSchema("Traj", "obs reward")
    new, rep = upgrade([traj], [Obs, Traj], report=True)
    assert type(new[0]) is Traj and type(new[0].obs) is Obs
    assert new[0].obs.vel.shape == (4,)     # the enclosing Traj tells the leading shape
    alone = upgrade(OldObs(np.zeros((4, 2))), [Obs])
    assert alone.vel.shape == (4, 2)        # alone, only pos's shape can tell
    assert {m.saved for m in rep.mappings} == {"Obs", "Traj"}


def test_shared_instance_is_rebuilt_once():
    """Two references to one instance become two references to one new instance."""
    old = old_samples()
    Samples = NamedArrayTupleSchema("Samples", "observation action reward")
    a, b = upgrade([old, old], [Samples])
    assert a is b and type(a) is Samples


def test_unchanged_structure_is_returned_as_is():
    """Instances already of the current schema, with nothing to change, stay the same objects."""
    Samples = NamedArrayTupleSchema("Samples", "observation action reward")
    buf = Samples(*old_samples())
    tup = (buf, 1)
    assert upgrade(tup, [Samples]) is tup


def test_schema_class_references_are_mapped():
    """A schema class stored in the structure becomes the current class."""
    old = old_samples()
    Samples = NamedArrayTupleSchema("Samples", "observation action reward")
    holder = types.SimpleNamespace(cls=type(old), buf=old)
    new, rep = upgrade(holder, [Samples], report=True)
    assert holder.cls is Samples and type(holder.buf) is Samples
    assert rep.mappings[0].classes == 1 and rep.mappings[0].instances == 1


def test_classic_namedtuple_instances_are_mapped():
    """A stdlib namedtuple instance maps to the current schema of the same name."""
    Classic = collections.namedtuple("Point", "x")
    Point = NamedTupleSchema("Point", "x y", defaults=(0,))
    new = upgrade([Classic(1)], [Point])[0]
    assert type(new) is Point and new == (1, 0)


def test_cycles():
    """A list containing itself is fine; an instance that reaches itself and changes is refused."""
    loop: list = []
    loop.append(loop)
    assert upgrade(loop, []) is loop
    Old = NamedTupleSchema("Node", "child")
    holder: list = []
    node = Old(holder)
    holder.append(node)
    Node = NamedTupleSchema("Node", "child")
    with pytest.raises(SchemaEvolutionError, match="refers back to itself"):
        upgrade(node, [Node])
    assert holder[0] is node


@pytest.mark.slow
def test_deep_structures_raise_a_clear_error():
    """Nesting deeper than the interpreter allows is a SchemaEvolutionError, not a crash."""
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(SchemaEvolutionError, match="nested too deeply"):
        upgrade(deep, [])


# --------------------------------------------------------------------------
# Choosing the current schemas
# --------------------------------------------------------------------------

def test_schemas_from_a_module_pick_themselves():
    """Every schema class among a module's attributes is a target, by typename."""
    mod = types.ModuleType("today")
    mod.Samples = NamedArrayTupleSchema("Samples", "observation action reward done",
                                        defaults=(np.bool_(False),))
    mod.SomethingElse = 3
    new = upgrade(old_samples(), mod)
    assert type(new) is mod.Samples


def test_explicit_mapping_renames_and_wins():
    """{'Samples': Transition} maps by the saved name; it beats a module's own match."""
    mod = types.ModuleType("today")
    mod.Samples = NamedArrayTupleSchema("Samples", "observation action reward")
    Transition = NamedArrayTupleSchema("Transition", "observation action reward")
    new = upgrade(old_samples(), [mod, {"Samples": Transition}])
    assert type(new) is Transition


def test_two_candidates_for_one_typename_is_an_error():
    """Ambiguity is reported with both definitions; a mapping settles it."""
    A = NamedArrayTupleSchema("Samples", "observation action reward")
    B2 = NamedArrayTupleSchema("Samples", "observation action reward x", defaults=(0,))
    with pytest.raises(SchemaEvolutionError, match="matches 2 current schemas"):
        upgrade(old_samples(), [A, B2])
    assert type(upgrade(old_samples(), [A, B2, {"Samples": B2}])) is B2


def test_unmatched_schemas_are_left_and_reported():
    """A saved schema without a current counterpart stays as saved, and the report says so."""
    old = old_samples()
    new, rep = upgrade({"x": old}, [], report=True)
    assert new["x"] is old and rep.unmatched == {"Samples": "x"} and rep.mappings == ()
    assert "no current schema" in str(rep)


def test_bad_arguments():
    """Unknown option values and schema specs are refused up front."""
    with pytest.raises(ValueError, match="extra must be one of"):
        upgrade(1, [], extra="drop")
    with pytest.raises(ValueError, match="casting must be one of"):
        upgrade(1, [], casting="yes")
    with pytest.raises(TypeError, match="must be a module"):
        upgrade(1, 42)
    with pytest.raises(TypeError, match="must be a schema class"):
        upgrade(1, {"Samples": 3})


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

def test_report_and_log(caplog):
    """The report lists each mapping; the same lines go to the namedschema.evolution logger."""
    Samples = NamedArrayTupleSchema("Samples", "observation reward timeout",
                                    defaults=(np.bool_(False),))
    with caplog.at_level(logging.INFO, logger="namedschema.evolution"):
        _new, rep = upgrade({"buf": old_samples()}, [Samples], extra="ignore", report=True)
    assert isinstance(rep, UpgradeReport)
    (m,) = rep.mappings
    assert (m.saved, m.schema, m.added, m.dropped, m.instances) == (
        "Samples", Samples, ("timeout",), ("action",), 1)
    assert m.changed and m.path == "buf"
    text = str(rep)
    assert "added timeout" in text and "dropped action" in text
    assert any("added timeout" in r.getMessage() for r in caplog.records)


def test_errors_pickle_with_their_attributes():
    """Evolution errors cross process boundaries with schema, field and path."""
    Samples = NamedArrayTupleSchema("Samples", "observation action reward",
                                    defaults=(np.float64(0),))
    with pytest.raises(FieldMismatchError) as info:
        upgrade(old_samples(), [Samples])
    back = pickle.loads(pickle.dumps(info.value))
    assert (back.schema, back.field, back.saved, back.expected, str(back)) == (
        "Samples", "reward", "float32", "float64", str(info.value))


def test_lazy_attribute():
    """namedschema.upgrade is the evolution module's function."""
    from namedschema.evolution import _upgrade as evolution
    assert namedschema.upgrade is evolution.upgrade


# --------------------------------------------------------------------------
# Class-syntax schemas: annotations declare dtypes
# --------------------------------------------------------------------------

def test_annotations_of_class_syntax_schemas_declare_dtypes():
    """npt.NDArray[np.float64] on today's schema refuses a float32 reward unless casting allows."""
    class Samples(NamedArrayTuple):
        observation: npt.NDArray[np.uint8]
        action: npt.NDArray[np.int64]
        reward: npt.NDArray[np.float64]
        timeout: npt.NDArray[np.bool_] = np.bool_(False)

        def steps(self):
            return self.reward.shape[0]

    assert field_dtype(Samples, "reward") == (np.dtype(np.float64), None)
    assert field_dtype(Samples, "timeout") == (np.dtype(np.bool_), ())
    old = old_samples()
    with pytest.raises(FieldMismatchError, match=r"Samples\.reward.*float32.*float64") as info:
        upgrade(old, [Samples])
    assert (info.value.saved, info.value.expected) == ("float32", "float64")
    new = upgrade(old, [Samples], casting="safe")
    assert type(new) is Samples and new.steps() == T and new.timeout.shape == (T, B)
    assert new.observation is old.observation and new.reward.dtype == np.float64


def test_annotation_without_shape_accepts_any_element_shape():
    """An annotation declares a dtype only: element shapes are not checked."""
    class Obs(NamedArrayTuple):
        pixels: npt.NDArray[np.uint8]

    Old = NamedArrayTupleSchema("Obs", "pixels")
    old = Old(np.zeros((4, 2, 7, 7), np.uint8))
    assert upgrade(old, [Obs]).pixels is old.pixels
    with pytest.raises(FieldMismatchError, match="declared as uint8, but the saved value"):
        upgrade(Old([1, 2]), [Obs])


def test_nothing_changes_when_a_default_fails_while_rebuilding():
    """A failing default callable (met while rebuilding) leaves every container as it was."""
    good = old_samples()
    OldObs = NamedArrayTupleSchema("Obs", "pos")
    graph = {"first": [good], "second": [OldObs(np.zeros(4))]}

    def boom(shape):
        raise MemoryError("too big")

    Samples = NamedArrayTupleSchema("Samples", "observation action reward timeout",
                                    defaults=(False,))
    Obs = NamedArrayTupleSchema("Obs", "pos vel", defaults=(boom,))
    with pytest.raises(SchemaEvolutionError, match="Obs.vel.*too big"):
        upgrade(graph, [Samples, Obs])
    assert graph["first"][0] is good and type(graph["second"][0]) is OldObs


# --------------------------------------------------------------------------
# Torch buffers
# --------------------------------------------------------------------------

def test_torch_buffer_gets_a_tensor_field_and_dtype_checks():
    """A torchified buffer keeps its tensors, gets a tensor for the new field; tensors are never cast."""
    torch = pytest.importorskip("torch")
    from namedschema.buffer import torchify_buffer

    old = torchify_buffer(old_samples())
    Samples = NamedArrayTupleSchema("Samples", "observation action reward timeout",
                                    defaults=(np.float32(0), np.bool_(False)))
    new = upgrade(old, [Samples])
    assert type(new) is Samples and new.reward is old.reward
    assert isinstance(new.timeout, torch.Tensor) and tuple(new.timeout.shape) == (T, B)
    assert new.timeout.dtype == torch.bool
    Wide = NamedArrayTupleSchema("Samples", "observation action reward",
                                 defaults=(np.float64(0),))
    with pytest.raises(FieldMismatchError, match="tensor of torch.float32.*not cast"):
        upgrade(old, [Wide], casting="unsafe")
    Shape = NamedArrayTupleSchema("Samples", "observation action reward",
                                  defaults=(np.zeros(5, np.float32),))
    with pytest.raises(FieldMismatchError, match="element shape"):
        upgrade(old, [Shape])
