"""Resume a real rlpyt replay buffer after the sample schema gained a field (opt-in).

The training code's module (written to a temporary directory, in two versions
with the same module name) defines the replay samples at module level with
rlpyt's own ``namedarraytuple`` after ``patch_rlpyt()``. Version 1 fills a
``UniformReplayBuffer`` and checkpoints it; version 2 adds a ``timeout`` field
to the samples and returns it from ``extract_batch``. A fresh interpreter
running version 2 loads the checkpoint, upgrades it, appends and samples, and
must agree with a twin buffer that version 2 filled with the same data from
the start (timeout False for the old steps).

Skipped unless ``RLPYT_SRC`` points at an rlpyt source tree.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.helpers import run_fresh

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = pytest.mark.rlpyt

COMMON = """
import hashlib
import numpy as np
import namedschema
namedschema.patch_rlpyt()
from rlpyt.utils.collections import namedarraytuple
from rlpyt.replays.non_sequence.uniform import UniformReplayBuffer

T_APPEND, B, SIZE = 4, 2, 64


def samples(step, with_timeout):
    rng = np.random.default_rng(100 + step)
    lead = (T_APPEND, B)
    values = [rng.integers(0, 255, size=lead + (5, 5), dtype=np.uint8),
              rng.integers(0, 4, size=lead).astype(np.int64),
              rng.standard_normal(lead).astype(np.float32),
              rng.random(lead) < 0.1]
    if with_timeout:
        values.append(rng.random(lead) < 0.5 if step >= 10 else np.zeros(lead, bool))
    return SamplesToBuffer(*values)


def digest(batch):
    h = hashlib.sha256()
    stack = [batch]
    while stack:
        x = stack.pop()
        if x is None:
            continue
        if isinstance(x, tuple):
            stack.extend(reversed(x))
            continue
        a = np.ascontiguousarray(x.detach().numpy() if hasattr(x, "detach") else x)
        h.update(str((a.dtype.str, a.shape)).encode() + a.tobytes())
    return h.hexdigest()[:16]
"""

V1 = COMMON + """
SamplesToBuffer = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])
WITH_TIMEOUT = False


class Replay(UniformReplayBuffer):
    pass
"""

V2 = COMMON + """
import torch

SamplesToBuffer = namedarraytuple("SamplesToBuffer",
                                  ["observation", "action", "reward", "done", "timeout"])
WITH_TIMEOUT = True


class Replay(UniformReplayBuffer):
    def extract_batch(self, T_idxs, B_idxs):
        batch = super().extract_batch(T_idxs, B_idxs)
        return batch, torch.from_numpy(self.samples.timeout[T_idxs, B_idxs])
"""


def _run(directory, body):
    code = ("import os, sys\nsys.path.append(os.environ['RLPYT_SRC'])\n"
            f"sys.path.insert(0, {str(directory)!r})\n" + textwrap.dedent(body))
    proc = run_fresh(code, timeout=300)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


@pytest.mark.parametrize("n_step, mmap_mode", [(1, None), (3, "c")])
def test_replay_buffer_resumes_after_a_field_was_added(tmp_path, n_step, mmap_mode):
    """Checkpoint with v1, load with v2 (new field), append and sample: equals v2's twin."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    (v1 / "train_app.py").write_text(V1)
    (v2 / "train_app.py").write_text(V2)
    path = str(tmp_path / "replay.nsb")
    saved = _run(v1, f"""
        import json, namedschema, train_app as app
        example = app.samples(0, False)[0, 0]
        buf = app.Replay(example=example, size=app.SIZE, B=app.B, n_step_return={n_step})
        for step in range(10):
            buf.append_samples(app.samples(step, False))
        namedschema.save(buf, {path!r}, allow_pickle=True)
        print(json.dumps(dict(t=buf.t, schema=type(type(buf.samples)).__name__)))
        """)
    assert saved["schema"] == "NamedArrayTupleSchema"
    out = _run(v2, f"""
        import json, numpy as np, namedschema, train_app as app
        timeout = {{"SamplesToBuffer.timeout": np.bool_(False)}}
        if {mmap_mode!r} is None:   # load, then upgrade
            buf = namedschema.load({path!r}, allow_pickle=True)
            obs_before = buf.samples.observation
            buf, report = namedschema.upgrade(buf, app, defaults=timeout, report=True)
        else:                       # load straight into today's schemas, memory-mapped
            buf, report = namedschema.load({path!r}, allow_pickle=True, mmap_mode={mmap_mode!r},
                                           schemas=app, defaults=timeout, report=True)
            obs_before = buf.samples.observation   # the mapped array, checked below
            base = obs_before
            while isinstance(base, np.ndarray):
                base = base.base
            assert type(getattr(base, "obj", base)).__name__ == "mmap", type(base)
        twin = app.Replay(example=app.samples(0, True)[0, 0], size=app.SIZE, B=app.B,
                          n_step_return={n_step})
        for step in range(10):
            twin.append_samples(app.samples(step, True))
        resumed, expected = [], []
        for step in range(10, 16):
            for b, out in ((buf, resumed), (twin, expected)):
                b.append_samples(app.samples(step, True))
                np.random.seed(step)
                batch, timeout = b.sample_batch(6)
                out.append(app.digest((batch, timeout)))
        print(json.dumps(dict(
            type_ok=type(buf.samples) is app.SamplesToBuffer,
            fields=list(buf.samples._fields),
            obs_kept=buf.samples.observation is obs_before,
            alias_kept=({n_step} > 1) or buf.samples_return_ is buf.samples.reward,
            timeout_sum=int(buf.samples.timeout.sum()),
            twin_timeout_sum=int(twin.samples.timeout.sum()),
            same_arrays=all(np.array_equal(a, b) for a, b in zip(buf.samples, twin.samples)),
            resumed=resumed, expected=expected, report=str(report))))
        """)
    assert out["type_ok"] and out["fields"][-1] == "timeout"
    assert out["obs_kept"] and out["alias_kept"]
    assert out["timeout_sum"] == out["twin_timeout_sum"] > 0
    assert out["same_arrays"]
    assert out["resumed"] == out["expected"]
    assert "SamplesToBuffer -> SamplesToBuffer (train_app)" in out["report"]
    assert "added timeout" in out["report"]
