"""Replay buffers never store, restore or sample something silently wrong (issue 34, items 3-7).

* ``extend`` refuses values the stored dtype cannot hold, as ``add`` does (item 3);
* batches are matched to the stored fields by name, never by position (item 4);
* a saved state is matched by name too, through schema evolution where the fields
  differ (item 5);
* priorities that would break the sum tree are refused on update (item 6);
* a saved tree that does not hold together is refused on load (item 7);
* a refused call or state changes nothing.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import namedschema
from namedschema.errors import (
    ExtraFieldError,
    FieldError,
    FieldValueError,
    ReplayStateError,
    StructureMismatchError,
)
from namedschema.training import sum_tree as _sum_tree
from namedschema.training.replay import PrioritizedReplayBuffer, ReplayBuffer

Step = namedschema.NamedArrayTupleSchema("HardenStep", "obs action reward done")
# The same typename with two fields swapped: what reordering the class in code gives.
Swapped = namedschema.NamedArrayTupleSchema("HardenStep", "obs action done reward")
Other = namedschema.NamedArrayTupleSchema("HardenOther", "obs action done reward")


def example(schema=Step):
    values = dict(obs=np.zeros(2, np.uint8), action=np.int16(0), reward=np.float32(0),
                  done=np.float32(0))
    return schema(**{f: values[f] for f in schema._fields})


def rows(schema=Step, n=3, action=None, reward=None, done=None):
    values = dict(obs=np.full((n, 2), 7, np.uint8),
                  action=np.arange(n, dtype=np.int16) if action is None else action,
                  reward=np.full(n, 5.0, np.float32) if reward is None else reward,
                  done=np.ones(n, np.float32) if done is None else done)
    return schema(**{f: values[f] for f in schema._fields})


def snapshot(rb):
    state = rb.state_dict()
    out = [np.asarray(a).copy() for a in state["storage"]]
    out += [np.asarray(state[k]).copy() for k in ("cursor", "size", "rng")]
    if "sum_tree" in state:
        out += [state["sum_tree"].copy(), state["min_tree"].copy(),
                np.asarray(state["max_priority"])]
    return out


def assert_unchanged(before, rb):
    for a, b in zip(before, snapshot(rb), strict=True):
        np.testing.assert_array_equal(a, b)


# -- item 3: values that do not fit -------------------------------------------------------

@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_extend_refuses_values_the_stored_dtype_cannot_hold(cls):
    rb = cls(example(), 8, seed=0)
    rb.extend(rows(n=2))
    before = snapshot(rb)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no overflow warning either: nothing is cast
        with pytest.raises(FieldValueError, match=r"HardenStep\.action\[1\].*70000 becomes "
                                                  r"4464: an int16 field cannot hold it"):
            rb.extend(rows(action=np.array([1, 70000, 2])))
        with pytest.raises(FieldValueError, match=r"HardenStep\.reward\[2\].*1e\+300 becomes "
                                                  r"inf: a float32 field cannot hold it"):
            rb.extend(rows(reward=np.array([0.5, 1.0, 1e300])))
    assert_unchanged(before, rb)
    # add refuses the same values
    with pytest.raises(FieldValueError, match="int16 field cannot hold it"):
        rb.add(Step(np.zeros(2, np.uint8), np.int64(70000), np.float32(0), np.float32(0)))
    with pytest.raises(FieldValueError, match="float32 field cannot hold it"):
        rb.add(Step(np.zeros(2, np.uint8), np.int16(0), np.float64(1e300), np.float32(0)))
    assert_unchanged(before, rb)
    # values that fit still go in, cast (rounding to float32 is not a change)
    rb.extend(rows(action=np.array([1, -32768, 32767]), reward=np.array([0.1, -1e30, np.nan])))
    assert rb.storage.action[2:5].tolist() == [1, -32768, 32767]
    assert rb.storage.reward[2] == np.float32(0.1) and np.isnan(rb.storage.reward[4])


def test_the_check_of_a_wide_field_is_chunked_and_finds_the_first_bad_value():
    Wide = namedschema.NamedArrayTupleSchema("HardenWide", "x")
    rb = ReplayBuffer(Wide(np.zeros(300, np.float16)), 4000, seed=0)
    x = np.ones((4000, 300))
    x[3999, 17] = 1e6            # over float16's 65504: becomes inf
    with pytest.raises(FieldValueError, match=r"HardenWide\.x\[\(3999, 17\)\].*1000000\.0 "
                                              r"becomes inf"):
        rb.extend(Wide(x))
    assert len(rb) == 0


_INT_DTYPES = [np.int8, np.int16, np.int32, np.uint8, np.uint16]
_FLOAT_DTYPES = [np.float16, np.float32]


@given(dtype=st.sampled_from(_INT_DTYPES + _FLOAT_DTYPES),
       values=st.lists(st.one_of(st.integers(-2**40, 2**40),
                                 st.floats(allow_nan=True, allow_infinity=True)),
                       min_size=1, max_size=6))
def test_extend_refuses_exactly_what_add_refuses(dtype, values):
    dtype = np.dtype(dtype)
    One = namedschema.NamedArrayTupleSchema("HardenOne", "v")
    floats = any(isinstance(v, float) for v in values)
    if dtype.kind in "iu" and floats:
        values = [int(min(max(v, -2.0**40), 2.0**40)) if isinstance(v, float) and
                  np.isfinite(v) else v if isinstance(v, int) else 0 for v in values]
        floats = False
    src = np.array(values, np.float64 if floats else np.int64)
    if not np.can_cast(src.dtype, dtype, "same_kind"):
        return
    by_add = ReplayBuffer(One(np.zeros((), dtype)), len(values), seed=0)
    refused_by_add = []
    for v in src:
        try:
            by_add.add(One(v))
            refused_by_add.append(False)
        except FieldValueError:
            by_add.add(One(np.zeros((), dtype)))
            refused_by_add.append(True)
    by_extend = ReplayBuffer(One(np.zeros((), dtype)), len(values), seed=0)
    if any(refused_by_add):
        with pytest.raises(FieldValueError, match=rf"HardenOne\.v\[{refused_by_add.index(True)}\]"):
            by_extend.extend(One(src))
        assert len(by_extend) == 0
    else:
        by_extend.extend(One(src))
        np.testing.assert_array_equal(by_extend.storage.v, by_add.storage.v)


# -- item 4: batches of another schema ----------------------------------------------------

@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_extend_matches_fields_by_name_not_by_position(cls):
    rb = cls(example(), 8, seed=0)
    rb.extend(rows(Other, reward=np.full(3, 5.0, np.float32), done=np.ones(3, np.float32)))
    assert rb.storage.reward[:3].tolist() == [5.0] * 3
    assert rb.storage.done[:3].tolist() == [1.0] * 3
    from collections import namedtuple
    Record = namedtuple("Record", "done reward action obs")
    rb.add(Record(1.0, 9.0, 3, np.ones(2, np.uint8)))
    assert (rb.storage.reward[3], rb.storage.done[3], rb.storage.action[3]) == (9.0, 1.0, 3)


def test_extend_refuses_a_batch_with_other_fields():
    rb = ReplayBuffer(example(), 8, seed=0)
    Renamed = namedschema.NamedArrayTupleSchema("HardenRenamed", "obs action rew done")
    batch = Renamed(np.zeros((2, 2), np.uint8), np.zeros(2, np.int16), np.zeros(2, np.float32),
                    np.zeros(2, np.float32))
    with pytest.raises(StructureMismatchError, match=r"lacks reward; has rew that the buffer "
                                                     r"lacks \(fields are matched by name"):
        rb.extend(batch)
    Fewer = namedschema.NamedArrayTupleSchema("HardenFewer", "obs action reward")
    with pytest.raises(StructureMismatchError, match="lacks done"):
        rb.extend(Fewer(np.zeros((2, 2), np.uint8), np.zeros(2, np.int16),
                        np.zeros(2, np.float32)))
    with pytest.raises(FieldError, match="different schema"):
        rb.add(Fewer(np.zeros(2, np.uint8), 0, 0.0))
    assert len(rb) == 0


@given(order=st.permutations(Step._fields), n=st.integers(1, 12))
def test_any_field_order_stores_the_same_rows(order, n):
    Shuffled = namedschema.NamedArrayTupleSchema("HardenShuffled", " ".join(order))
    rng = np.random.default_rng(n)
    batch = Step(rng.integers(0, 255, (n, 2)).astype(np.uint8),
                 rng.integers(-100, 100, n).astype(np.int16),
                 rng.random(n).astype(np.float32), rng.random(n).astype(np.float32))
    plain = ReplayBuffer(example(), 8, seed=0)
    plain.extend(batch)
    shuffled = ReplayBuffer(example(), 8, seed=0)
    shuffled.extend(Shuffled(**{f: getattr(batch, f) for f in order}))
    for a, b in zip(plain.storage, shuffled.storage, strict=True):
        np.testing.assert_array_equal(a, b)


# -- item 5: restore after the fields were reordered --------------------------------------

@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_restore_after_fields_were_reordered_matches_by_name(cls, tmp_path):
    rb = cls(example(), 8, seed=0)
    rb.extend(rows(reward=np.full(3, 5.0, np.float32), done=np.ones(3, np.float32)))
    namedschema.save(rb.state_dict(), tmp_path / "rb.nsc")
    state = namedschema.load(tmp_path / "rb.nsc")
    again = cls(example(Swapped), 8, seed=1)   # the class as the code now defines it
    again.load_state_dict(state)
    assert again.storage.reward[:3].tolist() == [5.0] * 3
    assert again.storage.done[:3].tolist() == [1.0] * 3
    sample = again.sample(2)
    assert type(sample[0] if cls is PrioritizedReplayBuffer else sample) is Swapped
    # through load(schemas=): from_state_dict then builds today's class
    upgraded = cls.from_state_dict(namedschema.load(tmp_path / "rb.nsc", schemas=[Swapped]))
    assert type(upgraded.storage) is Swapped and upgraded.storage.reward[0] == 5.0


def test_restore_follows_the_evolution_rules_where_fields_differ(tmp_path):
    rb = ReplayBuffer(example(), 8, seed=0)
    rb.extend(rows())
    namedschema.save(rb.state_dict(), tmp_path / "rb.nsc")
    state = namedschema.load(tmp_path / "rb.nsc")
    Added = namedschema.NamedArrayTupleSchema("HardenStep", "obs action reward done timeout",
                                              defaults=(np.bool_(False),))
    grown = ReplayBuffer(Added(np.zeros(2, np.uint8), np.int16(0), np.float32(0),
                               np.float32(0), np.bool_(True)), 8, seed=0)
    grown.storage.timeout[:] = True
    grown.load_state_dict(state)
    assert grown.storage.reward[:3].tolist() == [5.0] * 3
    assert not grown.storage.timeout.any()      # the new field from its default
    Removed = namedschema.NamedArrayTupleSchema("HardenStep", "obs action reward")
    shrunk = ReplayBuffer(Removed(np.zeros(2, np.uint8), np.int16(0), np.float32(0)), 8)
    before = snapshot(shrunk)
    with pytest.raises(ReplayStateError, match="does not map onto this buffer's fields") as info:
        shrunk.load_state_dict(state)
    assert isinstance(info.value.__cause__, ExtraFieldError)
    assert_unchanged(before, shrunk)
    Renamed = namedschema.NamedArrayTupleSchema("HardenRenamedStep", "obs action reward done")
    other = ReplayBuffer(example(Renamed), 8)
    with pytest.raises(ReplayStateError, match=r"saved storage is a HardenStep \(.*\), this "
                                               r"buffer stores HardenRenamedStep"):
        other.load_state_dict(state)
    renamed = namedschema.load(tmp_path / "rb.nsc", schemas={"HardenStep": Renamed})
    other.load_state_dict(renamed)                  # a rename, mapped explicitly
    assert other.storage.reward[:3].tolist() == [5.0] * 3


def test_a_state_that_does_not_fit_changes_nothing():
    rb = PrioritizedReplayBuffer(example(), 8, seed=0)
    rb.extend(rows(n=5))
    good = rb.state_dict()
    fresh = PrioritizedReplayBuffer(example(), 8, seed=3)
    fresh.extend(rows(n=2))
    before = snapshot(fresh)
    bad_states = [
        dict(good, cursor=2),                        # not full: the cursor must be the size
        dict(good, rng=np.zeros(5, np.uint64)),
        dict(good, size="5"),
        dict(good, storage=rows(n=8)._replace(reward=np.zeros(8, np.float64))),
        dict(good, alpha=float("inf")),
        {k: v for k, v in good.items() if k != "min_tree"},
    ]
    for state in bad_states:
        with pytest.raises(ReplayStateError):
            fresh.load_state_dict(state)
        assert_unchanged(before, fresh)


# -- item 6: priorities that would break the sum tree -------------------------------------

@pytest.mark.parametrize(("alpha", "priority"), [(2.0, 1e200), (2.0, 1e-300), (0.6, 1e-320),
                                                 (1.0, 1e308)])
def test_priorities_that_would_break_the_tree_are_refused(alpha, priority, tmp_path):
    rb = PrioritizedReplayBuffer(example(), 8, alpha=alpha, seed=0)
    rb.extend(rows(n=4))
    before = snapshot(rb)
    with pytest.raises(ValueError, match="outside .* what the sum tree holds"):
        rb.update_priorities(np.array([0, 1]), np.array([1.0, priority]))
    assert_unchanged(before, rb)
    _, _, weights = rb.sample(8)
    assert np.all(np.isfinite(weights)) and np.all(weights > 0)


@given(alpha=st.floats(0.0, 3.0),
       updates=st.lists(st.tuples(st.integers(0, 7), st.floats(-400, 300)), min_size=1,
                        max_size=20))
def test_a_buffer_never_accepts_priorities_it_would_refuse_to_load(alpha, updates):
    rb = PrioritizedReplayBuffer(example(), 8, alpha=alpha, seed=0)
    rb.extend(rows(n=8))
    for index, exponent in updates:
        try:
            rb.update_priorities(np.array([index]), np.array([10.0 ** exponent]))
        except ValueError:
            pass
        _, _, weights = rb.sample(16)
        # float64 probabilities never underflow; float32 weights may round to 0 only for
        # steps over 2**149 ** (1 / beta) times likelier than the least likely one
        state = rb.state_dict()
        total, least = state["sum_tree"][1], state["min_tree"][1]
        assert np.isfinite(total) and least / total > 0
        assert np.all(np.isfinite(weights)) and np.all((weights >= 0) & (weights <= 1))
    rb.extend(rows(n=8))   # new steps at the largest priority: the tree still holds
    PrioritizedReplayBuffer(example(), 8, alpha=alpha).load_state_dict(rb.state_dict())


# -- item 7: trees that do not hold together ----------------------------------------------

def _damaged(state, label, node, value):
    tree = state[label].copy()
    tree[node] = value
    return dict(state, **{label: tree})


def test_a_tree_that_does_not_hold_together_is_refused(tmp_path):
    rb = PrioritizedReplayBuffer(example(), 8, seed=0)
    rb.extend(rows(n=3))
    rb.update_priorities(np.array([0, 1, 2]), np.array([1.0, 2.0, 3.0]))
    namedschema.save(rb.state_dict(), tmp_path / "rb.nsc")
    state = namedschema.load(tmp_path / "rb.nsc")
    first = state["sum_tree"].shape[0] // 2
    leaves = _sum_tree.leaves(state["sum_tree"], 8).copy()
    cases = {
        "beyond": _damaged(state, "sum_tree", first + 5, 1.0),         # a step not stored
        "root": _damaged(state, "sum_tree", 1, float(state["sum_tree"][1]) * 2),
        "parent": _damaged(state, "min_tree", first // 2, 0.5),
        "disagree": _damaged(state, "min_tree", first + 1, 0.25),
        "huge": _damaged(state, "sum_tree", first, 1e300),
    }
    # a consistent tree over leaves beyond size: rebuilt, still refused
    bad_leaves = leaves.copy()
    bad_leaves[6] = 50.0
    tree = _sum_tree.new_sum_tree(8)
    _sum_tree.update_sum(tree, np.arange(8), bad_leaves)
    cases["consistent-beyond"] = dict(state, sum_tree=tree)
    fresh = PrioritizedReplayBuffer(example(), 8, seed=5)
    before = snapshot(fresh)
    for name, damaged in cases.items():
        with pytest.raises(ReplayStateError, match="trees do not hold together"):
            fresh.load_state_dict(damaged)
        with pytest.raises(ReplayStateError, match="trees do not hold together"):
            PrioritizedReplayBuffer.from_state_dict(damaged)
        assert_unchanged(before, fresh), name
    fresh.load_state_dict(state)     # the undamaged state loads
    assert set(fresh.sample(64)[1].tolist()) <= {0, 1, 2}


def test_tree_problem_accepts_every_tree_the_updates_make():
    rng = np.random.default_rng(0)
    for capacity in (1, 2, 5, 8, 33):
        s, m = _sum_tree.new_sum_tree(capacity), _sum_tree.new_min_tree(capacity)
        assert _sum_tree.tree_problem(s, m, capacity, 0) is None
        for size in range(1, capacity + 1):
            index = rng.integers(0, size, 3)
            values = 10.0 ** rng.uniform(-100, 100, 3)
            _sum_tree.update_sum(s, np.append(index, size - 1), np.append(values, 1.0))
            _sum_tree.update_min(m, np.append(index, size - 1), np.append(values, 1.0))
            assert _sum_tree.tree_problem(s, m, capacity, size) is None
