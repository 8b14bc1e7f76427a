"""SB3's ReplayBuffer and DictReplayBuffer as a RunCheckpoint state kind (CleanRL's buffer)."""

import warnings

import numpy as np
import pytest

import namedschema
from namedschema.errors import RunCheckpointError, RunCheckpointWarning
from namedschema.training.state_kinds import kind_of

buffers = pytest.importorskip("stable_baselines3.common.buffers")
spaces = pytest.importorskip("gymnasium.spaces")

OBS = spaces.Box(0, 255, (4, 6), np.uint8)
ACT = spaces.Box(-1.0, 1.0, (2,), np.float32)


def _buffer(size=16, n_envs=2, obs=OBS, cls=None, **kwargs):
    cls = cls or (buffers.DictReplayBuffer if isinstance(obs, spaces.Dict)
                  else buffers.ReplayBuffer)
    return cls(size, obs, ACT, "cpu", n_envs=n_envs, **kwargs)


def _fill(rb, steps, seed):
    rng = np.random.default_rng(seed)
    n = rb.n_envs

    def obs():
        if isinstance(rb.observation_space, spaces.Dict):
            return {k: rng.integers(0, 255, (n, *s.shape)).astype(s.dtype)
                    for k, s in rb.observation_space.spaces.items()}
        return rng.integers(0, 255, (n, *OBS.shape)).astype(np.uint8)

    for _ in range(steps):
        infos = [{"TimeLimit.truncated": bool(rng.integers(2))} for _ in range(n)]
        rb.add(obs(), obs(), rng.uniform(-1, 1, (n, 2)).astype(np.float32),
               rng.standard_normal(n).astype(np.float32), rng.integers(0, 2, n), infos)


def _arrays(rb):
    out = {}
    for name in ("observations", "next_observations", "actions", "rewards", "dones",
                 "timeouts"):
        value = getattr(rb, name, None)
        if isinstance(value, dict):
            out.update({f"{name}.{k}": v.copy() for k, v in value.items()})
        elif value is not None:
            out[name] = value.copy()
    return out


def _same(a, b):
    assert a.pos == b.pos and a.full == b.full
    left, right = _arrays(a), _arrays(b)
    assert left.keys() == right.keys()
    for name in left:
        assert left[name].dtype == right[name].dtype and np.array_equal(left[name], right[name]), \
            name


def _samples(rb, seed):
    np.random.seed(seed)
    s = rb.sample(8)
    obs = s.observations
    return [x.numpy() for x in (*(obs.values() if isinstance(obs, dict) else [obs]),
                                s.actions, s.rewards, s.dones)]


@pytest.mark.parametrize("kwargs", [
    {}, {"optimize_memory_usage": True, "handle_timeout_termination": False},
    {"obs": spaces.Dict({"image": OBS, "vec": spaces.Box(-1, 1, (3,), np.float32)})}],
    ids=["plain", "optimize_memory_usage", "dict"])
@pytest.mark.parametrize("steps", [5, 21], ids=["partial", "wrapped"])
def test_track_restores_arrays_and_counters_into_a_fresh_buffer(tmp_path, kwargs, steps):
    rb = _buffer(**kwargs)
    _fill(rb, steps, seed=1)
    assert kind_of(rb).name == "sb3_replay_buffer"
    ckpt = namedschema.RunCheckpoint(tmp_path / "c.nsc", global_rngs=False)
    ckpt.track(rb=rb).save(steps)
    ckpt.wait()
    fresh = _buffer(**kwargs)
    assert namedschema.RunCheckpoint(tmp_path / "c.nsc", global_rngs=False).track(
        rb=fresh).restore()
    _same(rb, fresh)
    for left, right in zip(_samples(rb, 3), _samples(fresh, 3), strict=True):
        assert np.array_equal(left, right)


