"""RunCheckpoint: a small torch loop with an env, resumed in process, equals its twin."""

from __future__ import annotations

import contextlib
import random
import threading
import warnings
from unittest import mock

import numpy as np
import pytest

import namedschema
from namedschema.training.run_checkpoint import RunCheckpointError, RunCheckpointWarning

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

Step = namedschema.NamedArrayTupleSchema("RunCkptStep", "obs action reward")


def build(path, prioritized=False, **kwargs):
    """A tiny run: CartPole x2, an MLP, Adam, a scheduler, a buffer, generators, counters."""
    torch.manual_seed(0)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    envs.single_action_space.seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 3, gamma=0.9)
    example = Step(np.zeros(4, np.float32), np.int64(0), np.float32(0))
    rb = (namedschema.PrioritizedReplayBuffer(example, 24, seed=5) if prioritized
          else namedschema.ReplayBuffer(example, 24, seed=5))
    run = {"envs": envs, "net": net, "opt": opt, "sched": sched, "rb": rb,
           "rng": np.random.default_rng(7), "gen": torch.Generator().manual_seed(9),
           "counters": {"episodes": 0, "returns": [0.0, 0.0]}}
    ckpt = namedschema.RunCheckpoint(path, **kwargs)
    ckpt.track(**run)
    return ckpt, run


