"""ReplayBuffer / PrioritizedReplayBuffer: writes, wrap, sampling, priorities, state, errors."""

from __future__ import annotations

import random

import numpy as np
import pytest

import namedschema
from namedschema.errors import BufferShapeError, StructureMismatchError
from namedschema.training import sum_tree as _sum_tree
from namedschema.training.replay import PrioritizedReplayBuffer, ReplayBuffer

Step = namedschema.NamedArrayTupleSchema("ReplayTestStep", "obs action reward")


def step(i: int) -> Step:
    return Step(np.full(3, i, np.int32), i, float(i))


def batch(start: int, n: int) -> Step:
    ids = np.arange(start, start + n)
    return Step(np.repeat(ids[:, None], 3, 1).astype(np.int32), ids, ids.astype(float))


def test_extend_wraps_like_a_ring():
    rb = ReplayBuffer(step(0), 5, seed=0)
    rb.extend(batch(0, 3))
    assert len(rb) == 3 and rb.cursor == 3
    rb.extend(batch(3, 4))  # 3, 4 at the end, 5, 6 at the start
    assert len(rb) == 5 and rb.cursor == 2
    assert rb.storage.action.tolist() == [5, 6, 2, 3, 4]
    assert rb.storage.obs[:, 0].tolist() == [5, 6, 2, 3, 4]


def test_extend_longer_than_capacity_keeps_the_last_steps_in_ring_order():
    rb = ReplayBuffer(step(0), 4, seed=0)
    rb.extend(batch(0, 1))
    rb.extend(batch(1, 10))   # steps 1..10 at positions 1,2,3,0,1,...: last four are 7..10
    sequential = ReplayBuffer(step(0), 4, seed=0)
    for i in range(11):
        sequential.add(step(i))
    assert rb.storage.action.tolist() == sequential.storage.action.tolist() == [8, 9, 10, 7]
    assert rb.cursor == sequential.cursor == 3 and len(rb) == 4


def test_add_equals_extend():
    a, b = ReplayBuffer(step(0), 7, seed=3), ReplayBuffer(step(0), 7, seed=3)
    for i in range(12):
        a.add(step(i))
    b.extend(batch(0, 5))
    b.extend(batch(5, 7))
    for x, y in zip(a.storage, b.storage, strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.sample(20).action, b.sample(20).action)


def test_uniform_sample_only_stored_and_seeded():
    rb = ReplayBuffer(step(0), 100, seed=7)
    rb.extend(batch(0, 10))
    s = rb.sample(1000)
    assert type(s) is Step and s.obs.shape == (1000, 3)
    assert set(s.action.tolist()) == set(range(10))
    again = ReplayBuffer(step(0), 100, seed=7)
    again.extend(batch(0, 10))
    np.testing.assert_array_equal(again.sample(1000).action, s.action)


def test_buffers_never_draw_from_global_generators():
    np.random.seed(1)
    random.seed(1)
    before = (np.random.get_state()[1].copy(), random.getstate())
    rb = PrioritizedReplayBuffer(step(0), 16, seed=None)
    rb.extend(batch(0, 20))
    _, idx, _ = rb.sample(8)
    rb.update_priorities(idx, np.ones(8))
    ReplayBuffer(step(0), 4).extend(batch(0, 3))
    np.testing.assert_array_equal(np.random.get_state()[1], before[0])
    assert random.getstate() == before[1]


def test_prioritized_draws_by_priority():
    rb = PrioritizedReplayBuffer(step(0), 8, alpha=1.0, beta=1.0, seed=0)
    rb.extend(batch(0, 4))
    rb.update_priorities(np.arange(4), np.array([1.0, 1.0, 1.0, 97.0]))
    _, idx, w = rb.sample(10_000)
    share = np.mean(idx == 3)
    assert 0.95 < share < 0.99
    # weights: (N P(i))^-beta / max; the least likely steps have weight 1
    np.testing.assert_allclose(w[idx == 0], 1.0)
    np.testing.assert_allclose(w[idx == 3], 1 / 97, rtol=1e-6)


