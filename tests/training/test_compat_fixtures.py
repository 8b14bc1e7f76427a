"""A RunCheckpoint written before the one resume engine (commit 3abe8cf) still resumes exactly.

tests/training/data/run-checkpoint-3abe8cf.nsc.gz was written by that commit from
``run_checkpoint_fixtures.build_compat`` (every built-in kind: a module, an
optimizer, a scheduler, a CartPole env, a prioritized replay, numpy and torch
generators, a ``random.Random``, a ``RandomState``, an ALE Pong env with sticky
actions, counters, an array, the global generators) after three steps; the JSON
beside it holds the digest of the run four steps later. Today's code restores the
file into a freshly built run, which must reach the same digest.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py")
torch = pytest.importorskip("torch")

DATA = os.path.join(os.path.dirname(__file__), "data")


def test_a_run_checkpoint_written_before_the_one_engine_resumes_exactly(tmp_path):
    from tests.training.run_checkpoint_fixtures import advance_compat, build_compat, compat_digest
    path = tmp_path / "run.nsc"
    with gzip.open(os.path.join(DATA, "run-checkpoint-3abe8cf.nsc.gz"), "rb") as src, \
            open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with open(os.path.join(DATA, "run-checkpoint-3abe8cf.json"), encoding="utf-8") as f:
        expected = json.load(f)["digest_after_4_more_steps"]
    ckpt, run = build_compat(path, incremental=False, quiet=True)
    assert ckpt.restore()
    assert ckpt.step == 3 and ckpt.loop == {"note": "compat"}
    advance_compat(run, 4)
    assert compat_digest(run) == expected
