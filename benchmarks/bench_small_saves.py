#!/usr/bin/env python3
"""Stall of a small ``RunCheckpoint`` save (CartPole DQN size) against ``torch.save``, same run.

A 4-120-84-2 Q-network and its target, Adam, a 10,000-step CartPole replay
buffer (about 0.6 MiB in all), in a process of about 320 MiB (``--ballast``).
Each round adds 50 steps, nudges the weights, then times
``RunCheckpoint.save`` (background, incremental: how long the loop is held)
and ``torch.save`` of the same state dicts to a file of its own. Prints the
median and worst stalls and their ratio (issue 30: target at most 5 ms, a
small checkpoint no dearer than ``torch.save``).

    python benchmarks/bench_small_saves.py [--rounds 40] [--ballast-mib 300] [--dir DIR]
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--ballast-mib", type=int, default=300)
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    ballast = np.ones(args.ballast_mib * 2**20 // 8)      # the rest of a training process
    step_schema = namedschema.NamedArrayTupleSchema("Step", "obs next_obs action reward done")
    example = step_schema(np.zeros(4, np.float32), np.zeros(4, np.float32), np.int64(0),
                          np.float32(0), np.bool_(False))
    rb = namedschema.ReplayBuffer(example, 10_000, seed=0)

    def mlp() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(4, 120), torch.nn.ReLU(),
                                   torch.nn.Linear(120, 84), torch.nn.ReLU(),
                                   torch.nn.Linear(84, 2))
    q, target = mlp(), mlp()
    opt = torch.optim.Adam(q.parameters())
    q(torch.zeros(1, 4)).sum().backward()
    opt.step()
    rng = np.random.default_rng(0)
    directory = args.dir or tempfile.mkdtemp(prefix="bench-small-")
    path, ref = os.path.join(directory, "run.nsc"), os.path.join(directory, "ref.pt")
    ckpt = namedschema.RunCheckpoint(path, every_steps=1)
    ckpt.track(q=q, target=target, optimizer=opt, replay=rb)
    ours, theirs = [], []
    for r in range(args.rounds):
        for _ in range(50):
            rb.add(step_schema(rng.random(4, np.float32), rng.random(4, np.float32),
                               np.int64(1), np.float32(1), np.bool_(False)))
        with torch.no_grad():
            for w in q.parameters():
                w.add_(1e-3)
        began = time.perf_counter()
        ckpt.save(r)
        ours.append(time.perf_counter() - began)
        time.sleep(0.05)                                  # training between checkpoints
        began = time.perf_counter()
        torch.save({"q": q.state_dict(), "target": target.state_dict(),
                    "optimizer": opt.state_dict(), "replay": rb.state_dict()}, ref)
        theirs.append(time.perf_counter() - began)
    ckpt.wait()
    del ballast
    ours, theirs = ours[2:], theirs[2:]                   # the first saves are full
    mo, mt = statistics.median(ours), statistics.median(theirs)
    print(f"state: {os.path.getsize(path) / 2**20:.2f} MiB (torch.save: "
          f"{os.path.getsize(ref) / 2**20:.2f} MiB)")
    print(f"RunCheckpoint.save stall: median {1e3 * mo:.1f} ms, worst {1e3 * max(ours):.1f} ms")
    print(f"torch.save:               median {1e3 * mt:.1f} ms, worst {1e3 * max(theirs):.1f} ms")
    print(f"ratio (median stall / torch.save): {mo / mt:.2f}")


if __name__ == "__main__":
    main()
