#!/usr/bin/env python3
"""What the value and field-name checks cost ``ReplayBuffer.extend`` (issue 34, item 3).

One Atari-like batch (``--rows`` steps, 10,000 by default: two uint8 frame
stacks of 4x84x84, an int64 action into an int32 field, a float64 reward into a
float32 field, a bool done) is written into a buffer of the same capacity, again
and again. The reference, measured in the same run on the same arrays, is what
``extend`` did before the checks: numpy slice assignment of every field. Printed
as a ratio (lower is better; 1.0 means the checks cost nothing measurable), with
the medians of ``--repeat`` interleaved runs. ``--wide-frames`` gives the frames as
uint16 (the worst case: every element of the large fields is range-checked).

Usage:

    python benchmarks/bench_replay_extend_checks.py [--rows N] [--repeat K] [--wide-frames]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import namedschema

Transition = namedschema.NamedArrayTupleSchema("BenchTransition",
                                               "obs next_obs action reward done")


def example() -> Transition:
    frames = np.zeros((4, 84, 84), np.uint8)
    return Transition(frames, frames.copy(), np.int32(0), np.float32(0), np.bool_(False))


def batch(rows: int, wide: bool) -> Transition:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (rows, 4, 84, 84), dtype=np.uint16 if wide else np.uint8)
    return Transition(frames, np.roll(frames, 1, axis=0), rng.integers(0, 18, rows),
                      rng.standard_normal(rows), rng.random(rows) < 0.01)


def plain_assignment(storage: Transition, data: Transition) -> None:
    """The reference: what extend did before it checked values and names."""
    n = len(data.obs)
    for stored, value in zip(storage, data, strict=True):
        stored[:n] = value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--wide-frames", action="store_true")
    args = parser.parse_args(argv)
    data = batch(args.rows, args.wide_frames)
    rb = namedschema.ReplayBuffer(example(), args.rows, seed=0)
    reference = namedschema.ReplayBuffer(example(), args.rows, seed=0)
    timings: dict[str, list[float]] = {"extend": [], "reference": []}
    for _ in range(args.repeat):
        start = time.perf_counter()
        rb.extend(data)
        timings["extend"].append(time.perf_counter() - start)
        start = time.perf_counter()
        plain_assignment(reference.storage, data)
        timings["reference"].append(time.perf_counter() - start)
    for a, b in zip(rb.storage, reference.storage, strict=True):
        assert np.array_equal(a, b)
    ext, ref = (statistics.median(timings[k]) for k in ("extend", "reference"))
    mb = sum(np.asarray(v).nbytes for v in data) / 2**20
    print(f"extend of {args.rows} Atari-like rows ({mb:.0f} MiB given): {ext * 1e3:.1f} ms, "
          f"plain numpy assignment {ref * 1e3:.1f} ms, ratio {ext / ref:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
