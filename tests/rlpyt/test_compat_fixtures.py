"""Resume checkpoints written before the one resume engine (commit 3abe8cf) still resume exactly.

The files in tests/rlpyt/data were written by that commit's ``resumable`` (full
saves, ``--sync-full-saves``) at iteration 30 of the twin tests' runs, killed at 35:

    python -m tests.rlpyt.driver CONFIG out.json --ckpt run.nsc --kill-at-itr 35 --sync-full-saves

(then gzipped). Today's code resumes each into a freshly built run, which must then
reproduce the uninterrupted twin from iteration 30 on and end in its state: the
agents' models and epsilon, the optimizers, the replay buffers and sum trees, the
serial envs and the CpuSampler workers' envs and generators, the runner's counters
and the global generators. The Atari file holds one real Pong ``AtariEnv``'s state
(ale-py emulator with its generator, sticky actions) as that commit's handlers
captured it, and the 200 steps it played next.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import textwrap

import pytest

from tests.helpers import run_fresh
from tests.rlpyt.test_twins import assert_same_from, drive, twin

pytestmark = [pytest.mark.rlpyt, pytest.mark.subprocess]

DATA = os.path.join(os.path.dirname(__file__), "data")
WRITTEN_BY = "3abe8cf"


def unpacked(name, target):
    with gzip.open(os.path.join(DATA, f"{name}.nsc.gz"), "rb") as src, \
            open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


@pytest.mark.parametrize("config", ["dqn_prioritized", "r2d1", "sac", "dqn_prioritized_cpu"])
def test_a_checkpoint_written_before_the_one_engine_resumes_exactly(tmp_path, tmp_path_factory,
                                                                     config):
    ckpt = unpacked(f"resume-{config}-{WRITTEN_BY}", tmp_path / "run.nsc")
    resumed = drive(tmp_path, "resumed", config, "--ckpt", ckpt)
    assert resumed["notes"] == []
    # The driver compares what a capture right after the restore gives with the file's
    # state, layout included: the algorithm's optimizers are now captured by the state-kind
    # table's row (int keys stored as data), so only the other components' layouts match
    # the old file's. The optimizers themselves are compared exactly in the final state.
    assert set(resumed["roundtrip"]) == {"agent", "algo", "sampler", "runner"}
    del resumed["roundtrip"]["algo"]
    reference = twin(tmp_path_factory, config)
    if config.endswith("_cpu"):          # as test_twins: trajectory logs follow worker timing
        from tests.rlpyt.test_twins import _without_traj_logs
        reference, resumed = _without_traj_logs(reference), _without_traj_logs(resumed)
    assert_same_from(reference, resumed, 30)


def test_an_atari_env_state_written_before_the_one_engine_plays_on_exactly(tmp_path):
    unpacked(f"atari-env-pong-{WRITTEN_BY}", tmp_path / "atari.nsc")
    code = textwrap.dedent(f"""
        import json, os, sys
        sys.path.append(os.environ["RLPYT_SRC"])
        import numpy as np
        import namedschema
        from namedschema.rlpyt import atari_py_adapter
        from namedschema.rlpyt.resume import state as rstate
        atari_py_adapter.install()
        from rlpyt.envs.atari.atari_env import AtariEnv

        def play(env, n, seed):
            actions = np.random.RandomState(seed)
            np.random.seed(seed)
            out = []
            for _ in range(n):
                obs, reward, done, info = env.step(int(actions.randint(len(env._action_set))))
                out.append([int(obs.sum()), float(reward), bool(done), int(env.ale.lives())])
                if info.traj_done:
                    obs = env.reset()
                    out.append(["reset", int(obs.sum())])
            out.append(env.ale.getRAM().tolist())
            return out

        saved = namedschema.load({str(tmp_path / "atari.nsc")!r}, allow_pickle=True,
                                 mmap_mode="r")
        np.random.seed(0)
        env = AtariEnv(game="pong", repeat_action_probability=0.25, horizon=120)
        ctx = rstate.context(note_once=lambda message: None)
        rstate.restore(env, saved["env"], ctx, "env")
        got = play(env, 200, 2)
        print(json.dumps({{"same": got == json.loads(saved["expected"]),
                          "fresh": len(ctx.fresh_envs)}}))
        """)
    proc = run_fresh(code, timeout=180)
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert out == {"same": True, "fresh": 0}
