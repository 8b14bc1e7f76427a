"""Frames-once replay (``frames_once=(obs, next_obs)``): each frame stored once, samples exact.

A frames-once buffer stores no next-observation array: a row's next observation is
the observation of the row ``n_envs`` later when that holds the very bytes given,
and otherwise (episode ends, the newest rows, rows written out of layout) a pooled
frame. Every sample must equal, bit for bit, the plain buffer's from the same seed,
for any sequence of adds and extends, episode ends (true final observations given
or not), ``n_envs`` and capacity wrap; its state holds no next-observation array,
resumes exactly (in a fresh interpreter too) and is refused by a plain buffer (and
the other way round); for image observations it takes about half the bytes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import namedschema
from namedschema.errors import (
    BufferShapeError,
    FieldValueError,
    ReplayStateError,
    StructureMismatchError,
)
from namedschema.training.replay import PrioritizedReplayBuffer, ReplayBuffer
from tests.helpers import examples, run_fresh

Step = namedschema.NamedArrayTupleSchema("FramesOnceStep", "obs action next_obs done")
ONCE = ("obs", "next_obs")


def example(shape=(2,), dtype=np.float32):
    frame = np.zeros(shape, dtype)
    return Step(frame, np.int64(0), frame, np.float32(0))


class Envs:
    """``n`` toy envs: obs ``[t, 0]``; an episode ends at random, and the next
    observation given is then the true final one or the reset one (CleanRL at a
    termination); at any step a third of the next observations given have ``-0.0``
    for the following observation's ``0.0`` (equal as floats, not as bytes)."""

    def __init__(self, n: int, seed: int):
        self.n, self.rng = n, np.random.default_rng(seed)
        self.obs = np.stack([np.arange(n) * 1000.0, np.zeros(n)], 1).astype(np.float32)
        self.t = 0

    def step(self, end_rate: float) -> Step:
        t, n = self.t, self.n
        self.t += 1
        final = self.obs + np.float32(1.0) * np.array([1, 0], np.float32)
        ends = self.rng.random(n) < end_rate
        reset = np.stack([self.rng.integers(10 ** 5, 10 ** 6, n), np.zeros(n)], 1).astype(
            np.float32)
        following = np.where(ends[:, None], reset, final)
        how = self.rng.integers(0, 3, n)
        signed = following.copy()
        signed[:, 1] = -0.0
        given_next = np.where((ends & (how == 0))[:, None], final,
                              np.where((how == 1)[:, None], signed, following))
        step = Step(self.obs.copy(), np.arange(t * n, t * n + n), given_next.astype(np.float32),
                    ends.astype(np.float32))
        self.obs = following.astype(np.float32)
        return step


def odd_rows(m: int, seed: int) -> Step:
    """``m`` rows that follow no layout (their next observations are arbitrary)."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(-3, 3, (2, m, 2)).astype(np.float32)
    return Step(frames[0], -np.arange(1, m + 1), frames[1], np.zeros(m, np.float32))


ops = st.one_of(
    st.tuples(st.just("steps"), st.integers(1, 6), st.sampled_from(["extend", "add"]),
              st.sampled_from([0.0, 0.3, 1.0])),
    st.tuples(st.just("odd"), st.integers(1, 5), st.sampled_from(["extend", "add"]),
              st.just(0.0)),
    st.tuples(st.just("sample"), st.integers(1, 9), st.just(""), st.just(0.0)),
    st.tuples(st.just("update"), st.integers(0, 10 ** 6), st.just(""), st.floats(0.01, 9)),
    st.tuples(st.just("save"), st.booleans(), st.just(""), st.just(0.0)))


def write(rb, batch: Step, how: str) -> None:
    if how == "extend":
        rb.extend(batch)
    else:
        for i in range(len(batch.action)):
            rb.add(batch[i])


def sampled(out) -> list[bytes]:
    batch, *rest = out if isinstance(out, tuple) else (out,)
    return [np.asarray(x).tobytes() + np.asarray(x).dtype.str.encode()
            for x in (*batch, *rest)]


def run(rb, sequence, n_envs, tmp_path=None):
    """Apply ``sequence``; return every sample's bytes (and the buffer, maybe reloaded)."""
    envs, out = Envs(n_envs, 0), []
    for i, (kind, arg, how, x) in enumerate(sequence):
        if kind == "steps":
            write(rb, Step(*(np.concatenate(f) for f in zip(
                *(envs.step(x) for _ in range(arg)), strict=True))), how)
        elif kind == "odd":
            write(rb, odd_rows(arg, i), how)
        elif len(rb) == 0:
            continue
        elif kind == "sample":
            out.append(sampled(rb.sample(arg)))
        elif kind == "update" and isinstance(rb, PrioritizedReplayBuffer):
            rb.update_priorities(np.array([arg % len(rb)]), np.array([x]))
        elif kind == "save" and tmp_path is not None:
            path = tmp_path / f"rb{i}.nsb"
            namedschema.save(rb.state_dict(), path, incremental=bool(i % 2))
            loaded = namedschema.load(path)
            assert "next_obs" not in loaded and loaded["storage"].next_obs is None
            if arg:
                rb = type(rb).from_state_dict(loaded)
            else:
                config = rb._frames.config
                rb = type(rb)(example(), rb.capacity, seed=123, frames_once=config[:2],
                              n_envs=config[2])
                rb.load_state_dict(loaded)
    return out, rb


