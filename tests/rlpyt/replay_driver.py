"""One training script for the resume scenario, run against rlpyt (real or its stand-in).

Each function is meant to run in its own fresh interpreter (see
``tests/helpers.run_fresh``): build a replay buffer, feed it deterministic
samples, sample batches with a fixed seed, checkpoint it, and resume from the
checkpoint. Batches are compared through digests of their bytes. Nothing here
imports rlpyt at module import time.

BUFFERS           rlpyt replay buffer class name -> how to build and feed it
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


def _example_type(with_rnn: bool, with_timeout: bool = False):
    from rlpyt.utils.collections import namedarraytuple
    fields = ["observation", "action", "reward", "done"]
    fields += ["prev_rnn_state"] if with_rnn else []
    fields += ["timeout"] if with_timeout else []
    return namedarraytuple("SamplesToBuffer", fields)


def _samples(step: int, frames: bool, with_rnn: bool, leading=(T_APPEND, B),
             with_timeout: bool = False):
    """The deterministic samples of append number ``step``."""
    rng = np.random.default_rng(1000 + step)
    obs_shape = (N_FRAMES, H, W) if frames else (H, W)
    values = [rng.integers(0, 255, size=leading + obs_shape, dtype=np.uint8),
              rng.integers(0, 4, size=leading).astype(np.int64),
              rng.standard_normal(leading).astype(np.float32),
              rng.random(leading) < 0.1]
    if with_rnn:
        values.append(rng.standard_normal(leading + (3,)).astype(np.float32))
    if with_timeout:
        values.append(rng.random(leading) < 0.05)
    return _example_type(with_rnn, with_timeout)(*values)


def _example(frames, with_rnn, with_timeout=False):
    return _samples(0, frames, with_rnn, with_timeout=with_timeout)[0, 0]


def _buffer(cls_path, frames=False, seq=False, prioritized=False, tl=False):
    def make():
        module, name = cls_path.rsplit(".", 1)
        cls = getattr(__import__(module, fromlist=[name]), name)
        kwargs = dict(example=_example(frames, seq, tl), size=SIZE, B=B, discount=0.99,
                      n_step_return=2)
        if seq:
            kwargs.update(rnn_state_interval=2, batch_T=4)
        return cls(**kwargs)
    return dict(make=make, frames=frames, seq=seq, prioritized=prioritized, tl=tl,
                path=cls_path)


# The stand-in rlpyt (tests/rlpyt/fake_rlpyt.py) has the first four, with the same names.
BUFFERS = {
    "UniformReplayBuffer": _buffer("rlpyt.replays.non_sequence.uniform.UniformReplayBuffer"),
    "PrioritizedReplayBuffer": _buffer(
        "rlpyt.replays.non_sequence.prioritized.PrioritizedReplayBuffer",
        prioritized=True),
    "UniformReplayFrameBuffer": _buffer(
        "rlpyt.replays.non_sequence.frame.UniformReplayFrameBuffer", frames=True),
    "PrioritizedReplayFrameBuffer": _buffer(
        "rlpyt.replays.non_sequence.frame.PrioritizedReplayFrameBuffer",
        frames=True, prioritized=True),
    "UniformSequenceReplayBuffer": _buffer(
        "rlpyt.replays.sequence.uniform.UniformSequenceReplayBuffer", seq=True),
    "PrioritizedSequenceReplayBuffer": _buffer(
        "rlpyt.replays.sequence.prioritized.PrioritizedSequenceReplayBuffer",
        seq=True, prioritized=True),
    "UniformSequenceReplayFrameBuffer": _buffer(
        "rlpyt.replays.sequence.frame.UniformSequenceReplayFrameBuffer",
        frames=True, seq=True),
    "PrioritizedSequenceReplayFrameBuffer": _buffer(
        "rlpyt.replays.sequence.frame.PrioritizedSequenceReplayFrameBuffer",
        frames=True, seq=True, prioritized=True),
    "TlUniformReplayBuffer": _buffer(
        "rlpyt.replays.non_sequence.time_limit.TlUniformReplayBuffer", tl=True),
    # (TlPrioritizedReplayBuffer is left out: rlpyt's own sample_batch fails
    # for it, SamplesFromReplayPri gets is_weights twice.)
}


# Every rlpyt replay buffer has an async twin class in the same module.
BUFFERS.update({
    "Async" + kind: _buffer(spec["path"].replace("." + kind, ".Async" + kind),
                            frames=spec["frames"], seq=spec["seq"],
                            prioritized=spec["prioritized"], tl=spec["tl"])
    for kind, spec in list(BUFFERS.items())})


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
        buf.append_samples(_samples(step, spec["frames"], spec["seq"],
                                    with_timeout=spec.get("tl", False)))
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
    """method: "pickle" (protocol 4), "pickleN" (protocol N) or "save"."""
    if method.startswith("pickle"):
        with open(path, "wb") as f:
            pickle.dump(buf, f, protocol=int(method[6:] or 4))
    else:
        import namedschema
        namedschema.save(buf, path, allow_pickle=True)


def _load(method, path):
    if method.startswith("pickle"):
        with open(path, "rb") as f:
            return pickle.load(f)
    import namedschema
    return namedschema.load(path, allow_pickle=True)


def _maybe_patch(patch):
    """``patch``: False, True, or a dict of ``patch_rlpyt`` keyword arguments."""
    if patch:
        import namedschema
        namedschema.patch_rlpyt(**(patch if isinstance(patch, dict) else {}))


def checkpoint_run(kind, method, path, patch=True):
    """Train, checkpoint after CHECKPOINT_AT appends, go on to STOP_AT; print digests."""
    _maybe_patch(patch)
    spec = BUFFERS[kind]
    buf = spec["make"]()
    _train(buf, spec, 0, CHECKPOINT_AT)
    _save(buf, method, path)
    twin = _train(buf, spec, CHECKPOINT_AT, STOP_AT)
    print(json.dumps({"twin": twin}))


def resume_run(kind, method, path, patch=True, construct_first=True):
    """Like the training script: patch, build as usual, restore, continue; print digests."""
    _maybe_patch(patch)
    spec = BUFFERS[kind]
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
        # Loading may import the patch's pickling helpers; the patch must stay off.
        "patched": bool(getattr(sys.modules.get("namedschema.rlpyt.patch"), "is_patched",
                                lambda: False)()),
        "buffer": type(buf).__name__,
        "samples_type": type(samples).__name__,
        "schema": type(type(samples)).__name__,
        "fields": list(samples._fields),
        "reward_sum": float(np.asarray(samples.reward, dtype=np.float64).sum()),
        "t": int(buf.t),
    }))


def _arrays_of(obj, path, out, depth=0):
    """(path, array) of every ndarray in an object's attributes, tuples and dicts."""
    if isinstance(obj, np.ndarray):
        out.append((path, obj))
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        for name, value in zip(obj._fields, obj, strict=False):
            _arrays_of(value, f"{path}.{name}", out, depth + 1)
    elif isinstance(obj, dict):
        for name, value in obj.items():
            _arrays_of(value, f"{path}.{name}", out, depth + 1)
    elif hasattr(obj, "__dict__") and depth < 3 and type(obj).__module__.startswith("rlpyt"):
        for name, value in sorted(vars(obj).items()):
            _arrays_of(value, f"{path}.{name}" if path else name, out, depth + 1)
    return out


