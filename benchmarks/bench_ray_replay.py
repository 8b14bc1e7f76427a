"""Throughput of namedschema.ray.ShardedReplay against one local ReplayBuffer, and the
cost of its checkpoints, on a local Ray cluster.

    python benchmarks/bench_ray_replay.py [--rows 20000] [--shards 1,2,4] [--out FILE]

Rows are Atari-like steps (a 4x84x84 uint8 frame stack, action, reward). Figures are
rows per second (extend: batches of 64; sample: batches of 64 with priorities) and
the ratio against a local ``namedschema.PrioritizedReplayBuffer`` measured in the same
run; checkpoint rows give the first (full) checkpoint and one after 1% new rows (the
third: generations alternate between two slots of shard files, so a save writes what
changed since the save two generations before).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402

import namedschema  # noqa: E402

Step = namedschema.NamedArrayTupleSchema("Step", "obs action reward")
EXAMPLE = Step(np.zeros((4, 84, 84), np.uint8), np.int64(0), np.float32(0))
BATCH = 64


def batches(count: int) -> list:
    rng = np.random.default_rng(0)
    return [Step(rng.integers(0, 255, (BATCH, 4, 84, 84), np.uint8),
                 rng.integers(0, 6, BATCH), rng.random(BATCH, np.float32))
            for _ in range(count)]


def timed(fn, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return time.perf_counter() - start


def local(rows: int, data: list) -> tuple[float, float]:
    rb = namedschema.PrioritizedReplayBuffer(EXAMPLE, rows, seed=0)
    n = len(data)
    ext = timed(lambda: [rb.extend(b) for b in data], 1) / (n * BATCH)
    smp = timed(lambda: rb.sample(BATCH), 200) / (200 * BATCH)
    return 1 / ext, 1 / smp


def sharded(rows: int, shards: int, data: list, directory: str) -> dict:
    from namedschema.ray import ShardedReplay
    r = ShardedReplay(EXAMPLE, rows, num_shards=shards, prioritized=True, seed=0)
    n = len(data)

    def fill():
        for b in data:
            r.extend(b)
        r.flush()

    ext = timed(fill, 1) / (n * BATCH)
    smp = timed(lambda: r.sample(BATCH), 100) / (100 * BATCH)
    first = r.checkpoint(directory)        # slot 1: a full save
    r.checkpoint(directory)                # slot 0: a full save
    for b in data[: max(1, n // 100)]:
        r.extend(b)
    later = r.checkpoint(directory)        # slot 1 again: what changed since the first
    r.close()
    return {"extend": 1 / ext, "sample": 1 / smp, "first": first, "later": later}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--shards", default="1,2,4")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()
    import ray
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR",
             object_store_memory=512 * 2**20)
    data = batches(max(1, args.rows // BATCH))
    base_ext, base_smp = local(args.rows, data)
    row_bytes = sum(np.asarray(v).nbytes for v in EXAMPLE)
    lines = [f"{args.rows} rows of {row_bytes / 1024:.1f} KiB "
             f"({args.rows * row_bytes / 2**20:.0f} MiB); local PrioritizedReplayBuffer: "
             f"extend {base_ext:,.0f} rows/s, sample {base_smp:,.0f} rows/s",
             "",
             "shards  extend rows/s (x local)  sample rows/s (x local)  "
             "first checkpoint  after 1% new rows",
             "------  ----------------------  ----------------------  "
             "----------------  -----------------"]
    for shards in (int(s) for s in args.shards.split(",")):
        directory = tempfile.mkdtemp(prefix="bench-ray-")
        try:
            got = sharded(args.rows, shards, data, directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        first, later = got["first"], got["later"]
        lines.append(
            f"{shards:>6}  {got['extend']:>12,.0f} ({got['extend'] / base_ext:4.2f}x)  "
            f"{got['sample']:>12,.0f} ({got['sample'] / base_smp:4.2f}x)  "
            f"{first.seconds:6.2f} s {first.bytes / 2**20:5.0f} MiB  "
            f"{later.seconds:6.2f} s (held {later.held_seconds:.2f} s)")
    ray.shutdown()
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
