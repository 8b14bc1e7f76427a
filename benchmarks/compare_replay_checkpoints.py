#!/usr/bin/env python3
"""Checkpoint a replay buffer with each library's own mechanism; does the resume continue exactly?

For namedschema (``namedschema.save(rb.state_dict())``), SB3 (``save_to_pkl``, what
``save_replay_buffer`` calls) and TorchRL (``ReplayBuffer.dumps``/``loads``, with
``LazyTensorStorage``), on the same Atari-like transitions (``--capacity`` of them,
filled past the wrap):

* a child process builds, fills and samples the buffer (each library seeded as its
  docs say: its own generator for namedschema, ``np.random.seed`` for SB3,
  ``torch.manual_seed`` for TorchRL), saves it and records the save time, the file
  size and how much its peak RSS grew while saving; then it goes on (writes 8
  transitions, samples 3 batches) and records what it drew;
* a second child, a fresh process that seeds as the script would at its start, loads
  the checkpoint and does the same; "exact" means it drew and wrote the same.

Usage: python benchmarks/compare_replay_checkpoints.py [--capacity 3000]
Needs: pip install -e ".[bench]" (a library that is not installed is left out).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

CHILD = r'''
import hashlib, json, os, resource, sys, time
import numpy as np
lib, phase, path, capacity = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
OBS = (4, 84, 84)
rng = np.random.default_rng(0)

def chunk(n):
    return {"obs": rng.integers(0, 255, (n, *OBS), np.uint8),
            "next_obs": rng.integers(0, 255, (n, *OBS), np.uint8),
            "action": rng.integers(0, 6, n), "reward": rng.random(n, dtype=np.float32),
            "done": np.zeros(n, np.float32)}

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

if lib == "namedschema":
    import namedschema
    Step = namedschema.NamedArrayTupleSchema("CmpStep", ["obs", "next_obs", "action", "reward", "done"])
    ex = Step(np.zeros(OBS, np.uint8), np.zeros(OBS, np.uint8), np.int64(0), np.float32(0), np.float32(0))
    def build():
        return namedschema.ReplayBuffer(ex, capacity, seed=0)
    def extend(rb, d): rb.extend(Step(**d))
    def sample(rb): return rb.sample(32).obs
    def save(rb): namedschema.save(rb.state_dict(), path)
    def load():
        return namedschema.ReplayBuffer.from_state_dict(namedschema.load(path))
    def stored(rb): return rb.storage.obs
elif lib == "sb3":
    import torch
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.save_util import load_from_pkl, save_to_pkl
    np.random.seed(0)
    def build():
        return ReplayBuffer(capacity, spaces.Box(0, 255, OBS, np.uint8), spaces.Discrete(6),
                            device="cpu", n_envs=8, handle_timeout_termination=False)
    def extend(rb, d):
        rb.add(d["obs"], d["next_obs"], d["action"][:, None], d["reward"], d["done"], [{}] * 8)
    def sample(rb): return rb.sample(32).observations.numpy()
    def save(rb): save_to_pkl(path, rb)
    def load(): return load_from_pkl(path)
    def stored(rb): return rb.observations
else:
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    torch.manual_seed(0)
    def build(): return ReplayBuffer(storage=LazyTensorStorage(capacity))
    def extend(rb, d):
        rb.extend(TensorDict({k: torch.from_numpy(v) for k, v in d.items()}, batch_size=[8]))
    def sample(rb): return rb.sample(32)["obs"].numpy()
    def save(rb): rb.dumps(path)
    def load():
        rb = build()
        rb.loads(path)
        return rb
    def stored(rb): return rb.storage["obs"].numpy()

def digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]

out = {}
if phase == "save":
    rb = build()
    for _ in range(capacity // 8 + 20):        # past the wrap
        extend(rb, chunk(8))
    for _ in range(5):
        sample(rb)
    before = peak()
    t0 = time.perf_counter()
    save(rb)
    out["save_s"] = time.perf_counter() - t0
    out["save_rss_growth"] = peak() - before
    size = 0
    for root, _, files in os.walk(path) if os.path.isdir(path) else [("", [], [path])]:
        size += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    out["file_bytes"] = size
    out["buffer_bytes"] = int(stored(rb).nbytes) * 2
else:
    t0 = time.perf_counter()
    rb = load()
    out["load_s"] = time.perf_counter() - t0
rng = np.random.default_rng(123)              # the same new data in both processes
extend(rb, chunk(8))
out["continuation"] = digest([sample(rb) for _ in range(3)] + [stored(rb)])
print(json.dumps(out))
'''


def run(lib: str, phase: str, path: str, capacity: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, lib, phase, path, str(capacity)],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{lib} {phase} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=3000)
    args = parser.parse_args(argv)
    libs = ["namedschema"]
    libs += ["sb3"] if importlib.util.find_spec("stable_baselines3") else []
    libs += ["torchrl"] if importlib.util.find_spec("torchrl") else []
    folder = tempfile.mkdtemp(prefix="namedschema-cmp-")
    rows = []
    for lib in libs:
        path = os.path.join(folder, {"namedschema": "rb.nsb", "sb3": "rb.pkl"}.get(lib, lib))
        saved = run(lib, "save", path, args.capacity)
        loaded = run(lib, "load", path, args.capacity)
        rows.append((lib, saved, loaded))
    mib = 2 ** 20
    print(f"capacity {args.capacity:,} Atari-like transitions "
          f"({rows[0][1]['buffer_bytes'] / mib:,.0f} MiB of frames)")
    print(f"{'library':12} {'save s':>7} {'load s':>7} {'file MiB':>9} "
          f"{'extra peak RSS on save MiB':>27}  exact resume")
    for lib, saved, loaded in rows:
        print(f"{lib:12} {saved['save_s']:7.2f} {loaded['load_s']:7.2f} "
              f"{saved['file_bytes'] / mib:9.0f} {saved['save_rss_growth'] / mib:27.0f}  "
              f"{'yes' if saved['continuation'] == loaded['continuation'] else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