def test_prioritized_new_steps_get_the_largest_priority():
    rb = PrioritizedReplayBuffer(step(0), 8, alpha=1.0, seed=0)
    rb.extend(batch(0, 2))
    rb.update_priorities(np.array([0]), np.array([5.0]))
    rb.add(step(2))
    leaves = _sum_tree.leaves(rb.state_dict()["sum_tree"], 8)
    assert leaves[:3].tolist() == [5.0, 1.0, 5.0]


def test_prioritized_never_samples_unwritten_or_zero_leaves():
    rb = PrioritizedReplayBuffer(step(0), 1000, seed=0)
    rb.extend(batch(0, 3))
    for _ in range(200):
        _, idx, _ = rb.sample(64)
        assert idx.min() >= 0 and idx.max() < 3


def test_sum_tree_matches_a_cumulative_sum():
    rng = np.random.default_rng(0)
    for cap in (1, 2, 3, 5, 8, 100, 1000):
        tree, low = _sum_tree.new_sum_tree(cap), _sum_tree.new_min_tree(cap)
        values = np.zeros(cap)
        for _ in range(10):
            idx = rng.integers(0, cap, rng.integers(1, cap + 1))
            v = rng.random(idx.size) + 0.01
            _sum_tree.update_sum(tree, idx, v)
            _sum_tree.update_min(low, idx, v)
            values[idx] = v
        assert np.isclose(tree[1], values.sum()) and low[1] == values[values > 0].min()
        targets = rng.random(500) * tree[1]
        expected = np.searchsorted(np.cumsum(values), targets, side="right")
        np.testing.assert_array_equal(_sum_tree.find_prefix_sums(tree, targets), expected)


def test_sum_tree_is_a_function_of_its_leaves():
    a, b = _sum_tree.new_sum_tree(37), _sum_tree.new_sum_tree(37)
    v = np.random.default_rng(1).random(37)
    _sum_tree.update_sum(a, np.arange(37), v)
    for i in np.random.default_rng(2).permutation(37):
        _sum_tree.update_sum(b, np.array([i]), v[i:i + 1])
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_state_dict_round_trip_continues_identically(cls, tmp_path):
    rb = cls(step(0), 6, seed=11)
    rb.extend(batch(0, 9))
    if cls is PrioritizedReplayBuffer:
        _, idx, _ = rb.sample(4)
        rb.update_priorities(idx, np.arange(1.0, 5.0))
    namedschema.save(rb.state_dict(), tmp_path / "rb.nsb")   # plain data: no pickle
    other = cls(step(0), 6, seed=999)
    other.load_state_dict(namedschema.load(tmp_path / "rb.nsb"))
    for buf in (rb, other):
        buf.extend(batch(100, 2))
    a, b = rb.sample(10), other.sample(10)
    if cls is PrioritizedReplayBuffer:
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[2], b[2])
        a, b = a[0], b[0]
    np.testing.assert_array_equal(a.obs, b.obs)
    assert len(other) == len(rb) and other.cursor == rb.cursor


def test_errors_name_the_buffer_and_what_is_wrong():
    rb = PrioritizedReplayBuffer(step(0), 4, seed=0)
    with pytest.raises(ValueError, match=r"PrioritizedReplayBuffer\(ReplayTestStep\).*empty"):
        rb.sample(2)
    with pytest.raises(StructureMismatchError, match="schema instance"):
        rb.extend(np.zeros(3))
    with pytest.raises(BufferShapeError, match="leading dimensions"):
        rb.extend(Step(np.zeros((2, 3), np.int32), np.zeros(3, int), np.zeros(2)))
    with pytest.raises(BufferShapeError, match=r"expected \(n, \*\(3,\)\)"):
        rb.extend(Step(np.zeros((2, 4), np.int32), np.zeros(2, int), np.zeros(2)))
    with pytest.raises(StructureMismatchError, match="castable to int64, got float64"):
        rb.extend(Step(np.zeros((2, 3), np.int32), np.full(2, 1.5), np.zeros(2)))
    assert len(rb) == 0   # nothing written by refused batches
    rb.extend(batch(0, 2))
    with pytest.raises(IndexError, match=r"\[0, 2\)"):
        rb.update_priorities(np.array([2]), np.array([1.0]))
    with pytest.raises(ValueError, match="finite and > 0"):
        rb.update_priorities(np.array([0]), np.array([np.nan]))
    with pytest.raises(ValueError, match="at least 1"):
        ReplayBuffer(step(0), 0)
    with pytest.raises(StructureMismatchError, match="one step"):
        ReplayBuffer(np.zeros(3), 4)
    other = ReplayBuffer(step(0), 5)
    with pytest.raises(BufferShapeError, match="another example or capacity"):
        other.load_state_dict(ReplayBuffer(step(0), 4).state_dict())


