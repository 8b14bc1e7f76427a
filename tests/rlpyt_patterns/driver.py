"""One training script for the resume scenario, run against rlpyt or its stand-in.

Each function is meant to run in its own fresh interpreter (see
``tests/helpers.run_fresh``): build a replay buffer, feed it deterministic
samples, sample batches with a fixed seed, checkpoint it, and resume from the
checkpoint. Batches are compared through digests of their bytes. Nothing here
imports rlpyt at module import time.

BACKENDS          backend name -> buffer kind -> how to build and feed it
checkpoint_run    train, checkpoint mid-way, keep training (the twin)
resume_run        build as usual, restore the checkpoint, keep training
read_run          load a checkpoint without the patch and describe it
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys

import numpy as np

T_APPEND, B = 4, 2          # each append is [T_APPEND, B]
SIZE = 64                   # buffer capacity in samples (T = 32)
BATCH_B = 6
CHECKPOINT_AT, STOP_AT = 20, 30   # appends before the checkpoint / in total
N_FRAMES, H, W = 3, 5, 5


def _example_type(with_rnn: bool):
    from rlpyt.utils.collections import namedarraytuple
    fields = ["observation", "action", "reward", "done"]
    return namedarraytuple("SamplesToBuffer", fields + (["prev_rnn_state"] if with_rnn else []))


def _samples(step: int, frames: bool, with_rnn: bool, leading=(T_APPEND, B)):
    """The deterministic samples of append number ``step``."""
    rng = np.random.default_rng(1000 + step)
    obs_shape = (N_FRAMES, H, W) if frames else (H, W)
    values = [rng.integers(0, 255, size=leading + obs_shape, dtype=np.uint8),
              rng.integers(0, 4, size=leading).astype(np.int64),
              rng.standard_normal(leading).astype(np.float32),
              rng.random(leading) < 0.1]
    if with_rnn:
        values.append(rng.standard_normal(leading + (3,)).astype(np.float32))
    return _example_type(with_rnn)(*values)


def _example(frames, with_rnn):
    return _samples(0, frames, with_rnn)[0, 0]


def _real(cls_path, frames=False, seq=False, prioritized=False):
    def make():
        module, name = cls_path.rsplit(".", 1)
        cls = getattr(__import__(module, fromlist=[name]), name)
        kwargs = dict(example=_example(frames, seq), size=SIZE, B=B, discount=0.99,
                      n_step_return=2)
        if seq:
            kwargs.update(rnn_state_interval=2, batch_T=4)
        return cls(**kwargs)
    return dict(make=make, frames=frames, seq=seq, prioritized=prioritized)


def _fake(cls_path, frames=False, prioritized=False):
    def make():
        module, name = cls_path.rsplit(".", 1)
        cls = getattr(__import__(module, fromlist=[name]), name)
        return cls(example=_example(frames, False), size=SIZE, B=B)
    return dict(make=make, frames=frames, seq=False, prioritized=prioritized)


BACKENDS = {
    "real": {
        "UniformReplayBuffer": _real("rlpyt.replays.non_sequence.uniform.UniformReplayBuffer"),
        "PrioritizedReplayBuffer": _real(
            "rlpyt.replays.non_sequence.prioritized.PrioritizedReplayBuffer",
            prioritized=True),
        "UniformReplayFrameBuffer": _real(
            "rlpyt.replays.non_sequence.frame.UniformReplayFrameBuffer", frames=True),
        "PrioritizedReplayFrameBuffer": _real(
            "rlpyt.replays.non_sequence.frame.PrioritizedReplayFrameBuffer",
            frames=True, prioritized=True),
        "UniformSequenceReplayBuffer": _real(
            "rlpyt.replays.sequence.uniform.UniformSequenceReplayBuffer", seq=True),
        "PrioritizedSequenceReplayBuffer": _real(
            "rlpyt.replays.sequence.prioritized.PrioritizedSequenceReplayBuffer",
            seq=True, prioritized=True),
        "UniformSequenceReplayFrameBuffer": _real(
            "rlpyt.replays.sequence.frame.UniformSequenceReplayFrameBuffer",
            frames=True, seq=True),
        "PrioritizedSequenceReplayFrameBuffer": _real(
            "rlpyt.replays.sequence.frame.PrioritizedSequenceReplayFrameBuffer",
            frames=True, seq=True, prioritized=True),
    },
    "fake": {
        "UniformRing": _fake("rlpyt.replays.uniform.UniformRing"),
        "FrameRing": _fake("rlpyt.replays.frame.FrameRing", frames=True),
        "PrioritizedRing": _fake("rlpyt.replays.prioritized.PrioritizedRing",
                                 prioritized=True),
        "PrioritizedFrameRing": _fake("rlpyt.replays.prioritized.PrioritizedFrameRing",
                                      frames=True, prioritized=True),
    },
}


def _leaves(obj):
    if obj is None:
        return
    if isinstance(obj, tuple):
        for value in obj:
            yield from _leaves(value)
        return
    if hasattr(obj, "detach"):  # torch tensor
        obj = obj.detach().cpu().numpy()
    yield np.ascontiguousarray(obj)


def _digest(batch) -> str:
    h = hashlib.sha256()
    for leaf in _leaves(batch):
        h.update(str((leaf.dtype.str, leaf.shape)).encode())
        h.update(leaf.tobytes())
    return h.hexdigest()[:16]


def _train(buf, spec, start, stop):
    """Append samples ``start..stop-1``, sampling (and reprioritising) after each."""
    digests = []
    for step in range(start, stop):
        buf.append_samples(_samples(step, spec["frames"], spec["seq"]))
        if step < 8:  # too few valid samples yet
            continue
        np.random.seed(step)
        batch = buf.sample_batch(BATCH_B)
        digests.append(_digest(batch))
        if spec["prioritized"]:
            new = np.random.default_rng(step).random(BATCH_B) + 0.1
            buf.update_batch_priorities(new)
    return digests


def _save(buf, method, path):
    if method == "pickle":
        with open(path, "wb") as f:
            pickle.dump(buf, f, protocol=4)
    else:
        import namedschema
        namedschema.save(buf, path, allow_pickle=True)


def _load(method, path):
    if method == "pickle":
        with open(path, "rb") as f:
            return pickle.load(f)
    import namedschema
    return namedschema.load(path, allow_pickle=True)


def _maybe_patch(patch):
    if patch:
        import namedschema
        namedschema.patch_rlpyt()


def checkpoint_run(backend, kind, method, path, patch=True):
    """Train, checkpoint after CHECKPOINT_AT appends, go on to STOP_AT; print digests."""
    _maybe_patch(patch)
    spec = BACKENDS[backend][kind]
    buf = spec["make"]()
    _train(buf, spec, 0, CHECKPOINT_AT)
    _save(buf, method, path)
    twin = _train(buf, spec, CHECKPOINT_AT, STOP_AT)
    print(json.dumps({"twin": twin}))


def resume_run(backend, kind, method, path, patch=True, construct_first=True):
    """Like the training script: patch, build as usual, restore, continue; print digests."""
    _maybe_patch(patch)
    spec = BACKENDS[backend][kind]
    if construct_first:
        spec["make"]()  # assigns rlpyt's lazily initialised module globals
    buf = _load(method, path)
    resumed = _train(buf, spec, CHECKPOINT_AT, STOP_AT)
    print(json.dumps({"resumed": resumed}))


def read_run(method, path):
    """Load a checkpoint with no patch and no buffer built; print what it holds."""
    buf = _load(method, path)
    samples = buf.samples
    print(json.dumps({
        "patched": "namedschema.rlpyt_compat" in sys.modules,
        "buffer": type(buf).__name__,
        "samples_type": type(samples).__name__,
        "schema": type(type(samples)).__name__,
        "fields": list(samples._fields),
        "reward_sum": float(np.asarray(samples.reward, dtype=np.float64).sum()),
        "t": int(buf.t),
    }))
