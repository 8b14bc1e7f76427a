"""Crash consistency: SIGKILL a process while it overwrites a checkpoint.

``save`` writes a temporary file next to the target, syncs it and renames it
over the target, so at every instant the path holds either the old or the new
complete checkpoint. These tests kill a saver at random moments and check
that the file at the path always loads and verifies, and what the killed
saver leaves behind.
"""

import glob
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from namedschema import NamedArrayTupleSchema
from namedschema.checkpoint import load, save
from tests.figures import record
from tests.helpers import REPO_ROOT

TRIALS = 24
N = 1_000_000  # float64 elements per version: 8 MB, a few tens of ms per save

_SAVER = textwrap.dedent("""
    import sys
    import numpy as np
    from namedschema import NamedArrayTupleSchema
    from namedschema.checkpoint import save
    Snap = NamedArrayTupleSchema("Snap", "data step")
    path, first = sys.argv[1], int(sys.argv[2])
    arr = np.empty({n})
    sys.stdout.write("ready\\n")
    sys.stdout.flush()
    version = first
    while True:
        arr.fill(version)
        save({{"snap": Snap(arr, np.array([version])), "version": version}}, path)
        version += 1
    """).format(n=N)


def _check(path):
    """Load and verify the checkpoint at ``path``; return its version."""
    d = load(path, verify=True)
    version = d["version"]
    snap = d["snap"]
    assert int(snap.step[0]) == version and snap.data.shape == (N,)
    assert snap.data[0] == version and snap.data[-1] == version and (snap.data == version).all()
    return version


def _temp_files(path):
    return glob.glob(os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-*"))


def _kill_trials(path, rng, trials, strays=None):
    """Run ``trials`` savers, each SIGKILLed after a random delay; return versions seen.

    ``strays``, if given, gets the number of temp files left after each kill.
    """
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    versions = []
    previous = _check(path)
    for _ in range(trials):
        first = previous + 1
        proc = subprocess.Popen([sys.executable, "-c", _SAVER, path, str(first)],
                                stdout=subprocess.PIPE, env=env)
        try:
            assert proc.stdout.readline() == b"ready\n"
            time.sleep(rng.uniform(0.0, 0.25))
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
            proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL
        version = _check(path)  # raises if the previous checkpoint was damaged
        assert version >= previous
        versions.append(version)
        previous = version
        if strays is not None:
            strays.append(len(_temp_files(path)))
        record("crash.kills")
        record("crash.previous_intact")
    return versions


def test_sigkill_during_overwrite_never_damages_the_checkpoint(tmp_path):
    """24 savers killed at random moments: the checkpoint always loads and verifies."""
    path = str(tmp_path / "ckpt.nsb")
    Snap = NamedArrayTupleSchema("Snap", "data step")
    save({"snap": Snap(np.zeros(N), np.array([0])), "version": 0}, path)
    rng = random.Random(8)
    strays: list = []
    versions = _kill_trials(path, rng, TRIALS, strays)
    record("crash.stray_temp_files", len(_temp_files(path)))
    assert len(versions) == TRIALS == len(strays)
    # Some kills land mid-write (a temp file is left) and some saves complete
    # (the version moved on): both sides of the rename were exercised.
    assert versions[-1] > 0 and max(strays) >= 1
    # Each saver first removes the temp file of the killed one before it, so
    # at most the last killed saver's temp file is ever left.
    assert max(strays) <= 1, strays


def test_next_save_removes_temp_files_left_by_killed_savers(tmp_path):
    """After savers were killed mid-write, the next successful save leaves no temp files."""
    path = str(tmp_path / "ckpt.nsb")
    Snap = NamedArrayTupleSchema("Snap", "data step")
    save({"snap": Snap(np.zeros(N), np.array([0])), "version": 0}, path)
    # Kill until at least one temp file is left (nearly every kill leaves one).
    rng = random.Random(3)
    for _ in range(6):
        _kill_trials(path, rng, 1)
        if _temp_files(path):
            break
    assert _temp_files(path), "no kill landed mid-write; cannot test cleanup"
    save({"snap": Snap(np.ones(N), np.array([1])), "version": 1}, path)
    assert _temp_files(path) == []


def test_failed_save_in_process_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    """An exception in the middle of writing blocks keeps the old file and removes the temp file."""
    path = str(tmp_path / "ckpt.nsb")
    save({"version": 0, "data": np.zeros(1000)}, path)
    calls = {"n": 0}
    real = os.write

    def failing(fd, buf):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the user pressing Ctrl-C mid-save
        return real(fd, buf)

    monkeypatch.setattr(os, "write", failing)
    with pytest.raises(KeyboardInterrupt):
        save({"version": 1, "data": np.ones(100_000)}, path)
    monkeypatch.undo()
    d = load(path, verify=True)
    assert d["version"] == 0 and _temp_files(path) == []
