"""A user's first hour with ``resumable`` (issue 35, items 1, 2, 3 and 6), on the real rlpyt.

1. A resume says so, in one line through rlpyt's logger; a fresh start does not.
2. A checkpoint path that cannot be written is refused by ``resumable()`` itself, not
   at the first checkpoint; too little space for the run's state is refused at
   startup, before the first iteration.
3. rlpyt's ``progress.csv`` across a kill and a resume holds every logged iteration
   once, as the uninterrupted run's does (rlpyt itself reopens it with mode 'w').
6. A resumable Atari run ends without nanobind's "leaked instances" report.

Each run is a fresh interpreter (opt-in: RLPYT_SRC).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO_ROOT, run_fresh

pytestmark = [pytest.mark.rlpyt, pytest.mark.subprocess]

PRELUDE = """
import json, os, signal, sys, warnings
sys.path.append(os.environ["RLPYT_SRC"])
import torch
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
from namedschema.rlpyt import ResumeError, resumable
from rlpyt.utils.logging import logger
from rlpyt.utils.logging.context import logger_context
from tests.rlpyt.driver import build
"""

# dqn_uniform: 8 env steps an iteration, 64 iterations (rlpyt rounds 480 steps up to whole
# log intervals), a log row every 8 (itr 7, 15, ...).
TRAIN = PRELUDE + """
KILL_AT = int(sys.argv[1])
runner = resumable(build("dqn_uniform"), "run.nsc", every_itrs=16)
set_iteration = logger.set_iteration
def killing(itr):       # wrapped by resumable's train(): runs before its checkpoint
    if itr == KILL_AT:
        runner._namedschema_resume.writer.wait()   # the checkpoint in flight is written
        os.kill(os.getpid(), signal.SIGKILL)
    set_iteration(itr)
logger.set_iteration = killing
with logger_context("logs", 0, "first_hour", {}, override_prefix=True):
    runner.train()
"""


def _train(tmp_path, kill_at=-1):
    return subprocess.run([sys.executable, "-c", TRAIN, str(kill_at)], cwd=tmp_path,
                          capture_output=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep
                                   + os.environ.get("PYTHONPATH", "")))


def _rows(tmp_path):
    with open(tmp_path / "logs" / "run_0" / "progress.csv", newline="") as f:
        rows = list(csv.reader(f))
    header = [name.rpartition("/")[2] for name in rows[0]]   # "Diagnostics/Iteration"
    return header, [dict(zip(header, row, strict=True)) for row in rows[1:]]


def test_a_resume_says_so_and_progress_csv_continues(tmp_path):
    """Killed at itr 44 (checkpoint 32, rows up to 39 logged), then run again: one
    'resumed' line at startup, and progress.csv holds itrs 7, 15, ..., 63 once each."""
    first = _train(tmp_path, kill_at=44)
    assert first.returncode == -9, first.stderr.decode()[-3000:]
    assert b"resumed" not in first.stdout + first.stderr     # a fresh start says nothing
    header, rows = _rows(tmp_path)
    assert [int(r["Iteration"]) for r in rows] == [7, 15, 23, 31, 39]

    second = _train(tmp_path)
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    out = second.stdout.decode()
    said = [line for line in out.splitlines() if "namedschema: resumed" in line]
    assert len(said) == 1, out[-3000:]
    assert "run.nsc at itr 32 (step 256)" in said[0] and "delete run.nsc" in said[0]
    # After rlpyt's startup lines (which count from 0), before the first training row.
    assert out.index("namedschema: resumed") > out.index("Running 64 iterations")
    with open(tmp_path / "logs" / "run_0" / "debug.log") as f:
        assert sum("namedschema: resumed" in line for line in f) == 1

    header_after, rows = _rows(tmp_path)
    assert header_after == header                       # one header, the same columns
    assert [int(r["Iteration"]) for r in rows] == list(range(7, 64, 8))
    assert [int(r["CumSteps"]) for r in rows] == [8 * (i + 1) for i in range(7, 64, 8)]


def test_an_unwritable_checkpoint_path_is_refused_by_resumable_itself(tmp_path):
    """A missing folder, a file as folder, a directory as path: ResumeError at
    ``resumable()``, naming what is wrong; nothing is created."""
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_dir").mkdir()
    code = PRELUDE + textwrap.dedent(f"""
        os.chdir({str(tmp_path)!r})
        out = {{}}
        for name in ("missing/run.nsc", "a_file/run.nsc", "a_dir"):
            try:
                resumable(build("dqn_uniform"), name, every_itrs=16)
            except ResumeError as exc:
                out[name] = str(exc)
        print(json.dumps(out))
        """)
    out = json.loads(run_fresh(code, timeout=300).stdout.decode().strip().splitlines()[-1])
    assert "'missing/run.nsc'" in out["missing/run.nsc"]
    assert "does not exist (create it first)" in out["missing/run.nsc"]
    assert "not a folder" in out["a_file/run.nsc"]
    assert "a directory, not a regular file" in out["a_dir"]
    assert sorted(os.listdir(tmp_path)) == ["a_dir", "a_file"]
    assert os.listdir(tmp_path / "a_dir") == []


def test_too_little_space_for_the_runs_state_is_refused_before_the_first_iteration(tmp_path):
    """The free space the check sees is made smaller than the run's state: train()
    raises ResumeError at startup, before any iteration or checkpoint."""
    code = PRELUDE + textwrap.dedent(f"""
        os.chdir({str(tmp_path)!r})
        from namedschema.checkpoint import _write as destination
        from namedschema.rlpyt.resume import runner as announce
        need = []
        def state_bytes(state, compression=None):
            need.append(destination.state_bytes(state, compression))
            return need[-1]
        announce.state_bytes = state_bytes
        announce.free_bytes = lambda path: 1000
        runner = resumable(build("dqn_uniform"), "run.nsc", every_itrs=16)
        itrs = []
        set_iteration = logger.set_iteration
        logger.set_iteration = lambda itr: (itrs.append(itr), set_iteration(itr))
        try:
            runner.train()
        except ResumeError as exc:
            print(json.dumps({{"error": str(exc), "itrs": itrs, "need": need,
                              "files": os.listdir(".")}}))
        """)
    out = json.loads(run_fresh(code, timeout=300).stdout.decode().strip().splitlines()[-1])
    # The replay buffer of 200 steps of 1x8x8 frames (rlpyt's frame buffer stores the
    # frames once), its sum tree and the model: tens of KiB.
    assert out["need"] and out["need"][0] > 10_000
    assert "only 1,000 B are free" in out["error"] and "'run.nsc'" in out["error"]
    assert out["itrs"] == [] and "run.nsc" not in out["files"]


def test_a_resumable_atari_run_ends_without_nanobind_leak_reports(tmp_path):
    """rlpyt's AtariEnv over ale-py, checkpointed in the background: nothing keeps the
    emulators alive at exit (the snapshot thread once held the last save's graph)."""
    proc = subprocess.run([sys.executable, "-m", "tests.rlpyt.driver", "pong",
                           str(tmp_path / "out.json"), "--ckpt", str(tmp_path / "run.nsc"),
                           "--every", "50"],
                          cwd=tmp_path, capture_output=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep
                                   + os.environ.get("PYTHONPATH", "")))
    err = proc.stderr.decode()
    assert proc.returncode == 0, err[-3000:]
    assert json.loads((tmp_path / "out.json").read_text())["saves"] == 5
    assert "leaked" not in err and "nanobind" not in err, err[-3000:]
