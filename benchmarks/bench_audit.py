#!/usr/bin/env python3
"""What check-resume's audit costs a training loop: steps/s and save stalls, with and without.

A ``RunCheckpoint`` loop as check-resume runs it: a 1024-256-256-16 MLP, Adam,
and a full replay buffer of ``--buffer-mib`` MiB (1024-float observations,
obs and next_obs); each step adds a transition, samples 64 and takes an
Adam step; ``maybe_save`` every ``--save-every`` steps (background,
incremental: the default). Each run is a fresh process; runs alternate
without and with ``NAMEDSCHEMA_AUDIT`` (the variable check-resume sets:
each checkpoint's arrays are then digested in a background thread, only the
pieces the save rewrote), ``--repeats`` times each. Prints the median steps/s
of each, the median and worst stall of a save (the time ``maybe_save`` holds
the loop when it saves), the CPU time of the process per step (all its
threads: steadier than steps/s on a loaded machine), and their ratios. The
first save, full, is not timed (``ckpt.wait()`` also waits for its audit
record, which digests the whole file once).

Measured on the 2-core development machine with other sessions' tests beside
it (load average 5.6 to 7.8), the library of before (each record digested the
whole file) and after, alternating, two runs each::

    $ python benchmarks/bench_audit.py --buffer-mib 128 --steps 1500 --save-every 150 --repeats 2
    before: ratio steps/s 0.656, 0.836; CPU per step 1.453, 1.206; worst stall 8.60, 11.97
    after:  ratio steps/s 0.951, 1.063; CPU per step 1.041, 1.003; worst stall 1.97, 2.28

    python benchmarks/bench_audit.py [--buffer-mib 256] [--steps 3000] [--save-every 300]
                                     [--repeats 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

OBS = 1024                      # float32 values per observation


def child(args: argparse.Namespace) -> None:
    import numpy as np
    import torch
    from torch import nn

    import namedschema

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    per = 2 * OBS * 4 + 8 + 4 + 1
    capacity = args.buffer_mib * 2**20 // per
    schema = namedschema.NamedArrayTupleSchema("Step", "obs next_obs action reward done")
    example = schema(np.zeros(OBS, np.float32), np.zeros(OBS, np.float32), np.int64(0),
                     np.float32(0), np.bool_(False))
    rb = namedschema.ReplayBuffer(example, capacity, seed=0)
    chunk = 4096
    noise = rng.standard_normal((chunk, OBS)).astype(np.float32)
    for start in range(0, capacity, chunk):     # full: the checkpoint holds every byte
        n = min(chunk, capacity - start)
        rb.extend(schema(noise[:n], noise[:n] * 0.5, rng.integers(0, 16, n),
                         rng.standard_normal(n).astype(np.float32), np.zeros(n, np.bool_)))
    net = nn.Sequential(nn.Linear(OBS, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 16))
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    ckpt = namedschema.RunCheckpoint(os.path.join(args.dir, "bench.nsc"),
                                     every_steps=args.save_every, quiet=True)
    ckpt.track(net=net, opt=opt, replay=rb, rng=rng)
    ckpt.save(-1)                               # the first, full write: not timed
    ckpt.wait()
    stalls = []
    began, cpu = time.perf_counter(), time.process_time()
    for step in range(args.steps):
        row = noise[step % chunk]
        rb.add(schema(row, row, np.int64(step % 16), np.float32(1.0), np.bool_(False)))
        batch = rb.sample(64)
        q = net(torch.as_tensor(batch.obs)).gather(1, torch.as_tensor(batch.action)[:, None])
        loss = (q.squeeze(1) - torch.as_tensor(batch.reward)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        t0 = time.perf_counter()
        if ckpt.maybe_save(step):
            stalls.append(time.perf_counter() - t0)
    seconds = time.perf_counter() - began
    ckpt.wait()                                 # (and the last audit record)
    cpu = time.process_time() - cpu             # every thread of the process
    print(json.dumps({"steps_per_s": args.steps / seconds, "stalls": stalls,
                      "cpu_ms_per_step": cpu * 1e3 / args.steps,
                      "bytes": os.path.getsize(ckpt.path)}))


def run_one(args: argparse.Namespace, audit: bool) -> dict:
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NAMEDSCHEMA_AUDIT")}
        if audit:
            env["NAMEDSCHEMA_AUDIT"] = os.path.join(d, "audit.jsonl")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--dir", d,
               "--buffer-mib", str(args.buffer_mib), "--steps", str(args.steps),
               "--save-every", str(args.save_every)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if audit:
            with open(env["NAMEDSCHEMA_AUDIT"]) as f:
                result["records"] = sum('"event":"checkpoint"' in line for line in f)
        return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buffer-mib", type=int, default=256)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--save-every", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dir", default=None, help="where the checkpoints go (default: tmp)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    results: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(args.repeats):
        for audit in (False, True):
            results[audit].append(run_one(args, audit))
    rate = {a: statistics.median(r["steps_per_s"] for r in rs) for a, rs in results.items()}
    cpu = {a: statistics.median(r["cpu_ms_per_step"] for r in rs) for a, rs in results.items()}
    stalls = {a: [s for r in rs for s in r["stalls"]] for a, rs in results.items()}
    med = {a: statistics.median(s) for a, s in stalls.items()}
    worst = {a: max(s) for a, s in stalls.items()}
    size = results[False][0]["bytes"] / 2**20
    print(f"RunCheckpoint loop: {args.buffer_mib} MiB replay buffer ({size:.0f} MiB checkpoint), "
          f"{args.steps} steps, a save every {args.save_every} ({len(stalls[True])} audited "
          f"saves, {sum(r['records'] for r in results[True])} records), {args.repeats} runs "
          "each")
    for audit in (False, True):
        label = "with the audit   " if audit else "without the audit"
        print(f"  {label}: {rate[audit]:8.1f} steps/s, save stall median "
              f"{med[audit] * 1e3:7.1f} ms, worst {worst[audit] * 1e3:7.1f} ms, CPU "
              f"{cpu[audit]:6.2f} ms/step")
    print(f"  ratio (with/without): steps/s {rate[True] / rate[False]:.3f}, median stall "
          f"{med[True] / med[False]:.2f}, worst stall {worst[True] / worst[False]:.2f}, CPU "
          f"per step {cpu[True] / cpu[False]:.3f}")


if __name__ == "__main__":
    main()