def test_the_file_holds_plain_arrays_and_no_pickle(tmp_path):
    rb = _buffer()
    _fill(rb, 3, seed=2)
    namedschema.RunCheckpoint(tmp_path / "c.nsc", background=False).track(rb=rb).save(0)
    data = namedschema.load(tmp_path / "c.nsc")      # allow_pickle is off: data only
    state = data["components"]["rb"]["state"]
    assert data["components"]["rb"]["kind"] == "sb3_replay_buffer"
    assert state["pos"] == 3 and not state["full"]
    assert np.array_equal(state["arrays"]["observations"], rb.observations)


def test_incremental_saves_resume_from_the_last_one(tmp_path):
    rb = _buffer(size=64)
    ckpt = namedschema.RunCheckpoint(tmp_path / "c.nsc", global_rngs=False).track(rb=rb)
    for step in range(3):
        _fill(rb, 7, seed=10 + step)
        ckpt.save(step)
    ckpt.wait()
    fresh = _buffer(size=64)
    namedschema.RunCheckpoint(tmp_path / "c.nsc", global_rngs=False).track(rb=fresh).restore()
    _same(rb, fresh)


@pytest.mark.parametrize("other, message", [
    ({"size": 32}, "buffer_size=8"),
    ({"n_envs": 1}, "n_envs=2"),
    ({"optimize_memory_usage": True, "handle_timeout_termination": False},
     "optimize_memory_usage=False"),
    ({"obs": spaces.Box(0, 255, (4, 7), np.uint8)}, r"observations was saved as uint8 \(8, 2, 4, 6\)"),
    ({"obs": spaces.Box(0, 1, (4, 6), np.float32)}, "observations was saved as uint8"),
    ({"obs": spaces.Dict({"image": OBS})}, "saved from a ReplayBuffer"),
])
def test_a_buffer_built_differently_is_refused_before_anything_changes(tmp_path, other,
                                                                       message):
    rb = _buffer()
    _fill(rb, 4, seed=3)
    array = np.arange(5.0)
    namedschema.RunCheckpoint(tmp_path / "c.nsc", background=False).track(
        array=array, rb=rb).save(0)
    target = np.zeros(5)
    fresh = _buffer(**other)
    ckpt = namedschema.RunCheckpoint(tmp_path / "c.nsc").track(array=target, rb=fresh)
    with pytest.raises(RunCheckpointError, match=message):
        ckpt.restore()
    assert not target.any() and fresh.pos == 0, "something was restored before the check"


def test_dict_keys_that_differ_are_refused(tmp_path):
    obs = spaces.Dict({"image": OBS, "vec": spaces.Box(-1, 1, (3,), np.float32)})
    rb = _buffer(obs=obs)
    namedschema.RunCheckpoint(tmp_path / "c.nsc", background=False).track(rb=rb).save(0)
    fresh = _buffer(obs=spaces.Dict({"image": OBS, "other": spaces.Box(-1, 1, (3,))}))
    with pytest.raises(RunCheckpointError, match="observations was saved as {image"):
        namedschema.RunCheckpoint(tmp_path / "c.nsc").track(rb=fresh).restore()


class _Subclass(buffers.ReplayBuffer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.episode_starts = np.zeros(self.buffer_size, np.int64)
        self.episodes = 0
        self.hook = print    # not data: named in a warning


def test_a_subclass_keeps_its_data_attributes_and_names_the_others(tmp_path):
    rb = _buffer(cls=_Subclass)
    _fill(rb, 3, seed=4)
    rb.episode_starts[:3] = [4, 5, 6]
    rb.episodes = 7
    ckpt = namedschema.RunCheckpoint(tmp_path / "c.nsc", background=False).track(rb=rb)
    with pytest.warns(RunCheckpointWarning, match=r"\['hook'\] are not data"):
        ckpt.save(0)
    fresh = _buffer(cls=_Subclass)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        namedschema.RunCheckpoint(tmp_path / "c.nsc").track(rb=fresh).restore()
    _same(rb, fresh)
    assert fresh.episodes == 7 and list(fresh.episode_starts[:3]) == [4, 5, 6]
