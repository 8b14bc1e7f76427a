#!/usr/bin/env python3
"""Checkpoints of an SB3 DQN on Atari-shaped frames: ``namedschema.sb3.resumable`` against
SB3's own ``model.save`` + ``save_replay_buffer``, measured in the same run.

A DQN ``CnnPolicy`` (Nature CNN, SB3's defaults) on a small gymnasium env that
produces Atari-like observations (``uint8 (4, 84, 84)`` frame stacks, 6 actions,
seeded random frames; no emulator, so the learning loop costs what DQN costs). Its
replay buffer is filled to ``--rows`` rows (1e5 by default; ``--rows 1000000`` for
the DQN Atari default) with ``rb.add``, then a short ``learn()`` of ``--steps`` env
steps takes ``--checkpoints`` checkpoints at the same steps on each route, each route
in a fresh child process:

* ``namedschema``: ``namedschema.sb3.resumable(model, path, every_steps=...)`` (one
  RunCheckpoint of the whole run: incremental, in the background, atomic);
* ``sb3``: a callback doing ``model.save(zip)`` + ``model.save_replay_buffer(pkl)`` at the
  start of the same rollouts, and once after ``learn`` (as resumable does); then an
  ``fsync`` of both files, which SB3 does not do, to time when they are on disk;
* ``none``: the same ``learn()`` without checkpoints (the loop's own time).

Reported per route: the stall of the first checkpoint and of the later ones (how long
``learn()`` was held), the time from a checkpoint's start until it is on disk (SB3:
``save`` returned, then after the ``fsync``), the extra peak memory while learning
(the proportional set size, PSS, of the child and of its children, such as a forked
background writer, sampled every 50 ms by this parent process, above the PSS once the
buffer is full), the checkpoint's bytes (file size and blocks on disk), and the
learn() wall time; then the ratios namedschema / SB3.

Usage:
    python benchmarks/compare_sb3_checkpoints.py [--rows 100000] [--steps 2000]
        [--checkpoints 4] [--no-optimize-memory] [--dir DIR] [--json OUT]

``--no-optimize-memory`` builds SB3's buffer with ``optimize_memory_usage=False``
(next observations stored apart: twice the frames); the default stores each frame
stack once, as CleanRL and memory-bound users do. Needs: torch, gymnasium,
stable-baselines3, and about 3x the buffer's bytes of memory and disk.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUTES = ("none", "namedschema", "sb3")


# -- the child: one route ----------------------------------------------------------------

def child(route: str, folder: str, rows: int, steps: int, checkpoints: int,
          optimize: bool) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch
    from gymnasium import spaces
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)

    class AtariLike(gym.Env):
        observation_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
        action_space = spaces.Discrete(6)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self._frame(), {}

        def _frame(self):
            return self.np_random.integers(0, 256, (4, 84, 84), dtype=np.uint8)

        def step(self, action):
            self.t += 1
            return (self._frame(), float(self.np_random.random() < 0.05), False,
                    self.t >= 500, {})

    env = DummyVecEnv([AtariLike])
    env.seed(0)
    model = DQN("CnnPolicy", env, buffer_size=rows, learning_starts=32, batch_size=32,
                train_freq=4, target_update_interval=1000, optimize_memory_usage=optimize,
                replay_buffer_kwargs={"handle_timeout_termination": False} if optimize
                else None, seed=0)
    rb = model.replay_buffer
    pool = np.random.default_rng(0).integers(0, 256, (64, 1, 4, 84, 84), dtype=np.uint8)
    for i in range(rows):
        rb.add(pool[i % 64], pool[(i + 1) % 64], np.array([i % 6]), np.array([0.0]),
               np.array([i % 500 == 499]), [{}])
    buffer_bytes = sum(v.nbytes for v in vars(rb).values() if isinstance(v, np.ndarray))
    every = max(steps // checkpoints, 1)
    saves: list[dict] = []
    files: list[str] = []
    t_learn0 = time.time()
    began = time.perf_counter()
    if route == "none":
        model.learn(total_timesteps=steps)
    elif route == "namedschema":
        from namedschema.sb3 import resumable
        module = sys.modules["namedschema.sb3.resumable"]
        original = module._Checkpoint.save
        pending: list = []

        def timed(self, step, **loop):
            t0 = time.perf_counter()
            original(self, step, **loop)
            t1 = time.perf_counter()
            pending.append((step, t0, t1, self._pending))

        module._Checkpoint.save = timed
        path = os.path.join(folder, "run.nsc")
        files.append(path)
        resumable(model, path, every_steps=every).learn(total_timesteps=steps)
        for step, t0, t1, handle in pending:      # learn() waited for the last one
            ended = t1 if handle is None else handle.ended
            saves.append({"step": step, "stall": t1 - t0, "durable": ended - t0})
    else:
        zip_path, pkl_path = os.path.join(folder, "model.zip"), os.path.join(folder, "rb.pkl")
        files += [zip_path, pkl_path]

        def save() -> None:
            t0 = time.perf_counter()
            model.save(zip_path)
            model.save_replay_buffer(pkl_path)
            t1 = time.perf_counter()
            for name in files:
                fd = os.open(name, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
            saves.append({"step": model.num_timesteps, "stall": t1 - t0,
                          "durable": time.perf_counter() - t0})

        class Save(BaseCallback):
            def __init__(self):
                super().__init__()
                self.last = 0

            def _on_rollout_start(self) -> None:
                n = self.model.num_timesteps
                if n // every > self.last // every:
                    save()
                    self.last = n

            def _on_step(self) -> bool:
                return True

        model.learn(total_timesteps=steps, callback=Save())
        save()
    learn_s = time.perf_counter() - began
    return {"route": route, "t_learn0": t_learn0, "t_learn1": time.time(), "learn_s": learn_s,
            "saves": saves, "buffer_bytes": int(buffer_bytes),
            "file_bytes": sum(os.stat(f).st_size for f in files),
            "disk_bytes": sum(os.stat(f).st_blocks * 512 for f in files)}


# -- the parent: memory sampling, the table ----------------------------------------------

def _pss(pid: int) -> int:
    """PSS in bytes of ``pid`` and of its descendants (0 for a process gone)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            continue
    return total