def test_sum_tree_target_at_the_very_end_lands_on_a_positive_leaf():
    # Rounding can make a target equal the total; it must not fall off into empty leaves.
    tree = _sum_tree.new_sum_tree(8)
    _sum_tree.update_sum(tree, np.arange(3), np.ones(3))
    assert _sum_tree.find_prefix_sums(tree, np.array([3.0, 2.9999999])).tolist() == [2, 2]


@pytest.mark.parametrize("mmap_mode", [None, "r", "c"])
def test_from_state_dict_adopts_loaded_memory_and_copies_file_maps(tmp_path, mmap_mode):
    rb = PrioritizedReplayBuffer(step(0), 6, seed=2)
    rb.extend(batch(0, 9))
    namedschema.save(rb.state_dict(), tmp_path / "rb.nsb")
    state = namedschema.load(tmp_path / "rb.nsb", mmap_mode=mmap_mode)
    again = PrioritizedReplayBuffer.from_state_dict(state)
    # loaded into memory: the buffer's own, no copy; a file map: copied (never written)
    assert (again.storage.obs is state["storage"].obs) == (mmap_mode is None)
    again.extend(batch(50, 3))
    rb.extend(batch(50, 3))
    np.testing.assert_array_equal(again.sample(20)[1], rb.sample(20)[1])
    np.testing.assert_array_equal(again.storage.obs, rb.storage.obs)


def test_pickled_buffer_continues_identically(tmp_path):
    # pickle (Ray, multiprocessing) and save(..., allow_pickle=True) keep the whole state
    import pickle
    rb = PrioritizedReplayBuffer(step(0), 6, seed=4)
    rb.extend(batch(0, 9))
    copies = [pickle.loads(pickle.dumps(rb))]
    namedschema.save(rb, tmp_path / "rb.nsb", allow_pickle=True)
    copies.append(namedschema.load(tmp_path / "rb.nsb", allow_pickle=True))
    expected = rb.sample(10)[1]
    for other in copies:
        np.testing.assert_array_equal(other.sample(10)[1], expected)
        other.extend(batch(20, 1))   # writes reach the storage it samples from
        assert other.storage.action[other.cursor - 1] == 20


