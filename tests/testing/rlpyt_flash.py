"""The README's rlpyt example as a script (real rlpyt from RLPYT_SRC), for check-resume.

Run in a fresh directory: ``run.nsc`` is written there. ``--steps`` sets
``n_steps`` (the README's 200 by default).
"""

import os
import sys

sys.path.append(os.environ["RLPYT_SRC"])

import numpy as np  # noqa: E402
from rlpyt.agents.dqn.atari.atari_dqn_agent import AtariDqnAgent  # noqa: E402
from rlpyt.algos.dqn.dqn import DQN  # noqa: E402
from rlpyt.envs.base import Env, EnvInfo, EnvStep  # noqa: E402
from rlpyt.runners.minibatch_rl import MinibatchRl  # noqa: E402
from rlpyt.samplers.serial.sampler import SerialSampler  # noqa: E402
from rlpyt.spaces.int_box import IntBox  # noqa: E402

from namedschema.rlpyt import resumable  # noqa: E402


class Flash(Env):  # a tiny stand-in for an Atari game: press the button that lit up
    def __init__(self):
        self.rng, self.lit = np.random.RandomState(0), 0
        self._action_space = IntBox(low=0, high=4)
        self._observation_space = IntBox(low=0, high=256, shape=(1, 8, 8), dtype="uint8")

    def seed(self, seed):
        self.rng = np.random.RandomState(seed)

    def reset(self):
        self.lit = int(self.rng.randint(4))
        frame = np.zeros((1, 8, 8), np.uint8)
        frame[0, self.lit] = 255
        return frame

    def step(self, action):
        reward = float(action == self.lit)
        return EnvStep(self.reset(), np.float32(reward), False, EnvInfo())


def main():
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 200
    sampler = SerialSampler(EnvCls=Flash, env_kwargs={}, batch_T=4, batch_B=2)
    algo = DQN(replay_size=1000, min_steps_learn=64, batch_size=8, replay_ratio=1)
    agent = AtariDqnAgent(model_kwargs=dict(channels=[4], kernel_sizes=[2], strides=[1],
                                            paddings=[0], fc_sizes=16))
    runner = MinibatchRl(algo=algo, agent=agent, sampler=sampler, n_steps=steps,
                         log_interval_steps=100, seed=1)
    runner = resumable(runner, "run.nsc", every_steps=80)
    runner.train()


if __name__ == "__main__":
    main()
