#!/usr/bin/env python3
"""What verify-on-restore costs: ``RunCheckpoint.restore`` with and without ``verify``, same run.

A DQN for Atari as the checkpoint holds it: the Nature CNN Q-network (1.7 M
parameters) and its target, Adam, a replay buffer of ``--rows`` 84x84 uint8
frames (10,000 by default: 71 MiB of frames), a generator and counters. The
checkpoint is saved once; each round restores it into a freshly built run with
``verify=True`` (the default since issue 34: every block's CRC-32 checked, and the
whole file checked against the run, before anything changes) and with
``verify=False`` (the structural checks only), alternating, and times each
restore. Prints the medians, their ratio and difference.

    python benchmarks/bench_run_checkpoint_restore.py [--rounds 7] [--rows 10000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import torch

import namedschema

Frame = namedschema.NamedArrayTupleSchema("AtariStep", "obs action reward done")


def nature_cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(4, 32, 8, stride=4), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 4, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, stride=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(3136, 512), torch.nn.ReLU(), torch.nn.Linear(512, 6))


def build(path: str, rows: int, verify: bool = True):
    torch.manual_seed(0)
    q, target = nature_cnn(), nature_cnn()
    opt = torch.optim.Adam(q.parameters(), lr=1e-4)
    example = Frame(np.zeros((84, 84), np.uint8), np.int64(0), np.float32(0), np.bool_(False))
    rb = namedschema.ReplayBuffer(example, rows, seed=0)
    run = {"q": q, "target": target, "opt": opt, "rb": rb,
           "rng": np.random.default_rng(0), "counters": {"episodes": 0}}
    ckpt = namedschema.RunCheckpoint(path, verify=verify, background=False, quiet=True,
                                     global_rngs=False).track(**run)
    return ckpt, run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = os.path.join(folder, "run.nsc")
        ckpt, run = build(path, args.rows)
        q, opt = run["q"], run["opt"]
        q(torch.zeros(1, 4, 84, 84)).sum().backward()
        opt.step()
        rng = np.random.default_rng(1)
        frames = rng.integers(0, 255, (args.rows, 84, 84), dtype=np.uint8)
        run["rb"].extend(Frame(frames, np.zeros(args.rows, np.int64),
                               np.zeros(args.rows, np.float32), np.zeros(args.rows, bool)))
        ckpt.save(1000)
        size = os.path.getsize(path)
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for verify in (True, False):
                fresh, _run = build(path, args.rows, verify=verify)
                start = time.perf_counter()
                assert fresh.restore()
                times[verify].append(time.perf_counter() - start)
    with_verify, without = (statistics.median(times[v]) for v in (True, False))
    print(f"checkpoint {size / 2**20:.1f} MiB ({args.rows:,} frames, Nature CNN x2, Adam); "
          f"{args.rounds} rounds, median restore:")
    print(f"  verify=True  {with_verify * 1e3:8.1f} ms   (worst {max(times[True]) * 1e3:.1f})")
    print(f"  verify=False {without * 1e3:8.1f} ms   (worst {max(times[False]) * 1e3:.1f})")
    print(f"  ratio {with_verify / without:.2f}, verify costs "
          f"{(with_verify - without) * 1e3:.1f} ms "
          f"({size / 2**20 / max(with_verify - without, 1e-9):.0f} MiB/s of checksums)")


if __name__ == "__main__":
    main()
