"""SB3's vector envs as a RunCheckpoint state kind: every layer, every sub-env, in workers too."""

import numpy as np
import pytest

import namedschema
from namedschema.errors import RunCheckpointError
from namedschema.training.state_kinds import kind_of

pytest.importorskip("stable_baselines3")
env_util = pytest.importorskip("stable_baselines3.common.env_util")
vec_env = pytest.importorskip("stable_baselines3.common.vec_env")


def build(cls_name="DummyVecEnv", n_envs=2, stack=2):
    kwargs = {"vec_env_kwargs": {"start_method": "fork"}} if cls_name == "SubprocVecEnv" else {}
    base = env_util.make_vec_env("CartPole-v1", n_envs=n_envs, seed=0,
                                 vec_env_cls=getattr(vec_env, cls_name), **kwargs)
    return vec_env.VecNormalize(vec_env.VecFrameStack(base, stack))


def steps(env, n, seed):
    env.action_space.seed(seed)
    out = []
    for _ in range(n):
        obs, rew, done, _infos = env.step(np.array([env.action_space.sample()
                                                    for _ in range(env.num_envs)]))
        out += [obs.copy(), rew.copy(), done.copy()]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("cls_name", ["DummyVecEnv", "SubprocVecEnv"])
def test_a_restored_vector_env_continues_exactly(tmp_path, cls_name):
    env = build(cls_name)
    assert kind_of(env).name == "sb3_vec_env"
    env.reset()
    steps(env, 40, seed=1)             # episodes end and restart on the way
    namedschema.RunCheckpoint(tmp_path / "c.nsc", background=False, global_rngs=False).track(
        envs=env).save(0)
    expected = steps(env, 60, seed=2)
    fresh = build(cls_name)            # never reset: everything comes from the checkpoint
    assert namedschema.RunCheckpoint(tmp_path / "c.nsc", global_rngs=False).track(
        envs=fresh).restore()
    got = steps(fresh, 60, seed=2)
    assert all(np.array_equal(a, b) for a, b in zip(expected, got, strict=True))
    env.close()
    fresh.close()


def test_another_construction_is_refused_before_anything_changes(tmp_path):
    env = build()
    env.reset()
    namedschema.RunCheckpoint(tmp_path / "c.nsc", background=False, global_rngs=False).track(
        envs=env).save(0)
    other = build(n_envs=3)
    with pytest.raises(RunCheckpointError, match="saved with 2 sub-envs, this one has 3"):
        namedschema.RunCheckpoint(tmp_path / "c.nsc", global_rngs=False).track(
            envs=other).restore()
    unwrapped = build().venv
    with pytest.raises(RunCheckpointError, match="saved as the vector envs"):
        namedschema.RunCheckpoint(tmp_path / "c.nsc", global_rngs=False).track(
            envs=unwrapped).restore()
