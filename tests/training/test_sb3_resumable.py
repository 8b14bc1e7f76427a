"""namedschema.sb3.resumable: a SIGKILLed SB3 learn() resumes bit for bit (twin tests).

Every case runs tests/training/sb3_driver.py in fresh processes: SB3 alone (no
namedschema imported during the run), wrapped and never killed, wrapped and
SIGKILLed (the whole process group: SubprocVecEnv workers and background writer
too) between checkpoints or at the first write of a background checkpoint, then
rerun unchanged. The final states (networks, optimizers, replay buffer, counters,
exploration, last observations, episode statistics, every env layer and sub-env,
the generators) must be equal, part by part. SB3's own save/load route is run
the same way and must differ, so the suite can tell an exact resume from SB3's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

pytest.importorskip("stable_baselines3")
pytest.importorskip("torch")

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

# case: (checkpoint every, kill between checkpoints at)
CASES = {
    "dqn_cartpole": (100, 350),
    "ppo_cartpole": (64, 200),
    "ppo_cartpole_subproc": (64, 200),
    "sac_pendulum": (50, 180),
    "td3_pendulum": (50, 150),
    "ddpg_pendulum": (50, 150),
    "a2c_cartpole": (64, 200),
    "dqn_pong": (50, 150),
    "ppo_cartpole_vecnormalize": (64, 200),
    "dqn_cartpole_vecnormalize": (100, 350),
    "sac_pendulum_sde": (50, 180),
    "ppo_pendulum_sde": (64, 200),
}
_twins: dict[str, dict] = {}


def drive(case: str, digest, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "tests.training.sb3_driver", case,
                           "--digest", str(digest), *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=REPO_ROOT, start_new_session=True)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def read(path) -> dict:
    with open(path) as f:
        return json.load(f)


def twin(case: str, tmp_path_factory) -> dict:
    """SB3 alone (computed once per case)."""
    if case not in _twins:
        if case == "dqn_pong":
            pytest.importorskip("ale_py")
        path = tmp_path_factory.mktemp(case) / "twin.json"
        drive(case, path)
        _twins[case] = read(path)
    return _twins[case]


def differing(left: dict, right: dict) -> list[str]:
    return sorted(k for k in set(left) | set(right) if left.get(k) != right.get(k))


def resumed_at(proc: subprocess.CompletedProcess) -> list[int]:
    return [int(line.split()[-1]) for line in proc.stderr.splitlines()
            if line.startswith("namedschema.sb3: resumed from")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrapped_and_never_killed_equals_sb3_alone(case, tmp_path, tmp_path_factory):
    expected = twin(case, tmp_path_factory)
    every, _kill = CASES[case]
    proc = drive(case, tmp_path / "wrapped.json", "--checkpoint", str(tmp_path / "c.nsc"),
                 "--every", str(every))
    assert resumed_at(proc) == []
    assert differing(read(tmp_path / "wrapped.json"), expected) == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_killed_between_checkpoints_and_rerun_equals_sb3_alone(case, tmp_path,
                                                              tmp_path_factory):
    expected = twin(case, tmp_path_factory)
    every, kill = CASES[case]
    ckpt = ["--checkpoint", str(tmp_path / "c.nsc"), "--every", str(every)]
    killed = drive(case, tmp_path / "killed.json", *ckpt, "--kill-at", str(kill), check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    final = drive(case, tmp_path / "final.json", *ckpt)
    (step,) = resumed_at(final)
    assert 0 < step <= kill
    assert differing(read(tmp_path / "final.json"), expected) == []


@pytest.mark.parametrize("case", ["dqn_cartpole", "ppo_cartpole_subproc", "sac_pendulum",
                                  "dqn_pong"])
def test_killed_during_a_background_write_and_rerun_equals_sb3_alone(case, tmp_path,
                                                                     tmp_path_factory):
    expected = twin(case, tmp_path_factory)
    every, _kill = CASES[case]
    ckpt = ["--checkpoint", str(tmp_path / "c.nsc"), "--every", str(every)]
    killed = drive(case, tmp_path / "killed.json", *ckpt, "--kill-in-save", "3", check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    final = drive(case, tmp_path / "final.json", *ckpt)
    assert len(resumed_at(final)) == 1      # from the second checkpoint: the third was torn
    assert differing(read(tmp_path / "final.json"), expected) == []


@pytest.mark.parametrize("kill", ["between checkpoints", "in a background write"])
def test_compressed_checkpoints_killed_and_rerun_equal_sb3_alone(kill, tmp_path,
                                                                 tmp_path_factory):
    """DQN on real Pong frames with compression="auto": the checkpoint stores the frame
    buffer compressed and the networks raw; SIGKILLed between checkpoints, or at the
    first write of the third (compressed, background) checkpoint, the rerun equals SB3
    alone."""
    pytest.importorskip("zstandard")
    import namedschema
    expected = twin("dqn_pong", tmp_path_factory)
    every, at = CASES["dqn_pong"]
    path = tmp_path / "c.nsc"
    ckpt = ["--checkpoint", str(path), "--every", str(every), "--compression", "auto"]
    how = ["--kill-at", str(at)] if kill == "between checkpoints" else ["--kill-in-save", "3"]
    killed = drive("dqn_pong", tmp_path / "killed.json", *ckpt, *how, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    codecs = {(f.dtype, f.codec) for f in namedschema.inspect(path).fields if f.nbytes >= 4096}
    assert ("uint8", "zstd") in codecs and ("torch.float32", None) in codecs, codecs
    assert not any(c for d, c in codecs if d not in ("uint8", "torch.uint8")), codecs
    final = drive("dqn_pong", tmp_path / "final.json", *ckpt)
    assert len(resumed_at(final)) == 1
    assert differing(read(tmp_path / "final.json"), expected) == []


def test_sb3_own_save_and_load_route_is_told_apart(tmp_path, tmp_path_factory):
    """SB3's save + save_replay_buffer / load + load_replay_buffer, killed and rerun,
    does not end where SB3 alone does: the exploration rate restarts, the last
    observation is reset, the episode statistics are lost."""
    expected = twin("dqn_cartpole", tmp_path_factory)
    route = ["--sb3-save", str(tmp_path / "sb3"), "--every", "100"]
    killed = drive("dqn_cartpole", tmp_path / "killed.json", *route, "--kill-at", "350",
                   check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    drive("dqn_cartpole", tmp_path / "final.json", *route)
    wrong = differing(read(tmp_path / "final.json"), expected)
    assert {"_last_obs", "ep_info_buffer", "policy"} <= set(wrong), wrong


# -- changed hyperparameters: refused by default, accepted deliberately ------------------

def _dqn(**overrides):
    import torch
    from stable_baselines3 import DQN
    torch.set_num_threads(1)
    kwargs = dict(learning_starts=60, buffer_size=240, train_freq=4, batch_size=16,
                  target_update_interval=50, exploration_fraction=0.5,
                  policy_kwargs={"net_arch": [32]}, seed=0, learning_rate=1e-3)
    kwargs.update(overrides)
    return DQN("MlpPolicy", "CartPole-v1", **kwargs)


def _stop_at(step: int):
    from stable_baselines3.common.callbacks import BaseCallback

    class StopAt(BaseCallback):
        def _on_step(self) -> bool:
            return self.num_timesteps < step

    return StopAt()


def _first_run(path) -> None:
    """A run of 300 steps stopped at 148 (as if killed), its checkpoint at ``path``."""
    from namedschema.sb3 import resumable
    resumable(_dqn(), path, every_steps=100).learn(total_timesteps=300, callback=_stop_at(148))


def test_changed_learning_rate_is_refused_naming_what_resumable_accepts(tmp_path):
    from namedschema.errors import RunCheckpointError
    from namedschema.sb3 import resumable
    path = tmp_path / "c.nsc"
    _first_run(path)
    model = resumable(_dqn(learning_rate=5e-4), path, every_steps=100)
    with pytest.raises(RunCheckpointError, match=r"learning_rate: 0\.001 -> 0\.0005.*"
                       r"resumable\(\.\.\., accept_changes=\['learning_rate'\]\)"):
        model.learn(total_timesteps=300)
    assert model.num_timesteps == 0          # nothing changed


@pytest.mark.parametrize("accept", [["learning_rate"], "learning_rate", True])
def test_accepted_learning_rate_reaches_the_optimizer(tmp_path, accept):
    from namedschema.errors import RunCheckpointWarning
    from namedschema.sb3 import resumable
    path = tmp_path / "c.nsc"
    _first_run(path)
    model = resumable(_dqn(learning_rate=5e-4), path, every_steps=100, accept_changes=accept)
    with pytest.warns(RunCheckpointWarning, match=r"learning_rate: 0\.001 -> 0\.0005"):
        model.learn(total_timesteps=300)
    assert model.num_timesteps == 300 and model._total_timesteps == 300
    assert model.learning_rate == 5e-4
    assert [g["lr"] for g in model.policy.optimizer.param_groups] == [5e-4]


def test_accepted_exploration_fraction_takes_its_schedule_along(tmp_path):
    from namedschema.errors import RunCheckpointWarning
    from namedschema.sb3 import resumable
    path = tmp_path / "c.nsc"
    _first_run(path)
    model = resumable(_dqn(exploration_fraction=0.9), path, every_steps=100,
                      accept_changes=["exploration_fraction"])
    with pytest.warns(RunCheckpointWarning, match="exploration_fraction"):
        model.learn(total_timesteps=300, callback=_stop_at(200))
    assert model.num_timesteps == 200
    # the new schedule at 2/3 of the run (the old one, fraction 0.5, had ended at 0.05)
    assert model.exploration_rate == pytest.approx(1 - (200 / 300) / 0.9 * 0.95, abs=0.01)


@pytest.mark.parametrize("accept", [True, ["buffer_size"]])
def test_buffer_size_is_refused_even_when_accepted(tmp_path, accept):
    from namedschema.errors import RunCheckpointError
    from namedschema.sb3 import resumable
    path = tmp_path / "c.nsc"
    _first_run(path)
    model = resumable(_dqn(buffer_size=300), path, every_steps=100, accept_changes=accept)
    with pytest.raises(RunCheckpointError, match=r"buffer_size: 240 -> 300.*cannot be "
                       "changed on resume"):
        model.learn(total_timesteps=300)


# -- warnings: what is not captured is said, once; nothing is said for what is ---------

def test_gsde_is_captured_without_a_warning(tmp_path):
    """gSDE's noise matrices are drawn at each rollout's start, after the checkpoint, from
    torch's captured generator (the *_sde twin cases): no warning."""
    import warnings

    from stable_baselines3 import PPO

    from namedschema.errors import RunCheckpointWarning
    from namedschema.sb3 import resumable
    model = PPO("MlpPolicy", "Pendulum-v1", n_steps=16, batch_size=16, n_epochs=1,
                use_sde=True, policy_kwargs={"net_arch": [8]}, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunCheckpointWarning)
        resumable(model, tmp_path / "c.nsc", every_steps=16).learn(total_timesteps=32)


