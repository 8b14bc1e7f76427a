"""Stable-Baselines3 DQN on CartPole-v1 that resumes exactly after a kill.

A plain SB3 script with one namedschema line: ``namedschema.sb3.resumable``
wraps the built model, so ``model.learn(total_timesteps=N)`` checkpoints the
whole run (policy, target network, optimizer, replay buffer, vector env,
counters, generators) every ``--save-every`` env steps and, when the
checkpoint exists, continues the run from it. Kill it at any moment and run
the same command again: it ends where the uninterrupted run ends.

    python examples/sb3_dqn_cartpole.py --total-timesteps 20000 --checkpoint dqn.nsc
    namedschema check-resume -- python examples/sb3_dqn_cartpole.py
"""

from __future__ import annotations

import argparse

import torch
from stable_baselines3 import DQN

import namedschema.sb3


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--total-timesteps", type=int, default=3_000, help="env steps of the run")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, env and generators")
    p.add_argument("--checkpoint", default="sb3_dqn_cartpole.nsc", metavar="FILE",
                   help="checkpoint file, resumed from if it exists")
    p.add_argument("--save-every", type=int, default=250, help="env steps between checkpoints")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    model = DQN("MlpPolicy", "CartPole-v1", seed=args.seed, device="cpu",
                learning_starts=500, buffer_size=10_000, batch_size=32, train_freq=4,
                target_update_interval=250, exploration_fraction=0.3,
                policy_kwargs={"net_arch": [64, 64]})
    namedschema.sb3.resumable(model, args.checkpoint, every_steps=args.save_every)  # namedschema
    model.learn(total_timesteps=args.total_timesteps)


if __name__ == "__main__":
    main()