def step_loop(run, obs, step):
    envs, net, opt, rb = run["envs"], run["net"], run["opt"], run["rb"]
    if random.random() < 0.5 or run["rng"].random() < 0.2:
        actions = np.array([envs.single_action_space.sample() for _ in range(2)])
    else:
        with torch.no_grad():
            actions = net(torch.as_tensor(obs)).argmax(1).numpy()
    next_obs, reward, term, trunc, _ = envs.step(actions)
    rb.extend(Step(obs.astype(np.float32), actions, reward.astype(np.float32)))
    run["counters"]["episodes"] += int((term | trunc).sum())
    if len(rb) >= 8:
        if isinstance(rb, namedschema.PrioritizedReplayBuffer):
            batch, idx, w = rb.sample(8)
        else:
            batch = rb.sample(8)
        noise = torch.randn(8, generator=run["gen"]) * 0.01 + torch.randn(8) * 0.01
        q = net(torch.as_tensor(batch.obs)).gather(1, torch.as_tensor(batch.action)[:, None])
        loss = ((q.squeeze(1) - torch.as_tensor(batch.reward) - noise) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        run["sched"].step()
        if isinstance(rb, namedschema.PrioritizedReplayBuffer):
            rb.update_priorities(idx, np.abs(q.detach().numpy()[:, 0]) + 0.1)
    return next_obs


def fingerprint(run, obs):
    return (tuple(p.detach().numpy().tobytes() for p in run["net"].parameters()),
            [t.numpy().tobytes() for s in run["opt"].state_dict()["state"].values()
             for t in s.values()],
            run["sched"].get_last_lr(), run["rb"].storage.obs.tobytes(), len(run["rb"]),
            run["rb"].cursor, obs.tobytes(), run["counters"], random.random(),
            np.random.random(), float(torch.rand(1)), run["rng"].random(),
            float(torch.rand(1, generator=run["gen"])))


@pytest.mark.parametrize("prioritized, compression", [
    (False, None), (True, None), (False, "zstd"), (True, ("zstd", 3))])
def test_resumed_in_a_fresh_build_equals_the_uninterrupted_run(tmp_path, prioritized,
                                                               compression):
    """With compression, every block of 64 bytes or more is stored as 128-byte zstd
    chunks (this run's arrays are small): saves and the resume read compressed files."""
    if compression is not None:
        pytest.importorskip("zstandard")
        from namedschema.checkpoint import _compression as codec
        patch = mock.patch.multiple(codec, CHUNK=128, MIN_BLOCK=64)
    else:
        patch = contextlib.nullcontext()
    with patch:
        _resume_twin(tmp_path, prioritized, compression)


def _resume_twin(tmp_path, prioritized, compression):
    def start(ckpt, run):
        random.seed(1)
        np.random.seed(1)
        torch.manual_seed(1)
        obs, _ = run["envs"].reset(seed=11)
        return obs

    ckpt, run = build(tmp_path / "twin.nsc", prioritized)
    obs = start(ckpt, run)
    for step in range(40):
        obs = step_loop(run, obs, step)
    twin = fingerprint(run, obs)

    ckpt, run = build(tmp_path / "run.nsc", prioritized, every_steps=10,
                      compression=compression)
    obs = start(ckpt, run)
    assert not ckpt.restore()
    for step in range(27):                       # saves at 10 and 20; "killed" at 27
        obs = step_loop(run, obs, step)
        ckpt.maybe_save(step, obs=obs)
    ckpt.wait()
    assert namedschema.inspect(tmp_path / "run.nsc").compressed == (compression is not None)
    ckpt, run = build(tmp_path / "run.nsc", prioritized, every_steps=10,
                      compression=compression)
    obs = start(ckpt, run)                       # the fresh run draws, restore undoes it
    assert ckpt.restore() and ckpt.step == 20
    obs = ckpt.loop["obs"]
    for step in range(21, 40):
        obs = step_loop(run, obs, step)
    assert fingerprint(run, obs) == twin


def test_saving_draws_from_no_generator_and_changes_nothing(tmp_path):
    ckpt, run = build(tmp_path / "a.nsc")
    random.seed(2)
    np.random.seed(2)
    obs, _ = run["envs"].reset(seed=3)
    before = fingerprint(run, obs)
    ckpt, run = build(tmp_path / "b.nsc")
    random.seed(2)
    np.random.seed(2)
    obs, _ = run["envs"].reset(seed=3)
    ckpt.save(0, obs=obs)
    ckpt.save(1, obs=obs)
    assert fingerprint(run, obs) == before


def test_the_file_is_plain_data(tmp_path):
    ckpt, run = build(tmp_path / "a.nsc")
    run["envs"].reset(seed=0)
    ckpt.save(0)
    namedschema.load(tmp_path / "a.nsc")   # allow_pickle=False: no pickle inside


def test_maybe_save_at_multiples_of_every_steps(tmp_path):
    ckpt = namedschema.RunCheckpoint(tmp_path / "c.nsc", every_steps=4, global_rngs=False)
    counters = {"n": 0}
    ckpt.track(counters=counters)
    saved = [s for s in range(0, 20, 3) if ckpt.maybe_save(s)]
    assert saved == [0, 6, 9, 12, 18]


class _LockedEnv(gym.Env):
    """An env holding something that is not data (a lock): it cannot be captured."""

    observation_space = gym.spaces.Box(-1, 1, (2,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.lock = threading.Lock()
        self.t = 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, False, {}


def test_an_env_that_cannot_be_captured_is_restarted_with_a_warning(tmp_path):
    env = _LockedEnv()
    ckpt = namedschema.RunCheckpoint(tmp_path / "e.nsc")
    ckpt.track(env=env)
    with pytest.warns(RunCheckpointWarning, match=r"env\.lock \(_thread\.lock\).*restarts it"):
        ckpt.save(5)
    again = namedschema.RunCheckpoint(tmp_path / "e.nsc")
    again.track(env=_LockedEnv())
    with pytest.warns(RunCheckpointWarning, match="reset it"):
        assert again.restore()
    assert "env" in again.restarted and "_thread.lock" in again.restarted["env"]


def test_a_checkpoint_of_another_run_is_refused_naming_the_parts(tmp_path):
    ckpt, run = build(tmp_path / "a.nsc")
    run["envs"].reset(seed=0)
    ckpt.save(0)
    other = namedschema.RunCheckpoint(tmp_path / "a.nsc")
    other.track(net=run["net"], extra={"x": 1})
    with pytest.raises(RunCheckpointError, match=r"missing from the file: \['extra'\]"):
        other.restore()
    _, fresh = build(tmp_path / "unused.nsc")
    fresh["rb"] = namedschema.ReplayBuffer(
        Step(np.zeros(4, np.float32), np.int64(0), np.float32(0)), 25)
    wrong_shape = namedschema.RunCheckpoint(tmp_path / "a.nsc").track(**fresh)
    with pytest.raises(RunCheckpointError, match="'rb' cannot be restored.*another example"):
        wrong_shape.restore()
    namedschema.save({"format": "something else"}, tmp_path / "x.nsc")
    foreign = namedschema.RunCheckpoint(tmp_path / "x.nsc")
    with pytest.raises(RunCheckpointError, match="not a RunCheckpoint file"):
        foreign.restore()


def test_an_array_of_another_shape_is_refused_before_anything_is_restored(tmp_path):
    path = tmp_path / "run.nsc"
    namedschema.RunCheckpoint(path, global_rngs=False).track(
        a=np.arange(3.0), b=np.arange(4.0)).save(7)
    a, b = np.zeros(3), np.zeros(5)            # b built differently
    with pytest.raises(RunCheckpointError,
                       match=r"^RunCheckpoint: 'b' was saved as an array of float64 \(4,\)"):
        namedschema.RunCheckpoint(path, global_rngs=False).track(a=a, b=b).restore()
    assert not a.any()                          # nothing was written into a
    c = np.zeros(4, np.float32)                 # another dtype
    with pytest.raises(RunCheckpointError, match="^RunCheckpoint: 'b' was saved as an array of float64"):
        namedschema.RunCheckpoint(path, global_rngs=False).track(a=a, b=c).restore()
    assert not a.any()


def test_values_that_are_not_data_are_refused_naming_them(tmp_path):
    class Holder:
        def state_dict(self):
            return {"schedule": abs}   # a function: pickled by reference, not data

        def load_state_dict(self, state):
            pass

    ckpt = namedschema.RunCheckpoint(tmp_path / "p.nsc")
    ckpt.track(holder=Holder())
    with pytest.raises(RunCheckpointError, match=r"holder\.schedule .*allow_pickle=True"):
        ckpt.save(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        namedschema.RunCheckpoint(tmp_path / "q.nsc", allow_pickle=True).track(
            holder=Holder()).save(0)
    with pytest.raises(TypeError, match="cannot capture a object"):
        ckpt.track(thing=object())


def test_a_checkpoint_of_another_kind_is_refused_by_its_header(tmp_path):
    """A namedschema file whose header names another kind is refused before anything in
    it is unpickled (``FormatError.expected`` set); a damaged one is reported as such."""
    from namedschema.errors import StateMismatchError
    path = tmp_path / "other.nsc"
    namedschema.save({"a": np.zeros(3)}, path, metadata={"kind": "something else"})
    target = np.ones(3)
    ckpt = namedschema.RunCheckpoint(path, allow_pickle=True).track(a=target)
    with pytest.raises(StateMismatchError, match="is not a RunCheckpoint file") as info:
        ckpt.restore()
    assert isinstance(info.value.__cause__, namedschema.FormatError)
    assert info.value.__cause__.expected == {"kind": "namedschema.RunCheckpoint"}
    assert info.value.__cause__.metadata == {"kind": "something else"}
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(StateMismatchError, match="cannot be restored: ") as info:
        ckpt.restore()
    assert info.value.__cause__.expected is None
    assert target.all()
