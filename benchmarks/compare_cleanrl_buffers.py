#!/usr/bin/env python3
"""CleanRL's dqn_atari state, checkpointed by RunCheckpoint, with each of its two buffers.

The two buffer routes of examples/cleanrl_dqn_atari.py, at ``--transitions`` (5,000 by
default) Pong-shaped transitions (``uint8 (4, 84, 84)`` frame stacks, 6 actions):

* ``sb3``: Stable-Baselines3's ``ReplayBuffer`` as CleanRL builds it
  (``optimize_memory_usage=True``: each frame stack stored once, the next observation is
  the next row), tracked as it is (``ckpt.track(rb=rb)``);
* ``namedschema``: ``examples/cleanrl_namedschema_buffer.ReplayBuffer`` (SB3's interface
  over ``namedschema.ReplayBuffer``) as CleanRL builds it, ``optimize_memory_usage=True``:
  the frames-once mode (``frames_once=("observations", "next_observations")``);
* ``namedschema-plain``: the same with ``optimize_memory_usage=False`` (next observations
  in their own field), for reference.

Each route runs in a fresh child process that builds the run's state as the script does
(Nature CNN Q-network and target, Adam after one step, the buffer filled with
``--transitions`` transitions of seeded random frames) and saves a RunCheckpoint with
the example's settings (incremental, in the background; a run's first save returns only
once written), then adds 100 transitions, takes one Adam step and saves again. Reported:
the buffer's array bytes, the process's resident memory before the first save, the
first save's time, the time the next save blocked the loop and the time until it was on
disk, and the file's size after the first save;
then the ratio of each namedschema route to sb3, from the same run. (What the background
writer adds is in its fork, copy-on-write; this script does not measure it.)

Usage: python benchmarks/compare_cleanrl_buffers.py [--transitions 5000]
(columns: sb3, namedschema, namedschema-plain; ratios: namedschema / sb3 and
namedschema-plain / sb3)
Needs: torch, gymnasium, stable-baselines3.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r'''
import json, os, sys, time
import numpy as np, torch
from gymnasium import spaces
import namedschema
route, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1); torch.manual_seed(1)
obs_space, act_space = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6)
if route == "sb3":
    from stable_baselines3.common.buffers import ReplayBuffer
else:
    sys.path.insert(0, os.path.join(sys.argv[4], "examples"))
    from cleanrl_namedschema_buffer import ReplayBuffer
rb = ReplayBuffer(n, obs_space, act_space, "cpu", optimize_memory_usage=route != "namedschema-plain",
                  handle_timeout_termination=False)
def net():
    return torch.nn.Sequential(
        torch.nn.Conv2d(4, 32, 8, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 4, stride=2),
        torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, stride=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(3136, 512), torch.nn.ReLU(), torch.nn.Linear(512, 6))
q, target = net(), net()
optimizer = torch.optim.Adam(q.parameters(), lr=1e-4)
rng = np.random.default_rng(0)
frames = rng.integers(0, 256, (n + 101, 1, 4, 84, 84), np.uint8)
def fill(a, b):
    for i in range(a, b):
        rb.add(frames[i], frames[i + 1], np.array([i % 6]), np.array([0.0]), np.array([0.0]), [{}])
def learn():
    data = rb.sample(32)
    loss = q(data.observations.float()).gather(1, data.actions.long()).mean()
    optimizer.zero_grad(); loss.backward(); optimizer.step()
fill(0, n)
learn()
if route == "sb3":
    arrays = list(vars(rb).values())
else:   # the storage, the pool of next observations and its index (frames-once)
    once = rb.buffer._frames
    arrays = list(rb.buffer.storage) + ([] if once is None else
                                        [once.pool, once.owner, once.slot])
nbytes = sum(v.nbytes for v in arrays if isinstance(v, np.ndarray))
with open("/proc/self/statm") as f:
    before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
ckpt = namedschema.RunCheckpoint(path, every_steps=10000)
ckpt.track(q_network=q, target_network=target, optimizer=optimizer, rb=rb)
began = time.perf_counter()
ckpt.save(n, obs=np.zeros((1, 4, 84, 84), np.uint8))   # a run's first save returns once written
first = time.perf_counter() - began
file_bytes = os.path.getsize(path)
fill(n, n + 100)          # 100 more steps (the ring wraps) and one update, then the next save
learn()
began = time.perf_counter()
ckpt.save(n + 100, obs=np.zeros((1, 4, 84, 84), np.uint8))
stall = time.perf_counter() - began
ckpt.wait()
total = time.perf_counter() - began
print(json.dumps({"buffer_bytes": nbytes, "rss_before": before, "first_s": first,
                  "stall_s": stall, "on_disk_s": total, "file_bytes": file_bytes}))
'''

ROUTES = ("sb3", "namedschema", "namedschema-plain")
COLUMNS = [("buffer_bytes", "buffer arrays (MiB)", 2 ** 20), ("rss_before", "RSS before (MiB)", 2 ** 20),
           ("first_s", "first save (s)", 1), ("stall_s", "next save blocked (s)", 1),
           ("on_disk_s", "next save on disk (s)", 1),
           ("file_bytes", "checkpoint file (MiB)", 2 ** 20)]


def measure(route: str, transitions: int, folder: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", CHILD, route, os.path.join(folder, f"{route}.nsc"),
                           str(transitions), ROOT], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{route}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transitions", type=int, default=5000)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        results = {route: measure(route, args.transitions, folder) for route in ROUTES}
    print(f"{args.transitions} Pong transitions; ratio = namedschema route / sb3")
    print(f"{'':26}" + "".join(f"{r:>18}" for r in ROUTES) + f"{'ratio':>8}{'plain':>8}")
    for key, label, unit in COLUMNS:
        a, b, c = (results[r][key] for r in ROUTES)
        ratios = "".join(f"{x / a:8.2f}" if a else f"{'-':>8}" for x in (b, c))
        print(f"{label:26}{a / unit:18.2f}{b / unit:18.2f}{c / unit:18.2f}{ratios}")
    return results


if __name__ == "__main__":
    main()
