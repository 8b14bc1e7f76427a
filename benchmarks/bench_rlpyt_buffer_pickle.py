#!/usr/bin/env python3
"""Plain pickle of real rlpyt replay buffers under patch_rlpyt(): indexing cost and size.

For a ``PrioritizedReplayFrameBuffer`` (4 frames of 84x84 uint8, the Atari
setting) and a ``PrioritizedSequenceReplayBuffer``, three copies of one filled
buffer are measured in the same process:

built     the buffer as rlpyt constructed it (the reference)
patched   after ``pickle.loads(pickle.dumps(buf))`` with the patch's
          view-keeping reduction (arrays rebuilt as views of their bases)
default   after the same round trip with pickle's default reduction (views
          copied apart: what plain pickle gave before; it trains wrong, it is
          here only as the cost of indexing a loaded buffer without the fix)

Indexing: ``sample_batch``, ``extract_batch`` at fixed indices,
``append_samples``, ``update_batch_priorities``, and bare array reads/writes
(``samples[idxs]``, ``samples_frames[t:t + 4, b]``, ``priorities[...]``), as
best time per call, interleaved; ratios against ``default``, target for
``patched`` <= 1.05. ``built`` can be faster than both loaded copies at
random access into large arrays: numpy asks for transparent huge pages for
the memory it allocates, and unpickled arrays live in memory that pickle
allocated, whatever the reduction.
Pickle: size, ``dumps`` and ``loads`` time of ``patched`` against ``default``.

    RLPYT_SRC=/path/to/rlpyt python benchmarks/bench_rlpyt_buffer_pickle.py [--quick] [--json FILE]
"""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np

# This checkout (its root is above this folder): its benchmarks.suite and namedschema.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _setup_rlpyt():
    root = os.environ.get("RLPYT_SRC")
    if not root or not os.path.isdir(os.path.join(root, "rlpyt")):
        sys.exit("set RLPYT_SRC to an rlpyt source tree (the directory holding rlpyt/)")
    sys.path.append(root)
    import namedschema
    namedschema.patch_rlpyt()


def _default_round_trip(buf):
    return pickle.loads(_default_dumps(buf))


def _frame_buffer(size, B):
    from rlpyt.replays.non_sequence.frame import PrioritizedReplayFrameBuffer
    from rlpyt.utils.collections import namedarraytuple
    S = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])
    rng = np.random.default_rng(0)

    def samples(T):
        return S(rng.integers(0, 255, (T, B, 4, 84, 84), dtype=np.uint8),
                 rng.integers(0, 6, (T, B)), rng.standard_normal((T, B)).astype(np.float32),
                 rng.random((T, B)) < 0.01)
    buf = PrioritizedReplayFrameBuffer(example=samples(1)[0, 0], size=size, B=B,
                                       discount=0.99, n_step_return=3)
    return buf, samples


def _sequence_buffer(size, B):
    from rlpyt.replays.sequence.prioritized import PrioritizedSequenceReplayBuffer
    from rlpyt.utils.collections import namedarraytuple
    S = namedarraytuple("SamplesToBuffer",
                        ["observation", "action", "reward", "done", "prev_rnn_state"])
    rng = np.random.default_rng(1)

    def samples(T):
        return S(rng.standard_normal((T, B, 16)).astype(np.float32),
                 rng.integers(0, 6, (T, B)), rng.standard_normal((T, B)).astype(np.float32),
                 rng.random((T, B)) < 0.01,
                 rng.standard_normal((T, B, 32)).astype(np.float32))
    buf = PrioritizedSequenceReplayBuffer(example=samples(1)[0, 0], size=size, B=B,
                                          discount=0.99, n_step_return=3,
                                          rnn_state_interval=20, batch_T=40)
    return buf, samples


