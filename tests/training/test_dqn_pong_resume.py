"""The CleanRL-style DQN on real Pong (examples/dqn_pong.py), SIGKILLed and resumed.

Twin test: the run killed with SIGKILL (the example kills itself at a chosen step,
mid-iteration) and resumed from its last RunCheckpoint ends with the same state,
bit for bit, as the same program run once without checkpoints: networks, Adam
state, replay buffer (storage, cursor, generator, sum tree), the ALE emulators
and every generator. Small sizes: the buffer (128 steps, 2 envs) wraps before the
first checkpoint that is resumed from.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py")
pytest.importorskip("torch")

EXAMPLE = os.path.join(REPO_ROOT, "examples", "dqn_pong.py")
SMALL = ["--total-timesteps", "160", "--num-envs", "2", "--buffer-size", "128",
         "--learning-starts", "32", "--train-frequency", "4", "--batch-size", "8",
         "--target-network-frequency", "50", "--exploration-fraction", "0.5",
         "--save-every", "20"]
WRAP_STEP = 128 // 2   # the cursor wraps after this many steps (2 envs)


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, EXAMPLE, *SMALL, *args], capture_output=True,
                          text=True, timeout=600, env=env)


def read(path) -> str:
    with open(path) as f:
        return f.read()


@pytest.mark.parametrize("buffer, kills", [("uniform", [130]), ("prioritized", [90, 150])])
def test_killed_and_resumed_equals_the_uninterrupted_run(tmp_path, buffer, kills):
    twin = run("--buffer", buffer, "--digest", str(tmp_path / "twin"))
    assert twin.returncode == 0, twin.stderr
    ckpt = str(tmp_path / "run.nsc")
    resumed_at = []
    for kill in kills:
        killed = run("--buffer", buffer, "--checkpoint", ckpt, "--kill-at", str(kill))
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        resumed_at += [int(line.split()[-1]) for line in killed.stderr.splitlines()
                       if line.startswith("resumed at step")]
    final = run("--buffer", buffer, "--checkpoint", ckpt, "--digest", str(tmp_path / "final"))
    assert final.returncode == 0, final.stderr
    resumed_at += [int(line.split()[-1]) for line in final.stderr.splitlines()
                   if line.startswith("resumed at step")]
    assert len(resumed_at) == len(kills) and min(resumed_at) > WRAP_STEP, resumed_at
    assert read(tmp_path / "final") == read(tmp_path / "twin")
