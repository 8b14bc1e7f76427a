"""A small run of every built-in kind for RunCheckpoint's hardening tests, and its fingerprint.

``build`` makes a network, its optimizer and scheduler, a CartPole env (TimeLimit
inside), a prioritized replay buffer, a numpy and a torch generator, counters
and an array, tracked in that order (the network first: a restore that failed
half-way would have replaced it already). ``fingerprint`` is everything they
hold, plus the global generators, as comparable plain values (read without
drawing).
"""

from __future__ import annotations

import random

import numpy as np
import torch

import namedschema
from namedschema.state.env import capture_env

gym = __import__("gymnasium")

Step = namedschema.NamedArrayTupleSchema("HardeningStep", "obs reward")


def build(path, *, lr=1e-3, max_episode_steps=500, alpha=0.6, optimizer=None, **kwargs):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = (optimizer or torch.optim.Adam)(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    env = gym.make("CartPole-v1", max_episode_steps=max_episode_steps)
    rb = namedschema.PrioritizedReplayBuffer(Step(np.zeros(3, np.float32), np.float32(0)), 8,
                                             alpha=alpha, seed=1)
    run = {"net": net, "opt": opt, "sched": sched, "env": env, "rb": rb,
           "rng": np.random.default_rng(3), "gen": torch.Generator().manual_seed(4),
           "counters": {"n": 0}, "arr": np.zeros(3)}
    kwargs.setdefault("background", False)
    ckpt = namedschema.RunCheckpoint(path, **kwargs).track(**run)
    return ckpt, run


def advance(run, steps=3):
    """Train a little so that every part holds a non-initial state."""
    run["env"].reset(seed=0)
    for i in range(steps):
        run["env"].step(i % 2)
        loss = run["net"](torch.ones(3) * run["rng"].random()).sum()
        run["opt"].zero_grad()
        loss.backward()
        run["opt"].step()
        run["sched"].step()
        run["rb"].add(Step(np.full(3, i, np.float32), np.float32(i)))
        run["counters"]["n"] += 1
        run["arr"][i % 3] = torch.rand(1, generator=run["gen"]).item()
        random.random()
        np.random.random()


def canon(value):
    """``value`` as nested plain Python values that compare by content."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape),
                value.detach().cpu().contiguous().numpy().tobytes())
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return ("dict", sorted(((repr(k), canon(v)) for k, v in value.items()),
                               key=lambda kv: kv[0]))
    if isinstance(value, (list, tuple)):
        return ("seq", [canon(v) for v in value])
    if isinstance(value, np.generic):
        return canon(value.item())
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, repr(value))


def fingerprint(run):
    env_state, _ = capture_env(run["env"], "env")
    return canon({
        "net": run["net"].state_dict(), "opt": run["opt"].state_dict(),
        "groups": [{k: v for k, v in g.items() if k != "params"}
                   for g in run["opt"].param_groups],
        "sched": run["sched"].state_dict(), "env": env_state,
        "rb": run["rb"].state_dict(), "rb_alpha": run["rb"].alpha,
        "rng": run["rng"].bit_generator.state, "gen": run["gen"].get_state(),
        "counters": run["counters"], "arr": run["arr"], "python": random.getstate(),
        "numpy": np.random.get_state(), "torch": torch.get_rng_state()})


# -- the compatibility fixture (tests/training/data/run-checkpoint-3abe8cf.nsc.gz) ------

def build_compat(path, **kwargs):
    """:func:`build`'s run and a ``random.Random``, a ``RandomState`` and an ALE Pong env
    (sticky actions: the emulator's own generator is drawn), as the fixture was written."""
    import ale_py
    gym.register_envs(ale_py)
    ckpt, run = build(path, **kwargs)
    more = {"pyrng": random.Random(5), "rs": np.random.RandomState(6),
            "pong": gym.make("ALE/Pong-v5", repeat_action_probability=0.25, frameskip=4)}
    ckpt.track(**more)
    run.update(more)
    return ckpt, run


def advance_compat(run, steps=3):
    """:func:`advance`, and a draw of each extra generator and a few Pong steps."""
    advance(run, steps)
    if run["pong"].unwrapped.ale.getFrameNumber() == 0:
        run["pong"].reset(seed=1)
    for i in range(steps * 4):
        run["pong"].step(i % 3)
    run["pyrng"].random()
    run["rs"].random_sample()


def compat_digest(run):
    """A digest of :func:`fingerprint` and the extra parts (the Pong env's RAM and screen)."""
    import hashlib
    pong = run["pong"].unwrapped.ale
    return hashlib.sha256(repr((fingerprint(run), canon(run["pyrng"].getstate()),
                                canon(run["rs"].get_state()), canon(pong.getRAM()),
                                canon(pong.getScreenRGB()))).encode()).hexdigest()
