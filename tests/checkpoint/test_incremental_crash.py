"""SIGKILL during incremental saves: the file loads and verifies as the old or the new state.

A child process makes a buffer, saves it in full, then saves it incrementally
after random writes, and kills itself with SIGKILL inside one of those saves:
in each phase (while scanning, half-way through writing the journal, after the
journal's commit, half-way through the in-place writes, after them, half-way
through the header, in the background sync before the journal is removed) or
after a random delay. Before each save it appends the digest of the state it
is about to save to a log. The parent then loads the file (fully, verified,
and memory-mapped) and checks that it is the state of the last completed save
or of the interrupted one, never a mix, and that the next incremental save
works.
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
    pytest.mark.subprocess,
]

PHASES = ("scan", "journal_torn", "journal_done", "apply_mid", "apply_done", "header_mid",
          "finish", "random")
SEEDS = range(7)   # 8 phases x 7 = 56 kills

CHILD = r"""
import hashlib, os, signal, sys, threading
import numpy as np
import namedschema
from namedschema.buffer import buffer_from_example
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _journal as journal
from namedschema.checkpoint import _tracking as tracking

phase, seed, path, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rng = np.random.default_rng(seed)
S = namedschema.NamedArrayTupleSchema("S", "obs reward step")
buf = buffer_from_example(S(np.zeros((32, 32), np.uint8), np.float32(0), np.int64(0)), 1500)
buf.obs[:] = rng.integers(0, 255, buf.obs.shape, dtype=np.uint8)
source = {"heap": np.zeros(40_000, np.float64), "t": 0}
obj = {"buf": buf, "extra": source}
mode = seed % 3   # 0: buffer_from_example, 1: mmap 'c' resume, 2: both kinds

def digest(o):
    h = hashlib.sha256()
    for a in (o["buf"].obs, o["buf"].reward, o["buf"].step, o["extra"]["heap"]):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(str(o["extra"]["t"]).encode())
    return h.hexdigest()

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())

note("state " + digest(obj))
namedschema.save(obj, path, incremental=True)
note("saved")
if mode == 1:
    incremental.wait(path)
    obj = namedschema.load(path, mmap_mode="c")
kill_at = int(rng.integers(1, 4))

def arm():
    if phase == "scan":
        real = tracking.Scan.memory
        def memory(self, *a):
            die()
        tracking.Scan.memory = memory
    elif phase in ("journal_torn", "journal_done"):
        real = journal.write
        def write(jpath, *a):
            size = real(jpath, *a)
            if phase == "journal_torn":
                with open(jpath, "r+b") as f:
                    f.truncate(int(rng.integers(0, size)))
            die()
        journal.write = write
    elif phase in ("apply_mid", "apply_done"):
        real = tracking.write_in_place
        def write_in_place(fd, size, pieces):
            if phase == "apply_mid":
                k = int(rng.integers(0, len(pieces) + 1))
                real(fd, size, pieces[:k])
                if k < len(pieces):
                    off, data, crc = pieces[k]
                    part = memoryview(data).cast("B")
                    real(fd, size, [(off, part[: part.nbytes // 2], crc)])
            else:
                real(fd, size, pieces)
            die()
        tracking.write_in_place = write_in_place
    elif phase == "header_mid":
        real = os.pwrite
        def pwrite(fd, data, offset):
            if offset == 0:   # the header: stop inside its JSON, not in the padding
                used = len(bytes(data).rstrip())
                real(fd, memoryview(data)[: int(rng.integers(1, used))], 0)
                die()
            return real(fd, data, offset)
        os.pwrite = pwrite
    elif phase == "finish":
        real = os.unlink
        def unlink(p):
            if p.endswith(".journal"):
                die()
            return real(p)
        os.unlink = unlink
    else:
        threading.Timer(float(rng.uniform(0, 0.03)), die).start()

for i in range(1, 6):
    b = obj["buf"]
    n = int(rng.integers(1, 40))
    rows = rng.integers(0, len(b.obs), n)
    b.obs[rows] = rng.integers(0, 255, (n, 32, 32), dtype=np.uint8)
    b[int(rng.integers(0, 1500))] = S(np.full((32, 32), i, np.uint8), float(i), i)
    np.add(b.reward[:50], 1, out=b.reward[:50])
    obj["extra"]["heap"][int(rng.integers(0, 40_000))] = i
    obj["extra"]["t"] = i * 1000
    if i == kill_at:
        arm()
    note("state " + digest(obj))
    namedschema.save(obj, path, incremental=True)
    incremental.wait(path)
    note("saved")
"""


def _digest(o):
    h = hashlib.sha256()
    for a in (o["buf"].obs, o["buf"].reward, o["buf"].step, o["extra"]["heap"]):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(str(o["extra"]["t"]).encode())
    return h.hexdigest()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("phase", PHASES)
def test_sigkill_inside_an_incremental_save_leaves_old_or_new_state(tmp_path, phase, seed):
    """Killed in any phase, the checkpoint is the last saved or the interrupted state."""
    path, log = str(tmp_path / "ckpt.nsb"), str(tmp_path / "log")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), phase, str(seed),
                           path, log], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    lines = open(log).read().split("\n")[:-1]
    states = [line.split()[1] for line in lines if line.startswith("state")]
    completed = sum(line == "saved" for line in lines)
    # the state of the last completed save, or the one being saved when killed
    allowed = {states[completed - 1], states[completed]} if completed < len(states) \
        else {states[-1]}
    back = namedschema.load(path, verify=True)
    assert _digest(back) in allowed
    assert not os.path.exists(journal.journal_path(path))
    mapped = namedschema.load(path, mmap_mode="c", verify=True)
    assert _digest(mapped) == _digest(back)
    # the next save after the crash works, incrementally
    mapped["buf"].obs[3] += 1
    mapped["extra"]["t"] = -1
    namedschema.save(mapped, path, incremental=True)
    again = namedschema.load(path, verify=True)
    assert _digest(again) == _digest(mapped)
    assert namedschema.inspect(path).last_save.kind == "incremental"