@settings(max_examples=examples(150), deadline=None)
@given(prioritized=st.booleans(), n_envs=st.integers(1, 3), capacity=st.integers(1, 9),
       sequence=st.lists(ops, max_size=25))
def test_frames_once_samples_equal_the_plain_buffers(tmp_path_factory, prioritized, n_envs,
                                                     capacity, sequence):
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    sequence = [*sequence, ("sample", 64, "", 0.0)]
    plain, _ = run(cls(example(), capacity, seed=7), sequence, n_envs)
    once, rb = run(cls(example(), capacity, seed=7, frames_once=ONCE, n_envs=n_envs),
                   sequence, n_envs, tmp_path_factory.mktemp("once"))
    assert once == plain
    assert rb.storage.next_obs is None and "next_obs" not in rb.state_dict()


def test_an_episode_end_returns_the_true_final_observation():
    for n_envs in (1, 2):
        rb = ReplayBuffer(example(), 64, seed=0, frames_once=ONCE, n_envs=n_envs)
        envs = Envs(n_envs, 1)
        steps = [envs.step(0.5) for _ in range(20)]
        for s in steps:
            rb.extend(s)
        rows = Step(*(np.concatenate(f) for f in zip(*steps, strict=True)))
        index = np.arange(len(rows.action))
        got = rb._rows(index)
        assert got.next_obs.tobytes() == rows.next_obs.tobytes()
        ends = rows.done > 0
        assert ends.any() and (got.next_obs[ends] != rows.obs[np.minimum(
            index[ends] + n_envs, len(index) - 1)]).any()


