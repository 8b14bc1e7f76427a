"""SIGKILL during a mixed incremental save (arrays rewritten elsewhere, the file grown, the
rest updated in place): the file is the old or the new state, never a mix.

The child saves a state whose large array changes a little and whose small
arrays change shape, appear and go, and whose pickle grows past its room, so
that each save relays the file out (``relayout.py``), and kills itself inside
one save: in the scan, half-way through the journal, after its commit, after
the file grew, at the k-th write into the file (half of it written), or after
a random delay. The parent checks the file against the digests the child
logged before each save (see test_incremental_crash.py for the plain case).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _journal as journal
from namedschema.checkpoint import _storage as pages
from tests.helpers import REPO_ROOT

pytestmark = [
    pytest.mark.skipif(not pages.available() or os.name != "posix",
                       reason="needs Linux (pagemap, SIGKILL)"),
    pytest.mark.subprocess, pytest.mark.slow,
]

PHASES = ("scan", "journal_torn", "journal_done", "grown", "write_k", "random")
SEEDS = range(3)

CHILD = r"""
import hashlib, os, signal, sys, threading
import numpy as np
import namedschema
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _journal as journal
from namedschema.checkpoint import _tracking as tracking

phase, seed, path, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rng = np.random.default_rng(seed)

# "misc" is a set: not data, so the graph is pickled and the pickle grows at each save
obj = {"big": rng.integers(0, 2**62, 300_000, dtype=np.int64),
       "emu": np.zeros(14_420, np.uint8), "idx": np.arange(32), "misc": {""}}

def digest(o):
    h = hashlib.sha256()
    for k in sorted(x for x in o if x != "misc"):
        h.update(k.encode() + np.ascontiguousarray(o[k]).tobytes())
    h.update("".join(sorted(o["misc"])).encode())
    return h.hexdigest()

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())

note("state " + digest(obj))
namedschema.save(obj, path, incremental=True, allow_pickle=True)
incremental.wait(path)
note("saved")
kill_at = int(rng.integers(1, 4))
committed = []

def arm():
    if phase == "scan":
        tracking.Scan.memory = lambda self, *a: die()
    elif phase in ("journal_torn", "journal_done", "write_k"):
        real = journal.write
        def write(jpath, *a):
            size = real(jpath, *a)
            if phase == "journal_torn":
                with open(jpath, "r+b") as f:
                    f.truncate(int(rng.integers(0, size)))
                die()
            if phase == "journal_done":
                die()
            committed.append(int(rng.integers(1, 6)))
            return size
        journal.write = write
        real_pwrite = os.pwrite
        def pwrite(fd, data, offset):
            if committed:
                committed[0] -= 1
                if committed[0] == 0:
                    view = memoryview(data).cast("B")
                    real_pwrite(fd, view[: view.nbytes // 2], offset)
                    die()
            return real_pwrite(fd, data, offset)
        os.pwrite = pwrite
    elif phase == "grown":
        real_truncate = os.ftruncate
        def ftruncate(fd, size):
            real_truncate(fd, size)
            die()
        os.ftruncate = ftruncate
    else:
        threading.Timer(float(rng.uniform(0, 0.02)), die).start()

for i in range(1, 6):
    obj["big"][rng.integers(0, 300_000, 50)] = i
    obj["emu"] = np.full(14_420 + int(rng.integers(0, 28)) + 2000 * (i == kill_at), i, np.uint8)
    obj["idx"] = np.arange(31 + i % 2)
    if i == 2:
        obj["opt"] = np.full(5000, i, np.float32)
    if i == 4:
        obj.pop("opt", None)
    obj["misc"] = {"n" * (3000 * i)}
    obj.pop("burst", None)
    if i == kill_at:   # a new array larger than the free space: the file grows
        obj["burst"] = np.full(20_000, i, np.int64)
        arm()
    note("state " + digest(obj))
    namedschema.save(obj, path, incremental=True, allow_pickle=True)
    incremental.wait(path)
    note("saved " + namedschema.inspect(path).last_save.kind)
"""


def _digest(o):
    h = hashlib.sha256()
    for k in sorted(x for x in o if x != "misc"):
        h.update(k.encode() + np.ascontiguousarray(o[k]).tobytes())
    h.update("".join(sorted(o["misc"])).encode())
    return h.hexdigest()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("phase", PHASES)
def test_sigkill_inside_a_mixed_save_leaves_old_or_new_state(tmp_path, phase, seed):
    """Killed in any phase of a relaid save, the file is the last saved or the new state."""
    path, log = str(tmp_path / "ckpt.nsb"), str(tmp_path / "log")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), phase, str(seed),
                           path, log], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    lines = open(log).read().split("\n")[:-1]
    states = [line.split()[1] for line in lines if line.startswith("state")]
    saves = [line for line in lines if line.startswith("saved")]
    assert all(line == "saved incremental" for line in saves[1:]), saves   # really mixed
    completed = len(saves)
    allowed = {states[completed - 1], states[completed]} if completed < len(states) \
        else {states[-1]}
    back = namedschema.load(path, verify=True, allow_pickle=True)
    assert _digest(back) in allowed
    assert not os.path.exists(journal.journal_path(path))
