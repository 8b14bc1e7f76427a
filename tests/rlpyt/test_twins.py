"""Twin tests of ``namedschema.rlpyt.resumable`` with the real rlpyt (opt-in: RLPYT_SRC).

Each scenario runs in fresh processes (tests/rlpyt/driver.py): an
uninterrupted twin; a run that checkpoints and is SIGKILLed (between
checkpoints, mid-iteration, or inside a checkpoint); and a resumed run. From
the checkpoint's iteration on, the resumed run must produce exactly the
twin's sampler batches, replay batches, losses and logged diagnostics
(timings aside), and end in exactly the twin's state (parameters, target
networks, optimizers, replay contents and sum trees, update_counter,
epsilon, beta, RNGs, every env's state, the runner's diagnostics).

Skipped unless RLPYT_SRC points at a directory holding rlpyt's ``rlpyt``
package: ``RLPYT_SRC=/path/to/rlpyt python -m pytest tests/rlpyt``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = pytest.mark.rlpyt

# Every run: 64 iterations of 8 steps; replay of 200 (192 for R2D1) steps, so
# the cursor wraps at iteration 25; checkpoints every 10 iterations.
CONFIGS = ["dqn_uniform", "dqn_prioritized", "dqn_eval", "r2d1", "sac"]
_TWINS: dict = {}


def drive(tmp_path, name, config, *options, expect_kill=False):
    out = tmp_path / f"{name}.json"
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "tests.rlpyt.driver", config,
                                 str(out), *map(str, options)], stdout=f, stderr=f,
                                env=env, cwd=str(tmp_path), start_new_session=True)
        try:
            proc.wait(timeout=300)
        finally:
            # Sampler workers of a killed run are orphans blocked on barriers.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    output = log.read_bytes()
    if expect_kill:
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, output.decode(errors="replace")[-3000:])
        assert not out.exists()
        return None
    assert proc.returncode == 0, output.decode(errors="replace")[-5000:]
    return json.loads(out.read_text())


def twin(tmp_path_factory, config):
    if config not in _TWINS:
        _TWINS[config] = drive(tmp_path_factory.mktemp(f"twin-{config}"), "twin", config)
    return _TWINS[config]


def assert_same_from(twin_run, resumed, start):
    """The resumed run reproduces the twin from iteration ``start`` on, and ends equal."""
    assert resumed["start"] == start
    expected = [e for e in twin_run["events"] if e[0] is not None and e[0] >= start]
    got = [e for e in resumed["events"] if e[0] is not None]
    kinds = {e[1].split(":")[0] for e in got}
    assert {"batch", "replay", "loss", "log"} <= kinds, kinds
    assert len(got) == len(expected)
    for i, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert want == have, f"event {i} (iteration {want[0]}, {want[1]}) differs"
    differing = {k: (v, resumed["final"][k]) for k, v in twin_run["final"].items()
                 if resumed["final"][k] != v}
    assert not differing, differing
    assert all(resumed["roundtrip"].values()), resumed["roundtrip"]


@pytest.mark.parametrize("config", CONFIGS)
def test_killed_between_checkpoints_resumes_exactly(tmp_path, tmp_path_factory, config):
    """SIGKILL at iteration 35 (checkpoint 30, after the replay cursor wrapped): exact."""
    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", config, "--ckpt", ckpt, "--kill-at-itr", 35, expect_kill=True)
    resumed = drive(tmp_path, "resumed", config, "--ckpt", ckpt)
    assert resumed["notes"] == []
    assert_same_from(twin(tmp_path_factory, config), resumed, 30)
    assert resumed["final"]["views"] == {"dqn_uniform": [True], "dqn_prioritized": [True, True],
                                         "dqn_eval": [True], "r2d1": [True, True],
                                         "sac": []}[config]


@pytest.mark.parametrize("config", ["dqn_prioritized", "r2d1"])
def test_killed_mid_iteration_before_wrap_resumes_exactly(tmp_path, tmp_path_factory, config):
    """SIGKILL inside a loss computation of iteration 23: resumes at 20, across the wrap."""
    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", config, "--ckpt", ckpt, "--kill-in-loss", 23,
          expect_kill=True)
    resumed = drive(tmp_path, "resumed", config, "--ckpt", ckpt)
    assert_same_from(twin(tmp_path_factory, config), resumed, 20)


def test_killed_inside_a_background_checkpoint_resumes_exactly(tmp_path, tmp_path_factory):
    """SIGKILL of the run while the third checkpoint (iteration 30) is written in the background.

    Checkpoints are incremental and in the background (the default). These
    runs change most of their small state between checkpoints, so each is a
    full one, written by a snapshot child: killed at the child's first write,
    the file holds iteration 20, the resume is exact, and no writer outlives
    the run. (Kills inside in-place writes: tests/checkpoint/test_background_kill.py.)
    """
    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", "dqn_prioritized", "--ckpt", ckpt, "--kill-in-save", "3:write",
          expect_kill=True)
    resumed = drive(tmp_path, "resumed", "dqn_prioritized", "--ckpt", ckpt)
    assert_same_from(twin(tmp_path_factory, "dqn_prioritized"), resumed, 20)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".run.nsc")) == []


@pytest.mark.parametrize("where", ["write", "replace"])
def test_killed_inside_a_checkpoint_uses_the_previous_one(tmp_path, tmp_path_factory, where):
    """Full checkpoints while training waits (incremental=False, background=False).

    SIGKILL while the third checkpoint (iteration 30) is written: resume from 20, exact.
    """
    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", "dqn_prioritized", "--ckpt", ckpt, "--kill-in-save",
          f"3:{where}", "--sync-full-saves", expect_kill=True)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.nsc.tmp")]
    assert leftovers, "the kill should have left the interrupted save's temporary file"
    resumed = drive(tmp_path, "resumed", "dqn_prioritized", "--ckpt", ckpt,
                    "--sync-full-saves")
    assert_same_from(twin(tmp_path_factory, "dqn_prioritized"), resumed, 20)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.nsc.tmp")]


def test_resuming_a_finished_run_changes_nothing(tmp_path, tmp_path_factory):
    """The final checkpoint holds the end state: training again does no iteration."""
    ckpt = tmp_path / "run.nsc"
    first = drive(tmp_path, "first", "dqn_uniform", "--ckpt", ckpt)
    assert first["final"] == twin(tmp_path_factory, "dqn_uniform")["final"]
    again = drive(tmp_path, "again", "dqn_uniform", "--ckpt", ckpt)
    assert again["start"] == 64   # 480 steps, rounded up to whole log intervals of 8

    assert [e for e in again["events"] if e[0] is not None] == []
    assert again["final"] == first["final"]
    assert again["saves"] == 0


def test_without_the_epsilon_handler_a_resume_diverges(tmp_path, tmp_path_factory):
    """Negative: rlpyt's own behaviour (eps_sample kept at eps_init after the schedule).

    With the epsilon handler replaced by a no-op, the run resumed at iteration
    30 (after eps_itr_max = 25) acts with epsilon 1.0: its first sampler batch
    already differs from the twin's, and its final epsilon is eps_init.
    """
    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", "dqn_uniform", "--ckpt", ckpt, "--kill-at-itr", 35,
          expect_kill=True)
    key = "rlpyt.agents.dqn.epsilon_greedy.EpsilonGreedyAgentMixin"
    resumed = drive(tmp_path, "resumed", "dqn_uniform", "--ckpt", ckpt,
                    "--disable-handler", key)
    twin_run = twin(tmp_path_factory, "dqn_uniform")
    assert twin_run["final"]["eps_sample"] == 0.05
    assert resumed["final"]["eps_sample"] == 1.0
    first_twin = next(e for e in twin_run["events"] if e[0] == 30 and e[1] == "batch")
    first_resumed = next(e for e in resumed["events"] if e[0] == 30 and e[1] == "batch")
    assert first_twin != first_resumed


# rlpyt's parallel samplers pass completed trajectory infos through a queue that the
# main process drains without waiting, so even two uninterrupted runs may log a
# trajectory one iteration apart: those log rows (and the runner's trajectory window)
# are left out of the comparison; everything else must match.
_TRAJ_LOGS = ("Return", "Length", "NonzeroRewards", "CompletedTrajs", "StepsInTraj")


def _without_traj_logs(run):
    run = dict(run)
    run["events"] = [e for e in run["events"]
                     if not (e[1].startswith("log:") and any(w in e[1] for w in _TRAJ_LOGS))]
    run["final"] = {k: v for k, v in run["final"].items() if k != "runner"}
    return run


@pytest.mark.parametrize("config", ["dqn_prioritized_cpu", "r2d1_cpu"])
def test_cpu_sampler_resumes_exactly_with_the_envs_in_its_workers(tmp_path, tmp_path_factory,
                                                                  config):
    """CpuSampler: the workers' envs, agent inputs, trajectories and RNGs are restored too."""
    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", config, "--ckpt", ckpt, "--kill-at-itr", 35, expect_kill=True)
    resumed = drive(tmp_path, "resumed", config, "--ckpt", ckpt)
    assert resumed["notes"] == []
    assert_same_from(_without_traj_logs(twin(tmp_path_factory, config)),
                     _without_traj_logs(resumed), 30)
    assert resumed["final"]["views"] == [True, True]