def test_an_attribute_the_row_does_not_know_is_named_in_a_warning(tmp_path):
    from namedschema.errors import RunCheckpointWarning
    from namedschema.sb3 import resumable

    class Tracker:
        pass

    model = _dqn()
    model.tracker = Tracker()
    with pytest.warns(RunCheckpointWarning, match=r"attributes \['tracker'\] are not "
                      "captured"):
        resumable(model, tmp_path / "c.nsc", every_steps=100).learn(total_timesteps=100)


def _counter():
    from stable_baselines3.common.callbacks import BaseCallback

    class Counter(BaseCallback):
        def __init__(self):
            super().__init__()
            self.episodes = 0

        def _on_step(self) -> bool:
            self.episodes += int(self.locals["dones"].sum())
            return True

    return Counter()


def test_a_callback_holding_state_is_named_in_one_warning(tmp_path):
    from stable_baselines3.common.callbacks import CallbackList

    from namedschema.errors import RunCheckpointWarning
    from namedschema.sb3 import resumable
    model = resumable(_dqn(), tmp_path / "c.nsc", every_steps=100)
    with pytest.warns(RunCheckpointWarning, match=r"callbacks passed to learn\(\) is not "
                      r"captured \(Counter \(episodes\)\)") as caught:
        model.learn(total_timesteps=100, callback=CallbackList([_stop_at(1000), _counter()]))
        model.learn(total_timesteps=100, callback=_counter(), reset_num_timesteps=False)
    assert sum("callbacks passed" in str(w.message) for w in caught) == 1


