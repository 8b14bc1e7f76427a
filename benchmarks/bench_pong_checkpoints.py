#!/usr/bin/env python3
"""What each ``resumable`` checkpoint of a real Pong run writes: kind, bytes, seconds.

A DQN run in the seed's shape on rlpyt's unmodified ``AtariEnv`` (Pong through
``namedschema.rlpyt.atari_py_adapter`` over ale-py, 104x80 frames), with a
prioritized frame replay buffer of ``--replay`` steps (default 1e6, the seed's:
8.3 GB of frames), rlpyt's default ``AtariDqnModel``, SerialSampler or
CpuSampler (``--sampler``), checkpointing every ``--every`` iterations for
``--itrs`` iterations. Between checkpoints the emulator states change length,
the sum tree's index list changes, the optimizer state appears once learning
starts: each checkpoint after the first must still be incremental and write
about the rows that changed, not the file.

Prints one line per checkpoint (``checkpoint_history``) and, with ``--json``,
writes them. Needs RLPYT_SRC, free disk and memory of about the buffer's size.
On a shared machine the seconds are noisy; the bytes are not.

    RLPYT_SRC=/path/to/rlpyt python benchmarks/bench_pong_checkpoints.py
        [--replay N] [--itrs N] [--every N] [--sampler serial|cpu] [--dir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def build(replay: int, itrs: int, sampler_name: str):
    sys.path.append(os.environ["RLPYT_SRC"])
    from namedschema.rlpyt import atari_py_adapter
    atari_py_adapter.install()
    from rlpyt.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent
    from rlpyt.algos.dqn.dqn import DQN
    from rlpyt.envs.atari.atari_env import AtariEnv, AtariTrajInfo
    from rlpyt.runners.minibatch_rl import MinibatchRl
    from rlpyt.samplers.parallel.cpu.sampler import CpuSampler
    from rlpyt.samplers.serial.sampler import SerialSampler
    sampler_cls = CpuSampler if sampler_name == "cpu" else SerialSampler
    sampler = sampler_cls(EnvCls=AtariEnv, TrajInfoCls=AtariTrajInfo,
                          env_kwargs=dict(game="pong"), batch_T=4, batch_B=2,
                          max_decorrelation_steps=30)
    algo = DQN(replay_size=replay, min_steps_learn=200, batch_size=32, replay_ratio=8,
               prioritized_replay=True, double_dqn=True, n_step_return=3)
    agent = AtariDqnAgent()
    return MinibatchRl(algo=algo, agent=agent, sampler=sampler, n_steps=itrs * 8,
                       log_interval_steps=itrs * 8, seed=7)   # one log, at the end


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replay", type=int, default=1_000_000)
    parser.add_argument("--itrs", type=int, default=300)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--sampler", choices=("serial", "cpu"), default="serial")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    from namedschema import checkpoint
    from namedschema.rlpyt import checkpoint_history, resumable
    runner = build(args.replay, args.itrs, args.sampler)
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = os.path.join(directory, "pong.nsc")
        resumable(runner, path, every_itrs=args.every)
        seconds = []
        real_save = checkpoint.save

        def timed(*a, **k):   # the caller's part; the rest is in the background
            began = time.perf_counter()
            handle = real_save(*a, **k)
            if handle is not None:
                handle.wait()
            seconds.append(time.perf_counter() - began)
        checkpoint.save = timed
        try:
            runner.train()
        finally:
            checkpoint.save = real_save
        rows = []
        for n, (stat, took) in enumerate(zip(checkpoint_history(runner), seconds,
                                             strict=False), 1):
            rows.append(dict(vars(stat), seconds=took))
            print(f"checkpoint {n:3d}: {stat.kind:11s} {stat.bytes_written / 2**20:9.2f} MiB "
                  f"of {stat.file_bytes / 2**20:9.1f} MiB ({100 * stat.fraction:5.2f}%) "
                  f"{took:7.2f} s{'  ' + stat.reason if stat.reason else ''}")
    later = rows[1:]
    inc = [r for r in later if r["kind"] == "incremental"]
    print(f"after the first: {len(inc)} of {len(later)} incremental; incremental ones wrote "
          f"at most {max((r['bytes_written'] for r in inc), default=0) / 2**20:.2f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"replay": args.replay, "sampler": args.sampler, "checkpoints": rows}, f)


if __name__ == "__main__":
    main()