@pytest.mark.subprocess
def test_the_frames_once_state_has_no_next_observations_and_resumes_in_a_fresh_interpreter(
        tmp_path):
    sequence = [("steps", 6, "extend", 0.3), ("sample", 5, "", 0.0), ("odd", 3, "add", 0.0),
                ("steps", 4, "add", 0.5), ("sample", 7, "", 0.0)]
    envs = Envs(2, 5)
    rest = [envs.step(0.4) for _ in range(7)]   # written after the resume
    for cls in (ReplayBuffer, PrioritizedReplayBuffer):
        twin = cls(example(), 11, seed=2, frames_once=ONCE, n_envs=2)
        run(twin, sequence, 2)
        for batch in rest:
            twin.extend(batch)
        expected = sampled(twin.sample(40))
        rb = cls(example(), 11, seed=2, frames_once=ONCE, n_envs=2)
        run(rb, sequence, 2)
        state = rb.state_dict()
        assert state["frames_once"] == ("obs", "next_obs", 2)
        assert state["storage"].next_obs is None and state["next_pool"].shape[1:] == (2,)
        namedschema.save({"state": state, "rest": rest}, tmp_path / "rb.nsb")
        run_fresh(f"""
            import numpy as np, namedschema
            from namedschema.training.replay import {cls.__name__} as cls
            from tests.training.test_replay_frames_once import sampled
            saved = namedschema.load({str(tmp_path / "rb.nsb")!r})
            rb = cls.from_state_dict(saved["state"])
            assert rb.storage.next_obs is None and rb._frames.config == ("obs", "next_obs", 2)
            for batch in saved["rest"]:
                rb.extend(batch)
            out = [np.frombuffer(b, np.uint8) for b in sampled(rb.sample(40))]
            namedschema.save({{"out": out}}, {str(tmp_path / "o.nsb")!r})
            """)
        got = namedschema.load(tmp_path / "o.nsb")["out"]
        assert [a.tobytes() for a in got] == expected


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_state_of_the_other_mode_is_refused_and_changes_nothing(cls):
    plain = cls(example(), 8, seed=0)
    once = cls(example(), 8, seed=0, frames_once=ONCE)
    other_envs = cls(example(), 8, seed=0, frames_once=ONCE, n_envs=2)
    for rb in (plain, once, other_envs):
        rb.extend(Envs(1, 0).step(0.0))
    for target, source, words in ((plain, once, "saved by a frames-once"),
                                  (once, plain, "saved by a plain"),
                                  (once, other_envs, "n_envs=2")):
        before = [np.asarray(v).copy() for v in target.storage if v is not None]
        with pytest.raises(ReplayStateError, match=words):
            target.load_state_dict(source.state_dict())
        with pytest.raises(ReplayStateError, match="not converted"):
            target.check_state_dict(source.state_dict())
        assert all(np.array_equal(a, b) for a, b in zip(
            before, [v for v in target.storage if v is not None], strict=True))
    assert len(once) == 1 and cls.from_state_dict(once.state_dict())._frames is not None
    assert cls.from_state_dict(plain.state_dict())._frames is None


def test_a_damaged_pool_is_refused():
    rb = ReplayBuffer(example(), 8, seed=0, frames_once=ONCE, n_envs=2)
    envs = Envs(2, 0)
    for _ in range(3):
        rb.extend(envs.step(0.0))
    good = rb.state_dict()
    rows = good["next_rows"]
    cases = {
        "lacks the next observations of the newest": np.where(rows == 5, -1, rows),
        "two frames for one row": np.where(rows == 5, 4, rows),
        "outside the 6 stored": np.where(rows == 5, 6, rows),
    }
    for words, damaged in cases.items():
        with pytest.raises(ReplayStateError, match=words):
            rb.load_state_dict({**good, "next_rows": damaged})
    with pytest.raises(ReplayStateError, match="does not fit"):
        rb.load_state_dict({**good, "next_pool": good["next_pool"].astype(np.float64)})
    with pytest.raises(ReplayStateError, match="next_pool"):
        rb.load_state_dict({k: v for k, v in good.items() if k != "next_pool"})
    rb.load_state_dict(good)


def test_writes_of_bad_next_observations_are_refused_before_anything_changes():
    rb = ReplayBuffer(example(dtype=np.uint8), 4, seed=0, frames_once=ONCE)
    ok = Step(np.zeros((2, 2), np.uint8), np.arange(2), np.ones((2, 2), np.uint8),
              np.zeros(2, np.float32))
    rb.extend(ok)
    before = rb.state_dict()
    saved = {"pool": before["next_pool"].copy(), "rows": before["next_rows"].copy()}
    with pytest.raises(FieldValueError, match="next_obs"):
        rb.extend(ok._replace(next_obs=np.full((2, 2), 300, np.uint16)))
    with pytest.raises(BufferShapeError, match="next_obs"):
        rb.extend(ok._replace(next_obs=np.ones((2, 3), np.uint8)))
    with pytest.raises(StructureMismatchError):
        rb.extend(ok._replace(next_obs=np.ones((2, 2), np.float32)))
    with pytest.raises(StructureMismatchError, match="next_obs"):
        rb.add(ok[0]._replace(next_obs=None))
    with pytest.raises(FieldValueError):
        rb.add(ok[0]._replace(obs=np.array([1, 300], np.uint16)))
    assert len(rb) == 2 and rb.cursor == 2
    np.testing.assert_array_equal(rb._frames.pool, saved["pool"])
    np.testing.assert_array_equal(rb._frames.owner, saved["rows"])