def test_cpu_sampler_with_unpicklable_envs_is_said_once_and_the_learner_is_exact(tmp_path):
    """Envs that cannot be pickled start new episodes in the workers; the learner is exact."""
    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", "dqn_prioritized_cpu", "--ckpt", ckpt, "--kill-at-itr", 35,
          "--unpicklable-env", expect_kill=True)
    resumed = drive(tmp_path, "resumed", "dqn_prioritized_cpu", "--ckpt", ckpt,
                    "--unpicklable-env")
    assert resumed["start"] == 30
    assert len(resumed["notes"]) == 1
    assert "cannot be pickled" in resumed["notes"][0]
    assert "(in sampler workers)" in resumed["notes"][0]
    assert resumed["roundtrip"]["agent"] and resumed["roundtrip"]["algo"]
    assert resumed["final"]["views"] == [True, True]
    assert resumed["final"]["update_counter"] == 2 * (64 - 5)


@pytest.mark.parametrize("config", ["dqn_prioritized_async", "dqn_eval_async"])
def test_async_runner_resumes_with_the_learner_exact(tmp_path, config):
    """AsyncRl(Eval) + AsyncSerialSampler + async frame buffer, SIGKILLed, resumed.

    The sampler runs in its own process (envs start new episodes, said once);
    the learner (agent, optimizer, replay buffer in shared memory, counters)
    resumes exactly where the checkpoint left it, and the iteration counts go
    on from the checkpoint's in the logs and in the final checkpoint.
    """
    import namedschema

    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", config, "--ckpt", ckpt, "--every", 8,
          "--kill-at-itr", 12, expect_kill=True)
    saved = namedschema.load(ckpt, allow_pickle=True)
    assert 0 < saved["itr"] < 12 and 0 < saved["sampler_itr"] < 64
    resumed = drive(tmp_path, "resumed", config, "--ckpt", ckpt, "--every", 8)
    assert resumed["start"] == saved["itr"]
    assert len(resumed["notes"]) == 1 and "AsyncSerialSampler" in resumed["notes"][0]
    assert resumed["roundtrip"] == {"agent": True, "algo": True, "sampler": True,
                                    "runner": True}
    assert resumed["final"]["views"] == ([True, True] if "prioritized" in config else [True])
    assert resumed["final"]["update_counter"] > saved["state"]["algo"][
        "rlpyt.algos.base.RlAlgorithm"]["counters"]["update_counter"][1]
    final = namedschema.load(ckpt, allow_pickle=True)
    assert final["sampler_itr"] == 64 and final["itr"] > saved["itr"]
