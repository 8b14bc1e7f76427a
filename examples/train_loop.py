"""A small training loop that resumes exactly: the script ``namedschema check-resume`` checks.

A Q-learning-like loop (a torch network, Adam, a namedschema replay buffer, a
numpy "world" array the loop writes to, a generator for exploration and a
dict of counters), checkpointed with ``RunCheckpoint``. Kill it at any moment
and run the same command again: it continues from its last checkpoint and ends
bit for bit where the uninterrupted run ends. Check that yourself with::

    namedschema check-resume --kills 5 -- python examples/train_loop.py

``--bug untracked-rng`` explores with a generator the checkpoint was never
told about, ``--bug outside-counter`` keeps a counter in a local variable:
the two usual mistakes, which ``check-resume`` reports with the step and the
object where the resumed run first differs.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import torch
from torch import nn

import namedschema


class Step(namedschema.NamedArrayTuple):   # one transition, as the buffer stores it
    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default="run.nsc",
                   help="checkpoint file (relative: in the working directory)")
    p.add_argument("--world-mb", type=float, default=1.0,
                   help="size of the world array the loop writes to")
    p.add_argument("--bug", choices=["none", "untracked-rng", "outside-counter"],
                   default="none")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)              # the global generators, which RunCheckpoint
    np.random.seed(args.seed)           # tracks by default, are seeded as well
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    replay = namedschema.ReplayBuffer(
        Step(np.zeros(8, np.float32), np.int64(0), np.float32(0)), 256, seed=args.seed)
    world = np.zeros((max(1, int(args.world_mb * 2**20) // 4096), 1024), np.float32)
    counters = {"updates": 0}

    ckpt = namedschema.RunCheckpoint(args.checkpoint, every_steps=args.save_every)
    ckpt.track(net=net, opt=opt, replay=replay, rng=rng, world=world, counters=counters)
    obs = np.zeros(8, np.float32)
    if ckpt.restore():
        obs = ckpt.loop["obs"]
    explore = np.random.default_rng(args.seed + 1)   # used only with --bug untracked-rng
    local_updates = 0                                  # used only with --bug outside-counter

    for step in range(ckpt.next_step, args.steps):
        chooser = explore if args.bug == "untracked-rng" else rng
        if chooser.random() < 0.3:
            action = int(chooser.integers(4))
        else:
            with torch.no_grad():
                action = int(net(torch.as_tensor(obs)).argmax())
        row = step % len(world)
        world[row, :8] += obs * 0.5 + action
        reward = np.float32(np.tanh(world[row, :8].sum() * 1e-3))
        replay.add(Step(obs, np.int64(action), reward))
        obs = np.tanh(world[row, :8] + rng.standard_normal(8).astype(np.float32))

        if len(replay) >= 32:
            batch = replay.sample(16)
            q = net(torch.as_tensor(batch.obs)).gather(1, torch.as_tensor(batch.action)[:, None])
            loss = ((q.squeeze(1) - torch.as_tensor(batch.reward)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            counters["updates"] += 1
            local_updates += 1
            updates = local_updates if args.bug == "outside-counter" else counters["updates"]
            for group in opt.param_groups:  # a learning-rate schedule driven by the counter
                group["lr"] = 1e-3 / (1 + 0.01 * updates)
        ckpt.maybe_save(step, obs=obs)


if __name__ == "__main__":
    main()
