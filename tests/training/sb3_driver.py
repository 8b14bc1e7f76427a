"""One small seeded Stable-Baselines3 run, for the twin tests of namedschema.sb3.resumable.

python -m tests.training.sb3_driver CASE --digest OUT [--checkpoint PATH [--every N]]
        [--kill-at STEP] [--kill-in-save N] [--sb3-save PATH]

Without ``--checkpoint`` the run is SB3 alone: namedschema is not imported until
the run is over (the driver checks), then only to read the final state. With it,
the model is wrapped by ``resumable``. ``--kill-at`` SIGKILLs the whole process
group (SubprocVecEnv workers and a background writer included) once the run
reaches that step; ``--kill-in-save N`` does so while the N-th checkpoint is being
written (at its first write to the file). ``--sb3-save`` is the route the suite
must tell apart: SB3's own save + save_replay_buffer every ``--every`` steps, and
``load`` + ``load_replay_buffer`` when the files exist. The digest is a JSON of
hashes of every part of the final state (times left out), written at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sys

import numpy as np

TIME_KEYS = frozenset({"t_start", "episode_times", "t"})   # wall-clock times: never equal


def build(case: str, vec_env_cls_name: str | None = None):
    import torch
    from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise
    from stable_baselines3.common.vec_env import (
        DummyVecEnv,
        SubprocVecEnv,
        VecFrameStack,
        VecNormalize,
    )

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    algo, env_name, n_envs, vec = CASES[case]
    vec_cls = SubprocVecEnv if vec == "subproc" else DummyVecEnv
    kwargs = {}
    if vec == "subproc":
        kwargs["vec_env_kwargs"] = {"start_method": "forkserver"}
    if env_name == "pong":
        env = VecFrameStack(make_atari_env(make_pong, n_envs=n_envs, seed=0,
                                           vec_env_cls=vec_cls, **kwargs), 4)
    else:
        env = make_vec_env(env_name, n_envs=n_envs, seed=0, vec_env_cls=vec_cls, **kwargs)
    if vec == "normalize":     # over DummyVecEnv: running stats, _last_original_obs
        env = VecNormalize(env, gamma=0.99)
    small = {"net_arch": [32]}
    # gSDE: noise matrices drawn at each rollout's start (and every 4 steps for PPO here)
    sde = {"use_sde": True, "sde_sample_freq": 4 if algo == "ppo" else -1} \
        if case.endswith("_sde") else {}
    if algo == "dqn":
        policy = "CnnPolicy" if env_name == "pong" else "MlpPolicy"
        model = DQN(policy, env, learning_starts=60, buffer_size=240, train_freq=4,
                    batch_size=16, target_update_interval=50, exploration_fraction=0.5,
                    policy_kwargs={} if env_name == "pong" else small, seed=0,
                    learning_rate=1e-3)
    elif algo in ("sac", "td3", "ddpg"):
        cls = {"sac": SAC, "td3": TD3, "ddpg": DDPG}[algo]
        extra = {}
        if algo == "td3":
            extra["action_noise"] = NormalActionNoise(np.zeros(1), 0.1 * np.ones(1))
        if algo == "ddpg":
            extra["action_noise"] = OrnsteinUhlenbeckActionNoise(np.zeros(1), 0.2 * np.ones(1))
        model = cls("MlpPolicy", env, learning_starts=60, buffer_size=200, batch_size=16,
                    policy_kwargs={"net_arch": [32, 32]}, seed=0, **extra, **sde)
    elif algo == "ppo":
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=2,
                    policy_kwargs=small, seed=0, **sde)
    elif algo == "a2c":
        model = A2C("MlpPolicy", env, n_steps=8, policy_kwargs=small, seed=0)
    return model


def make_pong(**kwargs):
    """Real Pong; importing ale_py registers it (also in a SubprocVecEnv worker)."""
    import ale_py
    import gymnasium as gym
    gym.register_envs(ale_py)
    return gym.make("PongNoFrameskip-v4", **kwargs)


# case: (algorithm, env, n_envs, vector env)
CASES = {
    "dqn_cartpole": ("dqn", "CartPole-v1", 1, "dummy"),
    "ppo_cartpole": ("ppo", "CartPole-v1", 2, "dummy"),
    "ppo_cartpole_subproc": ("ppo", "CartPole-v1", 2, "subproc"),
    "sac_pendulum": ("sac", "Pendulum-v1", 2, "dummy"),
    "td3_pendulum": ("td3", "Pendulum-v1", 1, "dummy"),
    "ddpg_pendulum": ("ddpg", "Pendulum-v1", 1, "dummy"),
    "a2c_cartpole": ("a2c", "CartPole-v1", 2, "dummy"),
    "dqn_pong": ("dqn", "pong", 2, "subproc"),
    "ppo_cartpole_vecnormalize": ("ppo", "CartPole-v1", 2, "normalize"),
    "dqn_cartpole_vecnormalize": ("dqn", "CartPole-v1", 1, "normalize"),
    "sac_pendulum_sde": ("sac", "Pendulum-v1", 2, "dummy"),
    "ppo_pendulum_sde": ("ppo", "Pendulum-v1", 2, "dummy"),
}
TOTAL = {"dqn_cartpole": 600, "ppo_cartpole": 384, "ppo_cartpole_subproc": 384,
         "sac_pendulum": 300, "td3_pendulum": 240, "ddpg_pendulum": 240,
         "a2c_cartpole": 320, "dqn_pong": 240, "ppo_cartpole_vecnormalize": 384,
         "dqn_cartpole_vecnormalize": 600, "sac_pendulum_sde": 300, "ppo_pendulum_sde": 384}


# -- the final state, as hashes ----------------------------------------------------------

def _hash(value, out: hashlib._Hash) -> None:
    import torch
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        out.update(f"{value.dtype}{value.shape}".encode())
        out.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            if key not in TIME_KEYS:
                out.update(repr(key).encode())
                _hash(value[key], out)
    elif isinstance(value, (list, tuple)) or type(value).__name__ == "deque":
        out.update(f"[{len(value)}".encode())
        for item in value:
            _hash(item, out)
    else:
        out.update(repr(value).encode())


def digest_of(value) -> str:
    h = hashlib.sha256()
    _hash(value, h)
    return h.hexdigest()[:16]


def final_state(model) -> dict[str, str]:
    import torch
    parts = {"policy": model.policy.state_dict()}
    names, variables = model._get_torch_save_params()
    for name in names[1:]:
        obj = model
        for attr in name.split("."):
            obj = getattr(obj, attr)
        parts[name] = obj.state_dict()
    for name in variables:
        parts[name] = getattr(model, name)
    for name in ("num_timesteps", "_total_timesteps", "_n_updates", "_episode_num",
                 "_n_calls", "exploration_rate", "_current_progress_remaining",
                 "_last_obs", "_last_episode_starts", "_last_original_obs",
                 "ep_info_buffer", "ep_success_buffer"):
        if hasattr(model, name):
            parts[name] = getattr(model, name)
    rb = getattr(model, "replay_buffer", None)
    if rb is not None:
        parts["replay_buffer"] = {k: v for k, v in vars(rb).items()
                                  if isinstance(v, (np.ndarray, int, bool, dict))}
    if model.action_noise is not None:
        parts["action_noise"] = {k: v for k, v in vars(model.action_noise).items()
                                 if not k.startswith("_noises")}
    parts["rng.numpy"] = np.random.get_state()
    parts["rng.python"] = random.getstate()
    parts["rng.torch"] = torch.get_rng_state()
    parts["action_space"] = model.action_space.np_random.bit_generator.state
    # The env, every layer and sub-env (read in the workers): after the run only.
    from namedschema.training import sb3_vec_envs
    from namedschema.training.state_kinds import KindContext
    parts["env"] = sb3_vec_envs.capture(model.env, KindContext("env", ""))
    for layer in parts["env"]["layers"]:
        # VecTransposeImage makes its observation space unseeded and something seeds it
        # from OS entropy (never drawn from): SB3 alone differs there from run to run.
        if layer.get("captured", {}).get("class") == "VecTransposeImage":
            layer["captured"]["attributes"].pop("observation_space")
    out = {name: digest_of(value) for name, value in parts.items()}
    out["env.sub_envs"] = [digest_of(e) for e in parts["env"]["envs"]]
    out["env.layers"] = [{k: digest_of(v) for k, v in layer["captured"]["attributes"].items()}
                         for layer in parts["env"]["layers"] if "captured" in layer]
    return out


# -- kills ---------------------------------------------------------------------------------

def kill_group() -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)


def hook_save_kill(number: int) -> None:
    """SIGKILL the process group at the first write of the number-th checkpoint."""
    from namedschema.training import run_checkpoint
    save, write, pwrite = run_checkpoint.save, os.write, os.pwrite
    state = {"saves": 0, "armed": False}

    def save_(*a, **k):
        state["saves"] += 1
        state["armed"] = state["saves"] == number
        return save(*a, **k)

    def write_(fd, data):
        if state["armed"]:
            kill_group()
        return write(fd, data)

    def pwrite_(fd, data, offset):
        if state["armed"]:
            kill_group()
        return pwrite(fd, data, offset)

    run_checkpoint.save = save_
    os.write, os.pwrite = write_, pwrite_


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--digest", required=True)
    parser.add_argument("--checkpoint")
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--kill-in-save", type=int)
    parser.add_argument("--sb3-save")
    parser.add_argument("--compression", help="resumable's compression= ('zstd', 'auto')")
    args = parser.parse_args(argv)

    from stable_baselines3.common.callbacks import BaseCallback

    class KillAt(BaseCallback):
        def _on_step(self) -> bool:
            if args.kill_at is not None and self.model.num_timesteps >= args.kill_at:
                kill_group()
            return True

    model = build(args.case)
    total = TOTAL[args.case]
    if args.checkpoint:
        from namedschema.sb3 import resumable
        if args.kill_in_save is not None:
            hook_save_kill(args.kill_in_save)
        resumable(model, args.checkpoint, every_steps=args.every,
                  compression=args.compression)
        model.learn(total_timesteps=total, callback=KillAt())
    elif args.sb3_save:
        model = run_with_sb3_save(model, args, total, KillAt())
    else:
        model.learn(total_timesteps=total, callback=KillAt())
        assert "namedschema" not in sys.modules, "SB3 alone imported namedschema"
    state = final_state(model)
    model.env.close()
    with open(args.digest, "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
    return 0


def run_with_sb3_save(model, args, total: int, callback):
    """SB3's own route: save + save_replay_buffer, load + load_replay_buffer."""
    from stable_baselines3.common.callbacks import BaseCallback

    base = args.sb3_save
    if os.path.exists(base + ".zip"):
        env = model.env
        model = type(model).load(base + ".zip", env=env)
        if hasattr(model, "replay_buffer"):
            model.load_replay_buffer(base + ".pkl")

    class Save(BaseCallback):
        def _on_step(self) -> bool:
            if self.model.num_timesteps % args.every == 0:
                self.model.save(base + ".zip")
                if hasattr(self.model, "replay_buffer"):
                    self.model.save_replay_buffer(base + ".pkl")
            return True

    from stable_baselines3.common.callbacks import CallbackList
    model.learn(total_timesteps=total - model.num_timesteps, reset_num_timesteps=False,
                callback=CallbackList([Save(), callback]))
    return model


if __name__ == "__main__":
    sys.exit(main())
