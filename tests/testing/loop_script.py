"""A numpy-only RunCheckpoint loop for check-resume's tests (starts fast, no torch).

``--mode``: ok (resumes exactly), crash (exits 3 at once), crash-after-resume
(exits 4 once it has resumed), hang (checkpoints, then never ends),
no-checkpoint (a loop without saves), orphan (starts a worker process that
would outlive it; its pid is appended to $ORPHAN_PIDS), shared (its checkpoint
at the absolute path $SHARED_CHECKPOINT, so runs resume each other's), clock
(keeps the time it started in a tracked dict: never the same twice).
"""

import argparse
import os
import random
import subprocess
import sys
import threading
import time

import numpy as np

import namedschema


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="ok")
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--save-every", type=int, default=2000)
    args = p.parse_args()
    if args.mode == "crash":
        print("something went wrong", file=sys.stderr)
        sys.exit(3)
    if args.mode == "orphan":
        worker = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
        with open(os.environ["ORPHAN_PIDS"], "a") as f:
            f.write(f"{worker.pid}\n")
    random.seed(0)
    np.random.seed(0)
    rng = np.random.default_rng(0)
    world = np.zeros((64, 256))
    counters = {"episodes": 0}
    if args.mode == "clock":
        counters["started"] = time.time()
    path = os.environ["SHARED_CHECKPOINT"] if args.mode == "shared" else "loop.nsc"
    ckpt = namedschema.RunCheckpoint(path, every_steps=args.save_every)
    ckpt.track(rng=rng, world=world, counters=counters)
    if args.mode != "no-checkpoint" and ckpt.restore() and args.mode == "crash-after-resume":
        sys.exit(4)
    for step in range(ckpt.next_step, args.steps):
        row = int(rng.integers(len(world)))
        world[row] = np.tanh(world[row] + rng.standard_normal(world.shape[1]))
        if world[row, 0] > 0.9:
            counters["episodes"] += 1
        if args.mode != "no-checkpoint":
            ckpt.maybe_save(step)
        if args.mode == "hang" and step == args.steps // 2:
            threading.Event().wait()


if __name__ == "__main__":
    main()
