"""SB3's ``ReplayBuffer`` interface, as CleanRL's DQN scripts call it, over ``namedschema.ReplayBuffer``.

CleanRL's scripts store transitions in Stable-Baselines3's ``ReplayBuffer``, which
``RunCheckpoint`` tracks as it is (``ckpt.track(rb=rb)``). To use
:class:`namedschema.ReplayBuffer` instead, change one import line of
``examples/cleanrl_dqn.py`` or ``examples/cleanrl_dqn_atari.py``::

    from cleanrl_namedschema_buffer import ReplayBuffer   # instead of stable_baselines3's

The buffer then samples from its own generator (seeded with ``torch.initial_seed()``,
which the script set with ``torch.manual_seed(args.seed)``; reading it draws
nothing), not from numpy's global one as SB3's does, so the run is another run
than with SB3's buffer, resumed as exactly.

``optimize_memory_usage=True`` (``cleanrl_dqn_atari.py`` passes it) stores each frame
once, as SB3 does: the buffer is built with ``frames_once=("observations",
"next_observations")`` and ``n_envs``, so a next observation is read from the row of the
env's next step. Unlike SB3's, nothing is lost: where the next observation given differs
from that row's (the true final observation CleanRL passes at a truncation), the buffer
keeps it, and every row can be drawn (SB3 skips the row at its write head), so the
samples are exactly those of ``optimize_memory_usage=False``. As in SB3, it cannot be
combined with ``handle_timeout_termination=True``.
"""

from __future__ import annotations

import numpy as np
import torch
from stable_baselines3.common.type_aliases import ReplayBufferSamples

import namedschema

Transition = namedschema.NamedArrayTupleSchema(
    "Transition", "observations next_observations actions rewards dones")


class ReplayBuffer:
    """Stores CleanRL's transitions in a :class:`namedschema.ReplayBuffer` of ``buffer_size``."""

    def __init__(self, buffer_size, observation_space, action_space, device="cpu", n_envs=1,
                 optimize_memory_usage=False, handle_timeout_termination=True):
        if handle_timeout_termination:
            raise ValueError("cleanrl_namedschema_buffer.ReplayBuffer: handle_timeout_termination"
                             "=True is not supported (CleanRL's DQN scripts pass False)")
        obs = np.zeros(observation_space.shape, observation_space.dtype)
        action = np.zeros(action_space.shape or (1,), action_space.dtype)
        example = Transition(obs, obs, action, np.float32(0), np.float32(0))
        self.device, self.n_envs = torch.device(device), n_envs
        once = ("observations", "next_observations") if optimize_memory_usage else None
        self.buffer = namedschema.ReplayBuffer(example, buffer_size, seed=torch.initial_seed(),
                                               frames_once=once, n_envs=n_envs)
        self.optimize_memory_usage = bool(optimize_memory_usage)

    def add(self, obs, next_obs, action, reward, done, infos):
        n = self.n_envs
        self.buffer.extend(Transition(
            np.asarray(obs).reshape(n, *self.buffer.storage.observations.shape[1:]),
            np.asarray(next_obs).reshape(n, *self.buffer.storage.observations.shape[1:]),
            np.asarray(action).reshape(n, -1), np.asarray(reward, np.float32).reshape(n),
            np.asarray(done, np.float32).reshape(n)))

    def sample(self, batch_size):
        batch = self.buffer.sample(batch_size)
        return ReplayBufferSamples(*(torch.as_tensor(x, device=self.device) for x in (
            batch.observations, batch.actions, batch.next_observations,
            batch.dones.reshape(-1, 1), batch.rewards.reshape(-1, 1))))

    def size(self):
        return len(self.buffer)

    # what RunCheckpoint captures and restores (the buffer's whole state, as data)
    def state_dict(self):
        return self.buffer.state_dict()

    def load_state_dict(self, state):
        self.buffer.load_state_dict(state)