def measure(route: str, args: argparse.Namespace, folder: str) -> dict:
    sub = os.path.join(folder, route)
    os.makedirs(sub, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = os.path.join(sub, "result.json")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", route,
                             "--dir", sub, "--rows", str(args.rows), "--steps", str(args.steps),
                             "--checkpoints", str(args.checkpoints), "--json", out,
                             *(["--no-optimize-memory"] if not args.optimize else [])],
                            env=env)
    samples: list[tuple[float, int]] = []

    def sample() -> None:
        while proc.poll() is None:
            samples.append((time.time(), _pss(proc.pid)))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    if proc.wait() != 0:
        raise SystemExit(f"the {route} child failed ({proc.returncode})")
    sampler.join()
    with open(out) as f:
        result = json.load(f)
    before = [pss for t, pss in samples if t <= result["t_learn0"]]
    during = [pss for t, pss in samples if result["t_learn0"] <= t <= result["t_learn1"]]
    result["pss_full"] = before[-1] if before else None
    result["extra_peak"] = max(during) - before[-1] if before and during else None
    for name in os.listdir(sub):
        if name != "result.json":
            os.unlink(os.path.join(sub, name))
    return result


def fmt(v: float | int | None) -> str:
    return "-" if v is None else f"{v:,.1f}" if isinstance(v, float) else f"{v:,}"


def summary(r: dict, none: dict) -> dict:
    later = r["saves"][1:]
    return {
        "checkpoints": len(r["saves"]),
        "first stall (ms)": 1e3 * r["saves"][0]["stall"] if r["saves"] else None,
        "later stall, median (ms)": 1e3 * statistics.median(s["stall"] for s in later)
        if later else None,
        "later stall, max (ms)": 1e3 * max(s["stall"] for s in later) if later else None,
        "until on disk, median of later (ms)": 1e3 * statistics.median(
            s["durable"] for s in later) if later else None,
        "extra peak PSS (MiB)": r["extra_peak"] / 2 ** 20 if r["extra_peak"] is not None
        else None,
        "file (MiB)": r["file_bytes"] / 2 ** 20,
        "on disk (MiB)": r["disk_bytes"] / 2 ** 20,
        "learn() wall (s)": r["learn_s"],
        "learn() over none (s)": r["learn_s"] - none["learn_s"],
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--checkpoints", type=int, default=4)
    p.add_argument("--no-optimize-memory", dest="optimize", action="store_false")
    p.add_argument("--dir")
    p.add_argument("--json")
    p.add_argument("--child", choices=ROUTES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        result = child(args.child, args.dir, args.rows, args.steps, args.checkpoints,
                       args.optimize)
        with open(args.json, "w") as f:
            json.dump(result, f)
        return result
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        results = {route: measure(route, args, folder) for route in ROUTES}
    none = results["none"]
    table = {route: summary(results[route], none) for route in ("namedschema", "sb3")}
    print(f"DQN CnnPolicy, uint8 (4, 84, 84), {args.rows:,} rows "
          f"({results['sb3']['buffer_bytes'] / 2 ** 20:,.0f} MiB of buffer arrays, "
          f"optimize_memory_usage={args.optimize}), {args.steps:,} steps, "
          f"{args.checkpoints} checkpoints; learn() without checkpoints: "
          f"{none['learn_s']:.1f} s")
    print(f"{'':38} {'namedschema':>12} {'sb3':>12} {'ns / sb3':>10}")
    ratios = {}
    for key in table["namedschema"]:
        a, b = table["namedschema"][key], table["sb3"][key]
        ratio = a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b \
            else None
        ratios[key] = ratio
        print(f"{key:38} {fmt(a):>12} {fmt(b):>12} "
              f"{'-' if ratio is None else f'{ratio:.3g}':>10}")
    for route in ("namedschema", "sb3"):
        print(f"{route} stalls (ms): " + ", ".join(f"{1e3 * s['stall']:,.0f}"
                                                  for s in results[route]["saves"]) +
              "; until on disk (ms): " + ", ".join(f"{1e3 * s['durable']:,.0f}"
                                                   for s in results[route]["saves"]))
    report = {"args": vars(args), "results": results, "table": table, "ratios": ratios}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