def memory_report(buf):
    """Which arrays share memory, how many bytes they cover, which are shared memory."""
    from namedschema.buffer import is_shared_memory
    arrays = _arrays_of(buf, "", [])
    groups = []
    for path, arr in arrays:
        for group in groups:
            if np.shares_memory(arr, group[0][1]):
                group.append((path, arr))
                break
        else:
            groups.append([(path, arr)])
    spans = []
    for _path, arr in arrays:
        lo = arr.__array_interface__["data"][0]
        spans.append((lo, lo + arr.nbytes))
    covered, end = 0, None
    for lo, hi in sorted(spans):
        if end is None or lo >= end:
            covered += hi - lo
            end = hi
        elif hi > end:
            covered += hi - end
            end = hi
    return {"groups": sorted(sorted(p for p, _a in g) for g in groups if len(g) > 1),
            "bytes": covered,
            "shared": sorted(p for p, a in arrays if is_shared_memory(a)),
            "writeable": sorted(p for p, a in arrays if a.flags.writeable)}


def many_checkpoint_run(kinds, methods, directory, patch=True):
    """checkpoint_run for several kinds and save methods in one process.

    Prints {"kind/method": {"twin": digests, "memory": memory_report}} (or
    {"error": text}), so one failure hides no other.
    """
    import os
    _maybe_patch(patch)
    results = {}
    for kind in kinds:
        try:
            spec = BUFFERS[kind]
            buf = spec["make"]()
            _train(buf, spec, 0, CHECKPOINT_AT)
            errors = {}
            for method in methods:
                try:
                    _save(buf, method, os.path.join(directory, f"{kind}.{method}"))
                except Exception as exc:
                    errors[method] = f"{type(exc).__name__}: {exc}"
            memory = memory_report(buf)
            twin = _train(buf, spec, CHECKPOINT_AT, STOP_AT)
            for method in methods:
                results[f"{kind}/{method}"] = (
                    {"error": errors[method]} if method in errors
                    else {"twin": twin, "memory": memory})
        except Exception as exc:
            for method in methods:
                results[f"{kind}/{method}"] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(results))


