#!/usr/bin/env python3
"""What a resume from a compressed RunCheckpoint costs: restore time and peak extra memory.

A ``ReplayBuffer`` of ``--mib`` MiB of uint8 84x84 frames (real Pong frames when
ale-py and OpenCV are installed, else synthetic ones; see
``benchmarks/suite/compression.py``) is checkpointed by ``RunCheckpoint`` with
``compression=None`` and ``"auto"`` (a full save, then three saves after 1% of the
rows changed, as a ring writes them; each timed); then, each in a fresh process, a
run builds the same buffer and restores it. Printed per policy and round: the restore time and the
peak anonymous memory (``RssAnon``, sampled every 2 ms by a thread) beyond what the
process held before ``restore`` (its own live buffer); then, per policy, the best
round, its time against the uncompressed restore of the same run, and its extra
memory against issue 32's load bound (``TARGET_MIB``, 64 MiB). The measurement behind
the writers' default (docs/checkpoints.rst, "Compressed checkpoints of a run").

    python benchmarks/bench_compressed_resume.py [--mib 1024] [--rounds 2] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Issue 32's bound on a load's extra memory (whatever the buffer's size).
TARGET_MIB = 64


def _run(mode: str, path: str, policy: str, mib: int) -> None:
    import namedschema
    from benchmarks.suite.compression import _frames
    rows = mib * 2**20 // (84 * 84)
    Step = namedschema.NamedArrayTupleSchema("ResumeStep", "obs reward")
    rb = namedschema.ReplayBuffer(Step(np.zeros((84, 84), np.uint8), np.float32(0)), rows)
    rb.storage.obs[:] = 87                 # the live buffer's pages exist, as in a run
    ckpt = namedschema.RunCheckpoint(path, compression=None if policy == "none" else policy,
                                     global_rngs=False, quiet=True, background=False)
    ckpt.track(replay=rb)
    if mode == "save":
        frames, _what = _frames(rows, quick=False)
        rb.extend(Step(frames, np.zeros(rows, np.float32)))
        began = time.perf_counter()
        ckpt.save(0)
        full = time.perf_counter() - began
        step = max(1, rows // 100)      # then 1% of the rows, as a ring writes them
        saves = []
        for k in range(1, 4):
            rb.extend(Step(frames[(k * 7919) % (rows - step):][:step],
                           np.full(step, k, np.float32)))
            began = time.perf_counter()
            ckpt.save(k)
            saves.append(time.perf_counter() - began)
        print(f"{policy:>5}: full save {full:.2f} s, saves after 1% of the rows changed "
              f"{', '.join(f'{t:.3f}' for t in saves)} s", flush=True)
        print(f"SAVED {policy} {full:.4f} {min(saves):.4f}", flush=True)
        return
    base, peak, stop = _anon(), [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _anon())
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    began = time.perf_counter()
    assert ckpt.restore()
    took = time.perf_counter() - began
    stop.set()
    watcher.join()
    print(f"{policy:>5}: restore {took:.2f} s, peak anonymous memory beyond the live "
          f"buffer {peak[0] - base} MiB", flush=True)
    print(f"RESULT {policy} {took:.4f} {peak[0] - base}", flush=True)


def _anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) // 1024
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _run(*args.child, args.mib)
        return 0
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        paths = {p: os.path.join(directory, f"{p}.nsc") for p in ("none", "auto")}
        print(f"{args.mib} MiB of frames; load average {os.getloadavg()[0]:.1f}", flush=True)
        results: dict[str, list[tuple[float, int]]] = {p: [] for p in paths}
        saved: dict[str, tuple[float, float]] = {}
        for mode in ["save"] + ["restore"] * args.rounds:
            for policy, path in paths.items():
                done = subprocess.run([sys.executable, __file__, "--mib", str(args.mib),
                                       "--child", mode, path, policy], check=True, env=env,
                                      stdout=subprocess.PIPE, text=True)
                for line in done.stdout.splitlines():
                    if line.startswith("RESULT "):
                        _tag, name, took, extra = line.split()
                        results[name].append((float(took), int(extra)))
                    elif line.startswith("SAVED "):
                        _tag, name, full, part = line.split()
                        saved[name] = (float(full), float(part))
                    else:
                        print(line, flush=True)
        print("files: " + ", ".join(f"{p} {os.path.getsize(path) / 2**20:.1f} MiB"
                                    for p, path in paths.items()))
    if len(saved) == len(paths):
        for policy, (full, part) in saved.items():
            print(f"{policy:>5}: full save {full / saved['none'][0]:.2f}x, 1% save "
                  f"{part / saved['none'][1]:.2f}x the uncompressed run's")
    if all(results.values()):
        raw_time = min(t for t, _m in results["none"])
        for policy, rounds in results.items():
            took, extra = min(t for t, _m in rounds), max(m for _t, m in rounds)
            verdict = "within" if extra <= TARGET_MIB else "OVER"
            print(f"{policy:>5}: best restore {took:.2f} s ({took / raw_time:.2f}x the "
                  f"uncompressed restore), extra memory at most {extra} MiB "
                  f"({extra / args.mib:.3f} of the buffer; {verdict} the {TARGET_MIB} MiB "
                  "target)")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
