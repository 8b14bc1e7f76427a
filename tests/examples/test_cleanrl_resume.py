"""CleanRL's DQN scripts (examples/cleanrl_dqn*.py), SIGKILLed and resumed: twin tests.

Each script runs as its users run it (tests/examples/cleanrl_driver.py), on CartPole
and on real Pong (ALE), at a small size, with SB3's ``ReplayBuffer`` as CleanRL has it
and with ``namedschema.ReplayBuffer`` swapped in. A run killed with SIGKILL of its whole
process group, first while its third checkpoint is written in the background, then
between checkpoints after a resume, and resumed again, ends with the same digest as the
uninterrupted run: networks, Adam, buffer arrays and counters, every env layer (the
emulator with its RNG), the global generators, the last observation and what it logged.
The uninterrupted run with the checkpoint equals the script without namedschema's lines.
The buffers wrap before the last checkpoint resumed from.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py")
pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")

EXAMPLES = os.path.join(REPO_ROOT, "examples")
CASES = {
    # script, its arguments, the checkpoint interval; the buffer wraps at buffer_size
    "cartpole": ("cleanrl_dqn.py",
                 ["--total-timesteps", "2400", "--buffer-size", "800", "--learning-starts",
                  "1000", "--target-network-frequency", "200", "--no-cuda"], 400),
    "pong": ("cleanrl_dqn_atari.py",
             ["--env-id", "PongNoFrameskip-v4", "--total-timesteps", "1200", "--buffer-size",
              "400", "--learning-starts", "900", "--target-network-frequency", "100",
              "--batch-size", "16", "--no-cuda"], 300),
}
# saves happen at steps 0, every, 2 * every, ...: killed in the 3rd save's background
# write, the run resumes from the 2nd; killed between checkpoints after the 4th save
# (which it waits for), from the 4th.
KILL_IN_SAVE = 3


def drive(case: str, cwd, *driver_args: str, checkpoint: bool = True) -> subprocess.CompletedProcess:
    script, args, every = CASES[case]
    if checkpoint:
        args = [*args, "--checkpoint", "run.nsc", "--checkpoint-every", str(every)]
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "tests.examples.cleanrl_driver", os.path.join(EXAMPLES, script),
         "--digest", "digest.json", *driver_args, "--", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
        start_new_session=True)   # the driver's kills take its whole process group


def digest(cwd) -> dict:
    with open(os.path.join(cwd, "digest.json")) as f:
        return json.load(f)


def resumed_at(proc: subprocess.CompletedProcess) -> list[int]:
    return [int(line.split()[-1]) for line in proc.stdout.splitlines()
            if line.startswith("resumed from ")]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The uninterrupted run with the checkpoint, once per (case, buffer)."""
    done: dict = {}

    def get(case: str, buffer: str) -> dict:
        if (case, buffer) not in done:
            cwd = tmp_path_factory.mktemp(f"{case}-{buffer}-twin")
            proc = drive(case, cwd, "--buffer", buffer)
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert resumed_at(proc) == []
            done[case, buffer] = digest(cwd)
        return done[case, buffer]
    return get


def assert_same(got: dict, expected: dict) -> None:
    differ = [part for part in expected if got.get(part) != expected[part]]
    assert not differ, f"parts that differ from the uninterrupted run: {differ}"


@pytest.mark.parametrize("buffer", ["sb3", "namedschema"])
@pytest.mark.parametrize("case", list(CASES))
def test_killed_in_a_background_save_and_between_checkpoints_resumes_exactly(
        tmp_path, uninterrupted, case, buffer):
    every = CASES[case][2]
    marker = str(tmp_path / "killed")
    first = drive(case, tmp_path, "--buffer", buffer, "--kill-in-save", str(KILL_IN_SAVE),
                  "--marker", marker)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    with open(marker) as f:
        assert f.read() == f"in the background write of save {KILL_IN_SAVE}"
    second = drive(case, tmp_path, "--buffer", buffer, "--kill-at", str(3 * every + 100),
                   "--marker", marker)
    assert second.returncode == -signal.SIGKILL, second.stderr[-3000:]
    with open(marker) as f:
        assert f.read() == f"between checkpoints, at step {3 * every + 100}"
    assert resumed_at(second) == [every + 1]        # the save killed in writing is not used
    final = drive(case, tmp_path, "--buffer", buffer)
    assert final.returncode == 0, final.stderr[-3000:]
    assert resumed_at(final) == [3 * every + 1]
    assert_same(digest(tmp_path), uninterrupted(case, buffer))


@pytest.mark.parametrize("case", list(CASES))
def test_the_checkpoint_changes_nothing_in_the_run(tmp_path, uninterrupted, case):
    """With SB3's buffer: the uninterrupted run equals CleanRL's script without namedschema."""
    plain = drive(case, tmp_path, "--without-namedschema", checkpoint=False)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert_same(digest(tmp_path), uninterrupted(case, "sb3"))