def many_resume_run(kinds, methods, directory, patch=True, construct_first=True):
    """resume_run for every file many_checkpoint_run wrote; prints the same keys."""
    import os
    _maybe_patch(patch)
    results = {}
    for kind in kinds:
        spec = BUFFERS[kind]
        if construct_first:
            spec["make"]()  # assigns rlpyt's lazily initialised module globals
        for method in methods:
            try:
                buf = _load(method, os.path.join(directory, f"{kind}.{method}"))
                memory = memory_report(buf)
                results[f"{kind}/{method}"] = {
                    "resumed": _train(buf, spec, CHECKPOINT_AT, STOP_AT),
                    "memory": memory, "type": type(buf).__name__}
            except Exception as exc:
                results[f"{kind}/{method}"] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(results))


def _appender(kind, buf, go, done):
    """Child process: append the samples of each step number received on ``go``."""
    _maybe_patch(True)
    spec = BUFFERS[kind]
    spec["make"]()  # a spawn child's rlpyt globals (BufferSamples...) start as None
    while True:
        step = go.get()
        if step is None:
            return
        buf.append_samples(_samples(step, spec["frames"], spec["seq"],
                                    with_timeout=spec.get("tl", False)))
        done.put(step)


def many_async_child_run(kinds, method, directory, start_method):
    """Load async buffers, let a child process append while this one samples.

    The child writes through the loaded buffer's shared memory, lock and
    shared cursor; this process must see every write, so its batches equal the
    uninterrupted twin's. Prints {"kind/method": {"resumed": digests}}.
    """
    import multiprocessing as mp
    import os
    _maybe_patch(True)
    # As a script using spawn would: locks made on load then belong to it.
    mp.set_start_method(start_method, force=True)
    ctx = mp.get_context()
    results = {}
    for kind in kinds:
        key = f"{kind}/{method}"
        try:
            spec = BUFFERS[kind]
            spec["make"]()
            buf = _load(method, os.path.join(directory, key.replace("/", ".")))
            go, done = ctx.Queue(), ctx.Queue()
            child = ctx.Process(target=_appender, args=(kind, buf, go, done))
            child.start()
            digests = []
            try:
                for step in range(CHECKPOINT_AT, STOP_AT):
                    go.put(step)
                    done.get(timeout=120)
                    np.random.seed(step)
                    batch = buf.sample_batch(BATCH_B)
                    digests.append(_digest(batch))
                    if spec["prioritized"]:
                        new = np.random.default_rng(step).random(BATCH_B) + 0.1
                        buf.update_batch_priorities(new)
            finally:
                go.put(None)
                child.join(60)
            results[key] = {"resumed": digests, "exitcode": child.exitcode}
        except Exception as exc:
            results[key] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(results))