def test_a_loaded_state_that_does_not_hold_together_is_refused(tmp_path):
    rb = ReplayBuffer(Step(np.zeros(2, np.float32), 0, 0.0), 10, seed=0)
    rb.extend(Step(np.ones((5, 2), np.float32), np.arange(5), np.zeros(5)))
    state = rb.state_dict()
    storage = state["storage"]
    ragged = dict(state, storage=Step(storage.obs, storage.action[:3], storage.reward))
    namedschema.save(ragged, tmp_path / "ragged.nsc")
    with pytest.raises(BufferShapeError, match=r"same number of steps.*\(10, 2\), \(3,\)"):
        ReplayBuffer.from_state_dict(namedschema.load(tmp_path / "ragged.nsc"))
    per = PrioritizedReplayBuffer(Step(np.zeros(2, np.float32), 0, 0.0), 10, seed=0)
    per.extend(Step(np.ones((5, 2), np.float32), np.arange(5), np.zeros(5)))
    fresh = PrioritizedReplayBuffer(Step(np.zeros(2, np.float32), 0, 0.0), 10, seed=0)
    for bad in (float("nan"), 0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="max_priority must be finite and > 0"):
            fresh.load_state_dict(dict(per.state_dict(), max_priority=bad))
    tree = per.state_dict()["sum_tree"].copy()
    tree[tree.shape[0] // 2 + 1] = np.nan
    with pytest.raises(ValueError, match=r"trees do not hold together: sum_tree: the priority of step 1 .* is nan"):
        fresh.load_state_dict(dict(per.state_dict(), sum_tree=tree))
    assert len(fresh) == 0                      # nothing was taken


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_from_state_dict_never_shares_memory_with_a_live_buffer(cls, tmp_path):
    rb = cls(step(0), 8, seed=0)
    rb.extend(batch(0, 3))
    twin = cls.from_state_dict(rb.state_dict())        # a copy of a live buffer
    twin.extend(batch(100, 2))
    assert len(rb) == 3 and rb.storage.action[3] == 0 and twin.storage.action[3] == 100
    for mine, theirs in zip(rb.state_dict().values(), twin.state_dict().values(), strict=True):
        if isinstance(mine, np.ndarray):
            assert not np.shares_memory(mine, theirs)
    namedschema.save(rb.state_dict(), tmp_path / "rb.nsc")
    loaded = namedschema.load(tmp_path / "rb.nsc")
    first, second = cls.from_state_dict(loaded), cls.from_state_dict(loaded)   # given twice
    first.extend(batch(200, 1))
    assert second.storage.action[3] == 0
    assert np.shares_memory(first.storage.obs, loaded["storage"].obs)   # adopted once


class TypedStep(namedschema.NamedArrayTuple):
    obs: np.ndarray
    action: np.ndarray


class StepRecord(namedschema.NamedTuple):
    obs: np.ndarray
    action: int


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_sample_is_of_the_example_class_as_the_generic_type_says(cls):
    """ReplayBuffer(example) is a ReplayBuffer[type(example)] for array tuples: storage and
    samples are of that very class; a record's buffer (ReplayBuffer[Any]) is an array tuple."""
    rb = cls(TypedStep(np.zeros(2, np.float32), np.int64(0)), 8, seed=0)
    rb.add(StepRecord(np.ones(2, np.float32), 3))       # a record of the same fields
    rb.extend(TypedStep(np.ones((3, 2), np.float32), np.arange(3)))
    drawn = rb.sample(5)
    sampled = drawn[0] if cls is PrioritizedReplayBuffer else drawn
    assert type(rb.storage) is TypedStep and type(sampled) is TypedStep
    if cls is PrioritizedReplayBuffer:
        assert drawn[1].dtype == np.int64 and drawn[2].dtype == np.float32
    record = cls(StepRecord(np.zeros(2, np.float32), 0), 8, seed=0)
    record.add(StepRecord(np.ones(2, np.float32), 3))
    drawn = record.sample(2)
    sampled = drawn[0] if cls is PrioritizedReplayBuffer else drawn
    assert isinstance(sampled, namedschema.NamedArrayTuple)
    assert not isinstance(sampled, StepRecord)


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_subscripted_buffer_is_the_plain_buffer(cls):
    """``cls[Step](...)`` (the generic type spelled at run time) makes exactly what
    ``cls(...)`` makes: no ``__orig_class__`` in its state, pickles or copies."""
    import copy
    import pickle
    typed, plain = cls[Step](step(0), 6, seed=1), cls(step(0), 6, seed=1)
    for rb in (typed, plain):
        rb.extend(batch(0, 9))
    assert type(typed) is cls and vars(typed).keys() == vars(plain).keys()
    assert "__orig_class__" not in vars(typed)
    assert getattr(typed, "__orig_class__", None) is None
    assert pickle.dumps(typed) == pickle.dumps(plain)
    again = cls[Step].from_state_dict(copy.deepcopy(typed).state_dict())
    assert type(again) is cls and "__orig_class__" not in vars(again)
    a, b = again.sample(4), plain.sample(4)
    if cls is PrioritizedReplayBuffer:
        a, b = a[0], b[0]
    np.testing.assert_array_equal(a.action, b.action)
