"""A resume holds the replay buffer once: peak resident growth <= B + 10% (+ the model).

Issue 19: resuming a checkpoint whose replay buffer has B bytes peaked at 2B
resident (the buffer written by rlpyt, plus the checkpoint's mapped pages it
was copied from), so the seed's 16 GB buffer could not resume on a 24 GB
machine. Measured in fresh processes with the real rlpyt (VmHWM, started
afresh before each restore), for every kind of rlpyt replay buffer the resume
supports: uniform and prioritized, frame and sequence buffers, and the async
runner's shared-memory buffers; and end to end through ``resumable`` on a
training run. Opt-in like the other real-rlpyt tests (RLPYT_SRC); Linux only
(/proc).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = [
    pytest.mark.rlpyt,
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"),
                       reason="measures VmHWM through /proc (Linux)"),
]

MIB = 256
KINDS = ["prioritized_frame", "uniform", "prioritized", "uniform_sequence",
         "prioritized_sequence_frame", "async_prioritized_frame",
         "async_uniform_sequence_frame"]


def child(module, *args, timeout=900):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-B", "-m", module, *map(str, args)],
                          capture_output=True, env=env, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-5000:]


def test_every_buffer_kind_resumes_within_its_size_plus_10_percent(tmp_path):
    kinds = ",".join(KINDS)
    child("tests.rlpyt.memory_child", "save", kinds, tmp_path, MIB, tmp_path / "s.json")
    child("tests.rlpyt.memory_child", "resume", kinds, tmp_path, MIB,
          tmp_path / "r.json")
    saved = json.loads((tmp_path / "s.json").read_text())
    resumed = json.loads((tmp_path / "r.json").read_text())
    for kind in KINDS:
        s, r = saved[kind], resumed[kind]
        assert s["bytes"] == r["bytes"] > 0.9 * MIB * 2**20, kind
        assert r["digest"] == s["digest"], f"{kind}: restored state differs"
        assert not r["mapped"], f"{kind}: the checkpoint stays mapped after the resume"
        assert r["growth"] <= 1.1 * r["bytes"], (
            f"{kind}: resuming a {r['bytes'] / 2**20:.0f} MiB buffer grew the peak "
            f"resident set by {r['growth'] / 2**20:.0f} MiB "
            f"({r['growth'] / r['bytes']:.2f}x the buffer)")
    assert resumed[KINDS[0]]["incremental"], "incremental saves after a resume differ"


def test_resumable_restores_a_run_within_its_buffer_size_plus_10_percent(tmp_path):
    """End to end: rlpyt's startup with the restore in it, against the same startup fresh.

    MinibatchRl with the serial sampler. (The async runners restore through the
    same code; their shared-memory buffers are measured above.)
    """
    config = "dqn_prioritized"
    ckpt = tmp_path / "run.nsc"
    for name, n_steps in (("a", 64), ("b", 128)):
        child("tests.rlpyt.memory_child", "train", config, ckpt, MIB,
              tmp_path / f"{name}.json", n_steps)
    fresh = json.loads((tmp_path / "a.json").read_text())
    resumed = json.loads((tmp_path / "b.json").read_text())
    assert fresh["start"] == 0 and resumed["start"] > 0
    assert resumed["bytes"] > 0.9 * MIB * 2**20
    assert not resumed["mapped"], "the checkpoint stays mapped after the resume"
    extra = resumed["growth"] - fresh["growth"]
    assert extra <= 1.1 * resumed["bytes"] + resumed["model_bytes"], (
        f"restoring a {resumed['bytes'] / 2**20:.0f} MiB buffer (models "
        f"{resumed['model_bytes'] / 2**20:.1f} MiB) grew the startup's peak resident set "
        f"by {extra / 2**20:.0f} MiB more than a fresh start "
        f"({extra / resumed['bytes']:.2f}x the buffer)")