def test_the_example_and_the_fields_are_checked():
    with pytest.raises(ValueError, match="not a top-level field"):
        ReplayBuffer(example(), 4, frames_once=("obs", "next"))
    with pytest.raises(StructureMismatchError, match="shape and dtype"):
        ReplayBuffer(Step(np.zeros(2), 0, np.zeros(3), 0.0), 4, frames_once=ONCE)
    with pytest.raises(ValueError, match="n_envs"):
        ReplayBuffer(example(), 4, frames_once=ONCE, n_envs=0)
    rb = ReplayBuffer(Step(np.zeros(2, np.uint8), 0, None, 0.0), 4, frames_once=ONCE)
    rb.add(Step(np.zeros(2, np.uint8), 1, np.ones(2, np.uint8), 0.0))
    assert rb.sample(1).next_obs.tolist() == [[1, 1]]


def test_image_frames_take_about_half_the_bytes():
    shape, capacity = (4, 84, 84), 500
    frames = np.random.default_rng(0).integers(0, 256, (capacity + 1, *shape), np.uint8)
    sizes = {}
    for mode in (None, ONCE):
        rb = ReplayBuffer(example(shape, np.uint8), capacity, seed=0, frames_once=mode)
        for i in range(capacity + 40):     # one long episode, wrapping the ring
            j = i % capacity
            rb.add(Step(frames[j], i, frames[j + 1], 0.0))
        arrays = [v for v in rb.state_dict().values() if isinstance(v, np.ndarray)]
        arrays += [v for v in rb.storage if v is not None]
        if rb._frames is not None:
            arrays.append(rb._frames.slot)
        sizes[mode] = sum(a.nbytes for a in arrays)
    ratio = sizes[ONCE] / sizes[None]
    assert 0.49 < ratio < 0.51, sizes


def test_the_cleanrl_example_buffer_honours_optimize_memory_usage():
    """examples/cleanrl_namedschema_buffer: ``optimize_memory_usage=True`` (CleanRL's
    dqn_atari) stores frames once and samples what ``False`` does, truncations included."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    spaces = pytest.importorskip("gymnasium").spaces
    import os
    import sys

    from tests.helpers import REPO_ROOT
    sys.path.insert(0, os.path.join(REPO_ROOT, "examples"))
    try:
        from cleanrl_namedschema_buffer import ReplayBuffer as CleanRLBuffer
    finally:
        sys.path.remove(os.path.join(REPO_ROOT, "examples"))
    obs_space, act_space = spaces.Box(0, 255, (4, 8, 8), np.uint8), spaces.Discrete(3)
    with pytest.raises(ValueError, match="handle_timeout_termination"):
        CleanRLBuffer(10, obs_space, act_space, optimize_memory_usage=True)
    buffers = {}
    for once in (False, True):
        torch.manual_seed(3)
        buffers[once] = CleanRLBuffer(50, obs_space, act_space, n_envs=2,
                                      optimize_memory_usage=once,
                                      handle_timeout_termination=False)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (2, 4, 8, 8), np.uint8)
    for t in range(80):
        following = rng.integers(0, 256, (2, 4, 8, 8), np.uint8)
        truncated = rng.random(2) < 0.1
        real_next = np.where(truncated[:, None, None, None], 255 - following, following)
        for rb in buffers.values():
            rb.add(obs, real_next, np.array([t % 3, 2]), np.ones(2), np.zeros(2), [{}])
        obs = following
    a, b = buffers[False].sample(100), buffers[True].sample(100)
    assert all(x is y is None or torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert a.next_observations.shape == (100, 4, 8, 8)
    state = buffers[True].state_dict()
    assert state["storage"].next_observations is None and state["frames_once"][2] == 2
