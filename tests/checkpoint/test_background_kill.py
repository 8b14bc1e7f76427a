"""SIGKILL at every phase of a background save: the file holds the old or the new state, whole.

A process saves state A, then starts a background save of state B (full, by
a snapshot child; incremental, by a thread from the changes copied aside, or
by a snapshot child under page-checksum tracking) whose writer stops at a
chosen system call; the test SIGKILLs the process there (a writer child dies
with it: no orphan), then loads the file
with ``verify=True``. Before the commit point (the rename of a full save, the
journal of an incremental one) it must be A; after it, B; never a mix, never
12345.0 (written by the program after the snapshot). The next save works and
removes what the killed writer left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import namedschema
from tests.checkpoint.background_kill_child import state
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.subprocess

# (mode, os function, nth call in the writer, before/after it, expected state)
PHASES = [
    ("full", "open", 1, "before", "A"),          # snapshot taken, nothing written
    ("full", "write", 3, "before", "A"),         # writing the data
    ("full", "preadv", 2, "before", "A"),        # checksums (read back behind the writes)
    ("full", "fsync", 1, "before", "A"),         # fsync of the temporary file
    ("full", "replace", 1, "before", "A"),       # just before the rename
    ("full", "replace", 1, "after", "B"),        # renamed, directory not synced yet
    ("incremental", "open", 1, "before", "A"),   # snapshot taken
    ("incremental", "preadv", 1, "before", "A"),  # comparing memory with the file
    ("incremental", "writev", 1, "before", "A"),  # writing the journal
    ("incremental", "fsync", 1, "before", "B"),  # journal complete (page cache), not synced
    ("incremental", "pwrite", 1, "before", "B"),  # journal committed, file not touched
    ("incremental", "fdatasync", 1, "before", "B"),  # written in place, not synced
    ("incremental", "unlink", 1, "before", "B"),  # synced, journal not removed
    # page-checksum tracking: the incremental save runs in a snapshot child
    ("incremental_fork", "writev", 1, "before", "A"),
    ("incremental_fork", "pwrite", 1, "before", "B"),
    ("incremental_fork", "unlink", 1, "before", "B"),
    # compressed, full (compression="zstd"): written by a snapshot child, its chunks
    # compressed by the child's threads (incremental compressed saves:
    # test_compressed_incremental_crash.py)
    ("compressed_full", "open", 1, "before", "A"),
    ("compressed_full", "write", 3, "before", "A"),
    ("compressed_full", "fsync", 1, "before", "A"),
    ("compressed_full", "replace", 1, "before", "A"),
    ("compressed_full", "replace", 1, "after", "B"),
]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] not in "ZX"
    except OSError:
        return False


@pytest.mark.parametrize("mode,hook,nth,when,expected", PHASES,
                         ids=[f"{m}-{h}{n}-{w}" for m, h, n, w, _e in PHASES])
def test_sigkill_at_a_phase_leaves_old_or_new_state(tmp_path, mode, hook, nth, when, expected):
    if mode == "compressed_full":
        pytest.importorskip("zstandard")
    path = tmp_path / "ckpt.nsb"
    marker = tmp_path / "marker"
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tests.checkpoint.background_kill_child",
                             str(path), mode, hook, str(nth), when, str(marker)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, "the writer never reached the phase"
            time.sleep(0.02)
        _hook, writer, parent = marker.read_text().split()
        if int(writer) == proc.pid:
            assert mode == "incremental", "only the in-place route writes from a thread"
            writers = []
        else:
            assert int(parent) == proc.pid, "the writer is a child of the saving process"
            writers = [int(writer)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in writers):   # PR_SET_PDEATHSIG: no orphan writer
            assert time.monotonic() < deadline, "the writer outlived the killed process"
            time.sleep(0.02)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    back = namedschema.load(path, verify=True)
    extra = {"compression": "zstd"} if mode == "compressed_full" else {}
    if mode == "compressed_full":   # both states are stored compressed (about 1/10)
        info = namedschema.inspect(path)
        assert info.compressed and info.stored_bytes < info.data_bytes / 4
    want = state(expected)
    assert back["step"] == want["step"]
    np.testing.assert_array_equal(back["buffer"], want["buffer"])
    # The next save works and leaves nothing behind (temp files, journal).
    back["buffer"][0] = 5.0
    namedschema.save(back, path, incremental=not mode.endswith("full"), background=True,
                     **extra).wait()
    np.testing.assert_array_equal(namedschema.load(path, verify=True)["buffer"],
                                  back["buffer"])
    assert sorted(os.listdir(tmp_path)) == ["ckpt.nsb", "marker"]