def _fill(buf, samples, T_append):
    for _ in range(buf.T // T_append + 2):  # wraps the cursor
        buf.append_samples(samples(T_append))


def _contenders(kind, buf, samples):
    """name -> {operation: zero-argument callable} for the three copies."""
    copies = {"default": _default_round_trip(buf),
              "patched": pickle.loads(pickle.dumps(buf, protocol=5)),
              "built": buf}
    rng = np.random.default_rng(2)
    T_idxs = rng.integers(50, buf.T - 50, 32)
    B_idxs = rng.integers(0, buf.B, 32)
    chunk = samples(4)
    new_priorities = rng.random(32) + 0.1
    ops = {}
    for name, b in copies.items():
        def sample(b=b):
            np.random.seed(0)
            b.sample_batch(32)
            b.update_batch_priorities(new_priorities)

        o = {"sample_batch+update": sample,
             "append_samples": lambda b=b: b.append_samples(chunk),
             "samples[idxs]": lambda b=b: b.samples[T_idxs, B_idxs],
             "priorities[t, b] = p": lambda b=b: b.priority_tree.priorities.__setitem__(
                 (T_idxs // 20 if kind == "sequence" else T_idxs, B_idxs), 1.0)}
        if kind == "frame":
            o["extract_batch"] = lambda b=b: b.extract_batch(T_idxs, B_idxs)
            o["samples_frames[t:t+4, b]"] = lambda b=b: b.samples_frames[100:104, 0]
        else:
            o["extract_batch"] = lambda b=b: b.extract_batch(T_idxs // 20 * 20, B_idxs, 40)
        ops[name] = o
    return copies, ops


def main(argv=None) -> int:
    from benchmarks.suite import best_of, best_times, compare, finish, topic_parser
    parser = topic_parser("rlpyt_buffer_pickle", __doc__.split("\n\n")[0],
                          ("frame", "sequence"))
    args = parser.parse_args(argv)
    _setup_rlpyt()
    size = 20_000 if args.quick else 200_000
    repeat = 3 if args.quick else 7
    rows, notes = [], []
    for kind in args.cases:
        make = _frame_buffer if kind == "frame" else _sequence_buffer
        buf, samples = make(size, 2 if kind == "frame" else 8)
        _fill(buf, samples, 40)
        copies, ops = _contenders(kind, buf, samples)
        for op in ops["default"]:
            times = best_times({name: ops[name][op] for name in copies}, repeat=repeat)
            rows += compare(f"{kind}: {op}", "time", "us", times, "default",
                            {"patched": "<= 1.05"}, scale=1e6)
        default_blob = _default_dumps(buf)
        blob = pickle.dumps(buf, protocol=5)
        sizes = {"default": len(default_blob), "patched": len(blob)}
        rows += compare(f"{kind}: pickle", "size", "MB", sizes, "default",
                        {"patched": "<= 1.0"}, scale=1e-6)
        dumps = {"default": best_of(lambda b=buf: _default_dumps(b), repeat=3),
                 "patched": best_of(lambda b=buf: pickle.dumps(b, protocol=5), repeat=3)}
        rows += compare(f"{kind}: pickle", "dumps", "ms", dumps, "default", scale=1e3)
        loads = {"default": best_of(lambda d=default_blob: pickle.loads(d), repeat=3),
                 "patched": best_of(lambda d=blob: pickle.loads(d), repeat=3)}
        rows += compare(f"{kind}: pickle", "loads", "ms", loads, "default", scale=1e3)
        notes.append(f"{kind}: {type(buf).__name__}, size {buf.size}, B {buf.B}")
    return finish("rlpyt_buffer_pickle", args, rows, notes)


def _default_dumps(buf):
    from rlpyt.replays.base import BaseReplayBuffer
    from rlpyt.replays.sum_tree import SumTree
    saved = [(cls, cls.__dict__["__reduce_ex__"]) for cls in (BaseReplayBuffer, SumTree)]
    try:
        for cls, _ in saved:
            del cls.__reduce_ex__
        return pickle.dumps(buf, protocol=5)
    finally:
        for cls, method in saved:
            cls.__reduce_ex__ = method


if __name__ == "__main__":
    sys.exit(main())