@pytest.mark.parametrize("callback", [None, "stateless"])
def test_no_callback_or_a_stateless_one_is_not_warned_about(tmp_path, callback):
    import warnings

    from namedschema.errors import RunCheckpointWarning
    from namedschema.sb3 import resumable
    model = resumable(_dqn(), tmp_path / "c.nsc", every_steps=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunCheckpointWarning)
        model.learn(total_timesteps=100,
                    callback=None if callback is None else _stop_at(1000))


def test_an_optimizer_setting_changed_outside_the_hyperparameters_names_resumable(tmp_path):
    """RunCheckpoint's own refusal (the optimizer's lr, set by hand after the build) names
    what the SB3 user passes, and that acceptance reaches RunCheckpoint."""
    from namedschema.errors import RunCheckpointError, RunCheckpointWarning
    from namedschema.sb3 import resumable
    path = tmp_path / "c.nsc"
    _first_run(path)
    model = _dqn()
    model.policy.optimizer.param_groups[0]["lr"] = 5e-4
    with pytest.raises(RunCheckpointError, match=r"policy_optimizer\.lr: 0\.001 in the "
                       r"checkpoint, 0\.0005 in this run.*pass resumable\(\.\.\., "
                       r"accept_changes=\['learning_rate'\]\)"):
        resumable(model, path, every_steps=100).learn(total_timesteps=300)
    model = _dqn(policy_kwargs={"net_arch": [32], "optimizer_kwargs": {"eps": 1e-5}})
    resumable(model, path, every_steps=100, accept_changes=["policy_kwargs"])
    with pytest.warns(RunCheckpointWarning, match="policy_kwargs"):
        model.learn(total_timesteps=300)
    assert model.policy.optimizer.param_groups[0]["eps"] == 1e-5
