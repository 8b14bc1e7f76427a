"""SIGKILL during incremental compressed saves: the file loads as the old or the new state.

As test_incremental_crash.py, for ``save(..., incremental=True, compression="zstd")``:
a child saves a frame buffer in full, then incrementally after random writes (noise
that makes chunks grow and blocks move, flat rows that make them shrink), and kills
itself inside one save: while finding the candidates, while placing the chunks,
half-way through the journal, after its commit, half-way through the in-place
writes, half-way through the header, before the journal is removed, or after a
random delay; three phases with background saves large enough to copy their candidate
chunks aside and write them in the writer thread. The parent checks, with every chunk's checksum verified, that the file
holds the last completed or the interrupted state, never a mix, and that saving
again works.
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
from tests.helpers import REPO_ROOT

pytest.importorskip("zstandard")
pytestmark = [pytest.mark.skipif(os.name != "posix", reason="needs SIGKILL"),
              pytest.mark.subprocess]

PHASES = ("find", "place", "journal_torn", "journal_done", "apply_mid", "header_mid",
          "finish", "random", "bg_journal_done", "bg_apply_mid", "bg_random")
SEEDS = range(4)   # 11 phases x 4 = 44 kills ("bg_": background saves of 9 MiB, which
                   # copy the candidate chunks and write them in the writer thread)

CHILD = r"""
import hashlib, os, signal, sys, threading
import numpy as np
import namedschema
from namedschema.checkpoint import _compression as compression
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _journal as journal
from namedschema.checkpoint import _squeezed as squeezed

compression.CHUNK, compression.MIN_BLOCK = 8192, 256
phase, seed, path, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
bg = phase.startswith("bg_")
phase = phase.removeprefix("bg_")
rng = np.random.default_rng(seed)
N = 9000 if bg else 600   # past SMALL_STATE: the route that copies changes aside
obj = {"obs": np.full((N, 32, 32), 87, np.uint8), "step": np.zeros(N, np.int64), "t": 0}

def digest(o):
    h = hashlib.sha256()
    for a in (o["obs"], o["step"]):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(str(o["t"]).encode())
    return h.hexdigest()

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def note(line):
    with open(log, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())

def save():
    if bg:
        namedschema.save(obj, path, incremental=True, compression="zstd",
                         background=True).wait()
    else:
        namedschema.save(obj, path, incremental=True, compression="zstd")
    incremental.wait(path)

note("state " + digest(obj))
save()
note("saved")
kill_at = int(rng.integers(1, 7))   # armed until it kills (a full save does not)
committed = []

def arm():
    if phase in ("find", "place"):
        name = "_chunks_of" if phase == "find" else "_place"
        def stop(*a, **k):
            die()
        setattr(squeezed, name, stop)
    elif phase in ("journal_torn", "journal_done"):
        real = journal.write
        def write(jpath, *a):
            size = real(jpath, *a)
            if phase == "journal_torn":
                with open(jpath, "r+b") as f:
                    f.truncate(int(rng.integers(0, size)))
            die()
        journal.write = write
    elif phase == "apply_mid":
        real_write, real_pwrite = journal.write, os.pwrite
        calls = [int(rng.integers(0, 3))]
        def write(*a):
            committed.append(True)
            return real_write(*a)
        def pwrite(fd, data, offset):
            if committed:
                if calls[0] == 0:
                    view = memoryview(data).cast("B")
                    real_pwrite(fd, view[: view.nbytes // 2], offset)
                    die()
                calls[0] -= 1
            return real_pwrite(fd, data, offset)
        journal.write, os.pwrite = write, pwrite
    elif phase == "header_mid":
        real = os.pwrite
        def pwrite(fd, data, offset):
            if offset == 0:
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
        threading.Timer(float(rng.uniform(0, 0.02)), die).start()

for i in range(1, 11):
    rows = rng.integers(0, N, int(rng.integers(4, 14)))
    if i % 3:
        obj["obs"][rows] = rng.integers(0, 255, (len(rows), 32, 32), dtype=np.uint8)
    else:
        obj["obs"][rows] = 87
    obj["step"][rows] = i
    obj["t"] = i
    if i == kill_at:
        arm()
    note("state " + digest(obj))
    save()
    note("saved")
"""


def _digest(o):
    h = hashlib.sha256()
    for a in (o["obs"], o["step"]):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(str(o["t"]).encode())
    return h.hexdigest()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("phase", PHASES)
def test_sigkill_inside_an_incremental_compressed_save(tmp_path, phase, seed):
    path, log = str(tmp_path / "ckpt.nsb"), str(tmp_path / "log")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), phase, str(seed),
                           path, log], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    lines = open(log).read().split("\n")[:-1]
    states = [line.split()[1] for line in lines if line.startswith("state")]
    completed = sum(line == "saved" for line in lines)
    allowed = {states[completed - 1], states[completed]} if completed < len(states) \
        else {states[-1]}
    back = namedschema.load(path, verify=True)
    assert _digest(back) in allowed
    assert not os.path.exists(journal.journal_path(path))
    namedschema.checkpoint.verify(path)
    back["obs"][3] += 1
    back["t"] = -1
    namedschema.save(back, path, incremental=True, compression="zstd")
    assert _digest(namedschema.load(path, verify=True)) == _digest(back)
