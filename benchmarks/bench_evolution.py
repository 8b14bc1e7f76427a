#!/usr/bin/env python3
"""Schema-evolution benchmark: what loading into today's schemas costs.

A replay buffer of Atari-like samples (``observation`` uint8 84x84, ``action``,
``reward``, ``done``) is checkpointed with the old schema; today's schema adds a
``timeout`` field. Each contender runs in a fresh process, contenders alternate,
best of N rounds; the reference is the same load without ``schemas=``:

* ``load(mmap_mode="r")`` vs ``load(mmap_mode="r", schemas=[Samples])``: time,
  bytes read by ``read()`` calls (``rchar``) and peak extra RSS;
* ``load()`` vs ``load(schemas=[Samples])`` (full read);
* ``load(mmap_mode="r", schemas=..., casting="safe")`` with ``reward`` widened to
  float64: the one cast field is read, the rest stays mapped.

Usage:

    python benchmarks/bench_evolution.py [--quick] [--rounds N] [--size-mib N] [--json FILE]

Figures are ratios against the reference measured in the same run; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import namedschema

    def io():
        with open("/proc/self/io") as f:
            rchar = int(next(l for l in f if l.startswith("rchar")).split()[1])
        with open("/proc/self/status") as f:
            status = dict(l.split(":", 1) for l in f)
        return rchar, int(status["VmHWM"].split()[0]) * 1024, int(status["VmRSS"].split()[0]) * 1024

    path, mode, evolve, widen = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
    mode = None if mode == "none" else mode
    kwargs = {}
    if evolve:
        defaults = (np.float64(0), np.bool_(False), np.bool_(False)) if widen \
            else (np.bool_(False),)
        Samples = namedschema.NamedArrayTupleSchema(
            "Samples", ["observation", "action", "reward", "done", "timeout"],
            defaults=defaults)
        kwargs = dict(schemas=[Samples], casting="safe")
    import namedschema.checkpoint, namedschema.evolution  # noqa: E401 - imports outside the timing
    namedschema.load
    r0, _hwm0, rss0 = io()
    t0 = time.perf_counter()
    s = namedschema.load(path, mmap_mode=mode, **kwargs)
    elapsed = time.perf_counter() - t0
    r1, hwm1, _rss1 = io()
    assert type(s) is Samples if evolve else type(s).__name__ == "Samples"
    print(json.dumps(dict(seconds=elapsed, read=r1 - r0, extra_peak=hwm1 - rss0)))
""")

CONTENDERS = {
    # name: (mmap mode, evolve, widen)
    "load(mmap_mode='r')": ("r", False, False),
    "load(mmap_mode='r', schemas=) +timeout": ("r", True, False),
    "load(mmap_mode='r', schemas=, casting='safe') +timeout, reward f32->f64": ("r", True, True),
    "load()": ("none", False, False),
    "load(schemas=) +timeout": ("none", True, False),
}
REFERENCE = {"load(mmap_mode='r')": "load(mmap_mode='r')",
             "load(mmap_mode='r', schemas=) +timeout": "load(mmap_mode='r')",
             "load(mmap_mode='r', schemas=, casting='safe') +timeout, reward f32->f64":
                 "load(mmap_mode='r')",
             "load()": "load()", "load(schemas=) +timeout": "load()"}


def make_checkpoint(path: str, size_mib: int) -> int:
    import numpy as np

    import namedschema

    n = max(size_mib * 2**20 // (84 * 84), 16)
    Old = namedschema.NamedArrayTupleSchema("Samples", "observation action reward done")
    rng = np.random.default_rng(0)
    buf = Old(rng.integers(0, 255, (n, 84, 84), dtype=np.uint8),
              rng.integers(0, 4, n).astype(np.int32), rng.standard_normal(n).astype(np.float32),
              rng.random(n) < 0.01)
    namedschema.save(buf, path)
    return n


def run(path: str, spec) -> dict:
    mode, evolve, widen = spec
    proc = subprocess.run([sys.executable, "-c", CHILD, path, mode, str(int(evolve)),
                           str(int(widen))], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 MiB, 1 round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    size, rounds = (16, 1) if args.quick else (args.size_mib, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "replay.nsb")
        n = make_checkpoint(path, size)
        best: dict = {}
        for _ in range(rounds):
            for name, spec in CONTENDERS.items():
                out = run(path, spec)
                old = best.get(name)
                if old is None or out["seconds"] < old["seconds"]:
                    best[name] = out
        file_mib = os.path.getsize(path) / 2**20
    print(f"schema evolution: {n:,} samples, {file_mib:,.1f} MiB checkpoint, "
          f"best of {rounds}")
    width = max(map(len, CONTENDERS))
    print(f"{'contender':<{width}}  {'time':>9}  {'ratio':>6}  {'read()':>10}  {'extra peak RSS':>14}")
    for name, out in best.items():
        ref = best[REFERENCE[name]]["seconds"]
        print(f"{name:<{width}}  {out['seconds'] * 1e3:7.2f}ms  {out['seconds'] / ref:5.2f}x  "
              f"{out['read'] / 2**20:8.2f}Mi  {out['extra_peak'] / 2**20:12.1f}Mi")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": n, "size_mib": size, "rounds": rounds, "results": best}, f,
                      indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
