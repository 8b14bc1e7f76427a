"""One call and no silent unloadable files, with the real rlpyt (opt-in: RLPYT_SRC).

* ``namedschema.save`` of a replay buffer of unpatched rlpyt refuses, at save
  time and naming ``patch_rlpyt()``, what a fresh interpreter could not load
  (rlpyt issue #111), instead of writing the file.
* A buffer pickled under the patch loads in a fresh interpreter without it,
  fully: no stray attribute, and it appends and samples.
* ``resumable`` refuses before the first iteration a run whose state cannot
  be checkpointed (not at its first checkpoint, hours in).

(That ``resumable`` needs no ``patch_rlpyt()``, in either import order, is
shown on real Pong by test_pong_twins.py.) Each test runs in fresh interpreters.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.helpers import run_fresh

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = pytest.mark.rlpyt

BUILD = """
import json, os, pickle, sys
sys.path.append(os.environ["RLPYT_SRC"])
import numpy as np
{patch}
from rlpyt.replays.non_sequence.frame import PrioritizedReplayFrameBuffer
from rlpyt.utils.collections import namedarraytuple
Samples = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])

def samples(T, seed):
    rng = np.random.RandomState(seed)
    return Samples(observation=rng.randint(0, 255, (T, 2, 4, 6, 5)).astype(np.uint8),
                   action=rng.randint(0, 3, (T, 2)), reward=rng.rand(T, 2).astype(np.float32),
                   done=np.zeros((T, 2), bool))

def build():
    example = Samples(*(a[0, 0] for a in samples(1, 0)))
    buf = PrioritizedReplayFrameBuffer(example=example, size=64, B=2, discount=0.99,
                                       n_step_return=2, alpha=0.6, beta=0.4,
                                       default_priority=1.0)
    buf.append_samples(samples(20, 1))
    return buf
"""


def run(code):
    proc = run_fresh(textwrap.dedent(code), timeout=120)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def test_unpatched_buffer_is_refused_at_save_naming_patch_rlpyt(tmp_path):
    """Negative (rlpyt #111): without the patch, save refuses instead of writing the file."""
    path = tmp_path / "buffer.nsc"
    out = run(BUILD.format(patch="") + f"""
import namedschema
buf = build()
try:
    namedschema.save(buf, {str(path)!r}, allow_pickle=True)
    print(json.dumps({{"saved": True}}))
except namedschema.errors.UnpicklableError as exc:
    print(json.dumps({{"saved": False, "error": str(exc)}}))
""")
    assert out["saved"] is False, "an unloadable file was written"
    assert "patch_rlpyt()" in out["error"] and "BufferSamples" in out["error"]
    assert not path.exists()
    assert not [p for p in tmp_path.iterdir()]              # no temporary file left either


def test_patched_buffer_loads_and_appends_without_the_patch(tmp_path):
    """Pickled (plain pickle and namedschema.save) under the patch, used fully without it."""
    path = tmp_path / "buffer.nsc"
    out = run(BUILD.format(patch="import namedschema; namedschema.patch_rlpyt()") + f"""
buf = build()
namedschema.save(buf, {str(path)!r}, allow_pickle=True)
with open({str(path) + ".pkl"!r}, "wb") as f:
    pickle.dump(buf, f)
print(json.dumps({{}}))
""")
    out = run(BUILD.format(patch="") + f"""
import namedschema
from rlpyt.replays import frame
results = {{}}
for how in ("save", "pickle"):
    frame.BufferSamples = None                             # as in a fresh interpreter
    if how == "save":
        buf = namedschema.load({str(path)!r}, allow_pickle=True)
    else:
        with open({str(path) + ".pkl"!r}, "rb") as f:
            buf = pickle.load(f)
    stray = [k for k in vars(buf) if "namedschema" in k]
    buf.append_samples(samples(50, 2))                     # wraps the 64-step buffer
    np.random.seed(0)
    batch = buf.sample_batch(8)
    results[how] = {{"stray": stray, "t": int(buf.t),
                     "views": bool(np.shares_memory(buf.samples_new_frames,
                                                    buf.samples_frames)),
                     "obs": list(batch.agent_inputs.observation.shape)}}
print(json.dumps(results))
""")
    for how in ("save", "pickle"):
        assert out[how]["stray"] == [], out[how]
        assert out[how]["t"] == (20 + 50) % 64
        assert out[how]["views"] and out[how]["obs"] == [8, 4, 6, 5]


def test_state_that_cannot_be_checkpointed_is_refused_before_training(tmp_path):
    """A handler capturing what pickle refuses: ResumeError at start, no iteration run."""
    out = run(f"""
import json, os, sys
os.chdir({str(tmp_path)!r})
sys.path.append(os.environ["RLPYT_SRC"])
from namedschema.rlpyt import ResumeError, register_handler, resumable
from tests.rlpyt.driver import build
import tests.rlpyt.envs as envs

class Holder(envs.AtariLike):
    pass

register_handler(Holder, lambda env, ctx: {{"callback": lambda: None}},
                 lambda env, state, ctx: None)
runner = build("dqn_uniform")
runner.sampler.EnvCls = Holder
resumable(runner, "run.nsc", every_itrs=5)
try:
    runner.train()
    message = None
except ResumeError as exc:
    message = str(exc)
print(json.dumps({{"message": message, "file": os.path.exists("run.nsc"),
                  "itr": runner._namedschema_resume.n_itr}}))
""")
    assert out["message"] is not None, "the run trained until its first checkpoint"
    assert "cannot be checkpointed" in out["message"] and "lambda" in out["message"]
    assert out["file"] is False
