"""On real Pong, ``resumable``'s checkpoints after the first are incremental and small.

rlpyt's unmodified ``AtariEnv`` (through the atari_py adapter over ale-py),
DQN with a prioritized frame buffer, SerialSampler and CpuSampler, a
checkpoint every 10 of 240 iterations. Between two checkpoints the emulator
states change length, the sum tree's ``prev_tree_idxs`` has 31 or 32
entries, the optimizer state appears once learning starts and the pickled
part grows: those parts are rewritten, the rest updated in place. What each
checkpoint wrote comes from ``checkpoint_history`` (the driver reports it).
"""

from __future__ import annotations

import pytest

from tests.rlpyt.test_twins import drive

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = [pytest.mark.rlpyt, pytest.mark.subprocess, pytest.mark.slow]


@pytest.mark.parametrize("config", ["pong", "pong_cpu"])
def test_pong_checkpoints_after_the_first_are_incremental(tmp_path, config):
    """At least 80% of the checkpoints after the first are incremental, each writing at
    most a quarter of the file; a full one says why."""
    run = drive(tmp_path, "run", config, "--ckpt", tmp_path / "run.nsc", "--every", 10)
    history = run["history"]
    assert len(history) == run["saves"] == 24
    assert history[0]["kind"] == "full"
    later = history[1:]
    incremental = [s for s in later if s["kind"] == "incremental"]
    assert len(incremental) >= 0.8 * len(later), [(s["kind"], s["reason"]) for s in later]
    assert all(s["bytes_written"] <= 0.25 * s["file_bytes"] for s in incremental), incremental
    assert all(s["reason"] for s in later if s["kind"] == "full")
