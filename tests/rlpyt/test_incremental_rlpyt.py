"""Incremental checkpoints of real rlpyt replay buffers under ``patch_rlpyt()``.

Skipped unless ``RLPYT_SRC`` points at an rlpyt source tree. Each buffer is
filled, saved in full, then appended to (prioritized buffers also sample and
reprioritise) and saved incrementally several times; every checkpoint must
load, in a fresh interpreter, as a buffer whose arrays and sampled batches
equal the live buffer's.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.helpers import run_fresh

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = pytest.mark.rlpyt

KINDS = {
    "UniformReplayBuffer": "rlpyt.replays.non_sequence.uniform",
    "PrioritizedReplayBuffer": "rlpyt.replays.non_sequence.prioritized",
    "UniformReplayFrameBuffer": "rlpyt.replays.non_sequence.frame",
}

COMMON = """
import hashlib, json, os, sys
import numpy as np
sys.path.append(os.environ["RLPYT_SRC"])
import namedschema
namedschema.patch_rlpyt()
from rlpyt.utils.collections import namedarraytuple
from {module} import {kind} as Buffer

frames = "Frame" in {kind!r}
Ex = namedarraytuple("SamplesToBuffer", "observation action reward done")
shape = (4, 16, 16) if frames else (16, 16)
def samples(step, t=40, b=2):
    rng = np.random.default_rng(step)
    return Ex(rng.integers(0, 255, (t, b) + shape, dtype=np.uint8),
              rng.integers(0, 4, (t, b)), rng.standard_normal((t, b)).astype(np.float32),
              rng.random((t, b)) < 0.05)

def arrays(buf):
    out = []
    def walk(x):
        if isinstance(x, np.ndarray):
            out.append(x)
        elif isinstance(x, tuple):
            for v in x: walk(v)
        elif hasattr(x, "__dict__"):
            for k in sorted(vars(x)): walk(vars(x)[k])
    walk(buf)
    return out

def digest(buf):
    h = hashlib.sha256()
    for a in arrays(buf):
        h.update(np.ascontiguousarray(a).tobytes())
    np.random.seed(7)
    batch = buf.sample_batch(16)
    for leaf in (batch.agent_inputs.observation, batch.action, batch.return_):
        h.update(np.asarray(leaf).tobytes())
    return h.hexdigest()
"""


def _kind_code(kind):
    return COMMON.format(module=KINDS[kind], kind=kind)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_rlpyt_buffer_incremental_saves_resume_exactly(tmp_path, kind):
    """Full save, then appends (and reprioritising) saved incrementally: loads equal, exactly."""
    path = str(tmp_path / "replay.nsb")
    proc = run_fresh(_kind_code(kind) + textwrap.dedent(f"""
        buf = Buffer(example=samples(0)[0, 0], size=4000, B=2, discount=0.99,
                     n_step_return=2)
        for step in range(60):
            buf.append_samples(samples(step))
        np.random.seed(0); buf.sample_batch(16)
        if hasattr(buf, "update_batch_priorities"):
            buf.update_batch_priorities(np.random.default_rng(0).random(16) + 0.1)
        namedschema.save(buf, {path!r}, incremental=True, allow_pickle=True)
        records = []
        for step in range(60, 64):
            buf.append_samples(samples(step))
            np.random.seed(step); buf.sample_batch(16)
            if hasattr(buf, "update_batch_priorities"):
                buf.update_batch_priorities(np.random.default_rng(step).random(16) + 0.1)
            namedschema.save(buf, {path!r}, incremental=True, allow_pickle=True)
            r = namedschema.inspect({path!r}).last_save
            records.append([r.kind, r.bytes_written, r.data_bytes])
        print(json.dumps({{"digest": digest(buf), "records": records}}))
        """))
    live = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    for kind_written, written, data in live["records"]:
        assert kind_written == "incremental"
        assert written < data / 10
    for mode in (None, "c"):
        loaded = run_fresh(_kind_code(kind) + textwrap.dedent(f"""
            buf = namedschema.load({path!r}, allow_pickle=True, verify=True,
                                   mmap_mode={mode!r})
            print(json.dumps({{"digest": digest(buf)}}))
            """))
        assert json.loads(loaded.stdout.decode().strip().splitlines()[-1]) == \
            {"digest": live["digest"]}
