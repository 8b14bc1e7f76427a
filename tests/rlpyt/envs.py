"""Small seeded rlpyt environments for the resume twin tests (no Atari ROMs needed).

AtariLike   uint8 frame stacks (2 x 16 x 16), IntBox actions, episodic lives:
            ``traj_done`` only when the last life is lost, as rlpyt's AtariEnv
ContinuousLike  FloatBox observations and actions (for SAC), with time limits

Each env draws from its own ``np.random.RandomState`` (seeded by rlpyt's
``set_envs_seeds`` through ``seed()``), so a resume is exact only if that
state is restored too.
"""

import time
from collections import namedtuple

import numpy as np
from rlpyt.envs.base import Env, EnvStep
from rlpyt.spaces.float_box import FloatBox
from rlpyt.spaces.int_box import IntBox

AtariLikeInfo = namedtuple("AtariLikeInfo", ["game_score", "traj_done"])
ContinuousInfo = namedtuple("ContinuousInfo", ["timeout"])


class AtariLike(Env):
    """A moving bright square; the right action scores, wrong ones may cost a life."""

    def __init__(self, n_frames=2, size=16, n_actions=4, lives=3, max_steps=40, delay=0.0):
        self.n_frames, self.size, self.n_lives = n_frames, size, lives
        self.delay = delay   # seconds per step: paces an async sampler
        self.max_steps = max_steps
        self._action_space = IntBox(low=0, high=n_actions)
        self._observation_space = IntBox(low=0, high=256, shape=(n_frames, size, size),
                                         dtype="uint8")
        self.rng = np.random.RandomState(0)
        self.frames = np.zeros((n_frames, size, size), np.uint8)
        self.lives = lives
        self.score = 0.0
        self.t = 0
        self.pos = 0

    def seed(self, seed):
        self.rng = np.random.RandomState(seed)

    def _frame(self):
        frame = self.rng.randint(0, 32, (self.size, self.size)).astype(np.uint8)
        r, c = divmod(self.pos, self.size - 3)
        frame[r % (self.size - 3):r % (self.size - 3) + 3, c:c + 3] = 255
        return frame

    def _push(self, frame):
        self.frames[:-1] = self.frames[1:]
        self.frames[-1] = frame
        return self.frames.copy()

    def reset(self):
        self.frames[:] = 0
        self.lives, self.score, self.t = self.n_lives, 0.0, 0
        self.pos = int(self.rng.randint(0, (self.size - 3) ** 2))
        return self._push(self._frame())

    def step(self, action):
        if self.delay:
            time.sleep(self.delay)
        self.t += 1
        target = self.pos % self._action_space.n
        reward = 1.0 if int(action) == target else -0.1 * float(self.rng.rand() < 0.5)
        self.score += reward
        life_lost = int(action) != target and self.rng.rand() < 0.15
        if life_lost:
            self.lives -= 1
        self.pos = int((self.pos + 1 + self.rng.randint(0, 3)) % (self.size - 3) ** 2)
        game_over = self.lives <= 0 or self.t >= self.max_steps
        obs = self._push(self._frame())
        # A 0-d float32 array, as rlpyt's AtariEnv gives (its samples buffer is float32).
        info = AtariLikeInfo(game_score=np.array(self.score, np.float32), traj_done=game_over)
        # Episodic lives: done at every life lost, traj_done only at game over.
        return EnvStep(obs, np.float32(reward), life_lost or game_over, info)

    @property
    def horizon(self):
        return self.max_steps


class UnpicklableAtariLike(AtariLike):
    """AtariLike holding a lambda: its state cannot be pickled, so a resume resets it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.callback = lambda: None


class ContinuousLike(Env):
    """A point pushed towards a random goal in 3-D; 2-D continuous actions."""

    def __init__(self, max_steps=25):
        self.max_steps = max_steps
        self._action_space = FloatBox(low=-1, high=1, shape=(2,))
        self._observation_space = FloatBox(low=-10, high=10, shape=(3,))
        self.rng = np.random.RandomState(0)
        self.state = np.zeros(3, np.float32)
        self.t = 0

    def seed(self, seed):
        self.rng = np.random.RandomState(seed)

    def reset(self):
        self.t = 0
        self.state = self.rng.uniform(-1, 1, 3).astype(np.float32)
        return self.state.copy()

    def step(self, action):
        self.t += 1
        action = np.clip(np.asarray(action, np.float32), -1, 1)
        self.state[:2] += 0.1 * action
        self.state[2] += 0.05 * self.rng.standard_normal()
        reward = -float(np.sum(self.state[:2] ** 2)) + 0.01 * self.rng.rand()
        timeout = self.t >= self.max_steps
        return EnvStep(self.state.copy(), np.float32(reward), timeout,
                       ContinuousInfo(timeout=timeout))

    @property
    def horizon(self):
        return self.max_steps


class NoopAtariLike(AtariLike):
    """AtariLike that starts like rlpyt's ``AtariEnv``: ``__init__`` calls ``reset()``,
    and ``reset()`` plays a random number of no-ops drawn from the *global*
    ``np.random`` (the process's, which rlpyt's ``set_seed`` seeds)."""

    def __init__(self, max_start_noops=30, **kwargs):
        super().__init__(**kwargs)
        self.max_start_noops = max_start_noops
        self.reset()

    def reset(self):
        obs = super().reset()
        for _ in range(np.random.randint(0, self.max_start_noops + 1)):
            self.pos = int((self.pos + 1) % (self.size - 3) ** 2)
            obs = self._push(self._frame())
        return obs
