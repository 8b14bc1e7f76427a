"""DQN on Atari Pong in one file, CleanRL style, that resumes exactly after a kill.

The namedschema lines are marked ``# namedschema``: a replay buffer
(uniform or prioritized) and a ``RunCheckpoint`` that tracks the networks, the
optimizer, the buffer, the vector env (ALE emulator states included) and the
generators. Kill the process at any moment (SIGKILL included) and run the same
command again: it continues from the last checkpoint, and on the CPU with
deterministic torch it ends bit for bit where the uninterrupted run ends.

    python examples/dqn_pong.py --total-timesteps 200000 --checkpoint pong.nsc
    python examples/dqn_pong.py --buffer prioritized --checkpoint pong-per.nsc

Without ``--checkpoint`` it is the same program without checkpoints (the twin).
``--digest FILE`` writes a SHA-256 of the final state (networks, optimizer,
buffer, emulators, generators) for comparing twins.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import signal
import sys

import ale_py
import gymnasium as gym
import numpy as np
import torch
from torch import nn

import namedschema

gym.register_envs(ale_py)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help keeps the description's lines and shows every default."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="dqn_pong.py", formatter_class=_HelpFormatter,
        description=__doc__.split("\n\n", 1)[0] + "\n\n" + __doc__.split("\n\n", 2)[1],
        epilog="The defaults fit a laptop: a 20,000-step buffer holds 1.05 GiB of frames\n"
               "(obs and next_obs, 4x84x84 bytes each), and its checkpoint takes the disk\n"
               "of what the buffer holds (an empty buffer's zeros are holes of a sparse\n"
               "file). CleanRL's Atari runs use --buffer-size 1000000 (53 GiB).")
    p.add_argument("--seed", type=int, default=1, help="seed of every generator and env")
    p.add_argument("--total-timesteps", type=int, default=500_000,
                   help="steps of the vector env (each steps every env once)")
    p.add_argument("--num-envs", type=int, default=1, help="Pong envs in the SyncVectorEnv")
    p.add_argument("--buffer", choices=["uniform", "prioritized"], default="uniform",
                   help="replay buffer: namedschema.ReplayBuffer or PrioritizedReplayBuffer")
    p.add_argument("--buffer-size", type=int, default=20_000,
                   help="transitions the replay buffer holds (55 KiB each)")
    p.add_argument("--learning-rate", type=float, default=1e-4, help="Adam's learning rate")
    p.add_argument("--gamma", type=float, default=0.99, help="discount factor")
    p.add_argument("--target-network-frequency", type=int, default=1000,
                   help="steps between copies of the Q-network into the target network")
    p.add_argument("--batch-size", type=int, default=32, help="transitions per update")
    p.add_argument("--start-e", type=float, default=1.0, help="epsilon at the start")
    p.add_argument("--end-e", type=float, default=0.01, help="epsilon at the end")
    p.add_argument("--exploration-fraction", type=float, default=0.1,
                   help="share of --total-timesteps over which epsilon goes down")
    p.add_argument("--learning-starts", type=int, default=10_000,
                   help="steps before the first update")
    p.add_argument("--train-frequency", type=int, default=4, help="steps between updates")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--checkpoint", metavar="FILE",
                   help="checkpoint file, resumed from if it exists; without it the run "
                        "saves nothing (the twin of a checkpointed run)")
    p.add_argument("--save-every", type=int, default=10_000, help="steps between checkpoints")
    p.add_argument("--digest", metavar="FILE",
                   help="write a SHA-256 of the final state here (for twin tests)")
    p.add_argument("--kill-at", type=int, default=-1,
                   help="SIGKILL itself at this step, once the last checkpoint is written "
                        "(-1: never)")
    return p.parse_args(argv)


def make_env(seed):
    def thunk():
        env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.25)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, noop_max=30)
        env = gym.wrappers.FrameStackObservation(env, 4)
        env.action_space.seed(seed)
        # The wrappers' observation spaces (and the vector env's, made from them) hold
        # generators drawn from OS entropy when a wrapper reads them (FrameStackObservation
        # and SyncVectorEnv's batch_space do). Nothing samples them, but the checkpoint
        # keeps them: seeded, two runs of the same command keep the same state.
        layer = env
        while layer is not None:
            layer.observation_space.seed(seed)
            layer = getattr(layer, "env", None)
        return env
    return thunk


class QNetwork(nn.Module):
    def __init__(self, n_actions):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(),
            nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, n_actions))

    def forward(self, x):
        return self.network(x / 255.0)


class Transition(namedschema.NamedArrayTuple):   # one step, as the buffer stores it
    obs: np.ndarray
    next_obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    done: np.ndarray


def linear_schedule(start, end, duration, t):
    return max(end, start + (end - start) * t / duration)


def state_digest(*parts) -> str:
    """SHA-256 over every array and number of the given state dicts (for twin tests)."""
    h = hashlib.sha256()

    def walk(x):
        if isinstance(x, dict):
            for k in sorted(x, key=str):
                h.update(str(k).encode())
                walk(x[k])
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, torch.Tensor):
            walk(x.detach().cpu().numpy())
        elif isinstance(x, np.ndarray):
            h.update(f"{x.dtype.str}{x.shape}".encode())
            h.update(np.ascontiguousarray(x).tobytes())
        else:
            h.update(repr(x).encode())
    for part in parts:
        walk(part)
    return h.hexdigest()


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.deterministic = True   # as CleanRL; CPU ops here are deterministic
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    envs = gym.vector.SyncVectorEnv([make_env(args.seed + i) for i in range(args.num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    n_actions = envs.single_action_space.n
    q_network = QNetwork(n_actions)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(n_actions)
    target_network.load_state_dict(q_network.state_dict())

    example = Transition(np.zeros((4, 84, 84), np.uint8), np.zeros((4, 84, 84), np.uint8),
                         np.int64(0), np.float32(0), np.bool_(False))
    prioritized = args.buffer == "prioritized"
    if prioritized:                                                    # namedschema
        rb = namedschema.PrioritizedReplayBuffer(example, args.buffer_size, seed=args.seed)
    else:                                                              # namedschema
        rb = namedschema.ReplayBuffer(example, args.buffer_size, seed=args.seed)

    obs, _ = envs.reset(seed=args.seed)
    start = 0
    if args.checkpoint:                                                # namedschema
        ckpt = namedschema.RunCheckpoint(args.checkpoint, every_steps=args.save_every)
        ckpt.track(q_network=q_network, target_network=target_network, optimizer=optimizer,
                   replay=rb, envs=envs)
        if ckpt.restore():
            start, obs = ckpt.next_step, ckpt.loop["obs"]
            print(f"resumed at step {start}", file=sys.stderr, flush=True)

    for global_step in range(start, args.total_timesteps):
        if global_step == args.kill_at:           # (tests: a kill between checkpoints)
            if args.checkpoint:
                ckpt.wait()     # the last checkpoint is written: the resume point is sure
            os.kill(os.getpid(), signal.SIGKILL)
        epsilon = linear_schedule(args.start_e, args.end_e,
                                  args.exploration_fraction * args.total_timesteps, global_step)
        if random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            with torch.no_grad():
                actions = q_network(torch.as_tensor(obs)).argmax(dim=1).numpy()
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        real_next_obs = next_obs.copy()
        for i in np.flatnonzero(terminations | truncations):
            real_next_obs[i] = infos["final_obs"][i]
        rb.extend(Transition(obs, real_next_obs, actions, rewards.astype(np.float32),
                             terminations))
        obs = next_obs

        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            if prioritized:
                rb.beta = linear_schedule(0.4, 1.0, args.total_timesteps, global_step)
                data, indices, weights = rb.sample(args.batch_size)
            else:
                data = rb.sample(args.batch_size)
            with torch.no_grad():
                target_max, _ = target_network(torch.as_tensor(data.next_obs)).max(dim=1)
                td_target = torch.as_tensor(data.reward) + args.gamma * target_max * (
                    1 - torch.as_tensor(data.done, dtype=torch.float32))
            old_val = q_network(torch.as_tensor(data.obs)).gather(
                1, torch.as_tensor(data.action)[:, None]).squeeze(1)
            if prioritized:
                td = td_target - old_val
                loss = (torch.as_tensor(weights) * td.pow(2)).mean()
                rb.update_priorities(indices, td.detach().abs().numpy() + 1e-6)
            else:
                loss = nn.functional.mse_loss(td_target, old_val)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if global_step % args.target_network_frequency == 0:
            target_network.load_state_dict(q_network.state_dict())
        if args.checkpoint:                                            # namedschema
            ckpt.maybe_save(global_step, obs=obs)

    if args.digest:
        ale_states = [np.frombuffer(e.unwrapped.ale.cloneState(include_rng=True).serialize(),
                                    np.uint8) for e in envs.envs]
        parts = {"q_network": q_network.state_dict(), "target": target_network.state_dict(),
                 "optimizer": optimizer.state_dict(), "replay": rb.state_dict(),
                 "emulators": ale_states, "obs": obs,
                 "env_rngs": [e.unwrapped.np_random.bit_generator.state for e in envs.envs],
                 "space_rng": envs.single_action_space.np_random.bit_generator.state,
                 "global_rngs": [random.getstate(), np.random.get_state(),
                                 torch.get_rng_state()]}
        digest = "".join(f"{k} {state_digest(v)}\n" for k, v in parts.items())
        with open(args.digest, "w") as f:
            f.write(digest)
    envs.close()


if __name__ == "__main__":
    main()
