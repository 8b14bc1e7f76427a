"""Exact state of rlpyt's own ``AtariEnv`` on real Pong (opt-in: RLPYT_SRC; needs ale-py).

* ale-py's emulator (through the atari_py adapter), with sticky actions so
  that the emulator's RNG is drawn: an env restored from a checkpoint file
  plays on exactly as the original, frames, rewards, lives and RAM; restored
  without the RNG, it does not.
* atari_py's ctypes emulator, through a ctypes-free stand-in with atari_py's
  method signatures: its pointer is never pickled, native states are freed.
* An emulator of another kind is said at start.
* The small stand-in env of the fast tests has real Pong's state layout.

Each test runs in a fresh interpreter (the adapter adds ``atari_py`` to ``sys.modules``).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import textwrap

import pytest

from tests.helpers import run_fresh
from tests.rlpyt.atari_py_standin import ATARI_PY_SIGNATURES, ALEInterface

PRELUDE = """
import json, os, sys
sys.path.append(os.environ["RLPYT_SRC"])
import numpy as np
import namedschema
from namedschema.rlpyt import atari_py_adapter
from namedschema.rlpyt.resume import state as rstate


def Ctx():  # a resume context whose notes go nowhere
    return rstate.context(note_once=lambda message: None)


def play(env, n, seed):
    actions = np.random.RandomState(seed)
    np.random.seed(seed)                  # AtariEnv.reset draws its no-ops from np.random
    out = []
    for _ in range(n):
        obs, reward, done, info = env.step(int(actions.randint(len(env._action_set))))
        out.append([int(obs.sum()), float(reward), bool(done), int(env.ale.lives())])
        if info.traj_done:
            obs = env.reset()
            out.append(["reset", int(obs.sum())])
    out.append(env.ale.getRAM().tolist())
    return out


def through_file(state, path):
    namedschema.save(state, path, allow_pickle=True)
    return namedschema.load(path, allow_pickle=True, mmap_mode="r")   # read-only maps
"""


def run(body, tmp_path, prefix=""):
    code = PRELUDE + f"os.chdir({str(tmp_path)!r})\n" + prefix + textwrap.dedent(body)
    proc = run_fresh(code, timeout=180)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


ALE_PY_ENV = """
atari_py_adapter.install()
from rlpyt.envs.atari.atari_env import AtariEnv
from namedschema.rlpyt.resume import handlers as _atari_state
from namedschema.state import env as _emulators
kwargs = dict(game="pong", repeat_action_probability=0.25, horizon=120)
np.random.seed(0)
a = AtariEnv(**kwargs)
play(a, 70, 1)
"""

ATARI_PY_ENV = """
import types
from tests.rlpyt import atari_py_standin
module = types.ModuleType("atari_py")
module.ALEInterface = atari_py_standin.ALEInterface
module.get_game_path = atari_py_adapter.get_game_path
module.ale_python_interface = atari_py_standin
sys.modules["atari_py"] = module
sys.modules["atari_py.ale_python_interface"] = atari_py_standin   # pickle finds the class
from rlpyt.envs.atari.atari_env import AtariEnv
from namedschema.rlpyt.resume import handlers as _atari_state
from namedschema.state import env as _emulators
kwargs = dict(game="pong", repeat_action_probability=0.25, horizon=120)
np.random.seed(0)
a = AtariEnv(**kwargs)
play(a, 70, 1)
"""


@pytest.mark.subprocess
@pytest.mark.rlpyt
def test_ale_py_emulator_with_its_rng_resumes_exactly(tmp_path):
    """Sticky actions draw ALE's RNG: restored from a file, the env plays on identically."""
    out = run("""
        ctx = Ctx()
        assert rstate.check(a, ctx) == []
        saved = rstate.capture(a, ctx)
        attrs = saved["rlpyt.envs.base.Env"]["attributes"]
        kept = sorted(attrs)
        state = through_file(saved, "env.nsc")
        expected = play(a, 200, 2)

        b = AtariEnv(**kwargs)
        own = b.ale
        rstate.restore(b, state, ctx, "env")
        got = play(b, 200, 2)
        print(json.dumps({"same": got == expected, "own": b.ale is own,
                          "fresh": ctx.fresh_envs == [], "kept": kept,
                          "resets": sum(1 for x in expected if x[0] == "reset")}))
        """, tmp_path, ALE_PY_ENV)
    assert out["same"] and out["own"] and out["fresh"]
    assert out["resets"] >= 1                 # the horizon ends episodes: resets replay too
    assert "ale" not in out["kept"]
    assert {"_obs", "_max_frame", "_raw_frame_1", "_raw_frame_2", "_lives",
            "_step_counter", "_action_set"} <= set(out["kept"])


@pytest.mark.subprocess
@pytest.mark.rlpyt
def test_negative_without_the_emulators_rng_sticky_actions_diverge(tmp_path):
    """Negative: the same resume with the emulator state saved without its RNG diverges."""
    out = run("""
        def capture_without_rng(env, ctx):
            data = env.ale.cloneState(include_rng=False).serialize()
            return {"ale": {"kind": "ale_py", "state": np.frombuffer(data, np.uint8)}}
        rstate.register_handler(_atari_state.ATARI_ENV, capture_without_rng,
                                lambda env, s, ctx: _emulators.emulator_apply(
                                    env.ale, s["ale"]), attributes=("ale",))
        state = through_file(rstate.capture(a, Ctx()), "env.nsc")
        expected = play(a, 200, 2)
        b = AtariEnv(**kwargs)
        rstate.restore(b, state, Ctx(), "env")
        print(json.dumps({"same": play(b, 200, 2) == expected}))
        """, tmp_path, ALE_PY_ENV)
    assert out["same"] is False


@pytest.mark.subprocess
@pytest.mark.rlpyt
def test_atari_py_ctypes_emulator_resumes_exactly_and_its_pointer_is_never_pickled(tmp_path):
    """atari_py's API: cloneSystemState + encodeState in, decodeState + restoreSystemState out."""
    out = run("""
        ctx = Ctx()
        kind = _emulators.emulator_kind(a.ale)
        reasons = rstate.check(a, ctx)
        saved = rstate.capture(a, ctx)
        pickled_ale = "ale" in saved["rlpyt.envs.base.Env"]["attributes"]
        state = through_file(saved, "env.nsc")
        expected = play(a, 200, 2)
        b = AtariEnv(**kwargs)
        own = b.ale
        rstate.restore(b, state, ctx, "env")
        print(json.dumps({"kind": kind, "reasons": reasons, "pickled_ale": pickled_ale,
                          "same": play(b, 200, 2) == expected, "own": b.ale is own,
                          "other_pointer": b.ale.obj != a.ale.obj,
                          "leaked": len(atari_py_standin.NATIVE_STATES)}))
        """, tmp_path, ATARI_PY_ENV)
    assert out["kind"] == "atari_py" and out["reasons"] == []
    assert out["pickled_ale"] is False
    assert out["same"] and out["own"] and out["other_pointer"]
    assert out["leaked"] == 0


@pytest.mark.subprocess
@pytest.mark.rlpyt
def test_negative_pickling_atari_pys_emulator_shares_a_dangling_pointer(tmp_path):
    """Negative: the generic env handler alone pickles ``ale``: the copy holds A's pointer."""
    out = run("""
        # No AtariEnv handler: the generic Env handler pickles every attribute.
        rstate.register_handler(_atari_state.ATARI_ENV, lambda env, ctx: {},
                                lambda env, s, ctx: None)
        state = through_file(rstate.capture(a, Ctx()), "env.nsc")
        b = AtariEnv(**kwargs)
        rstate.restore(b, state, Ctx(), "env")
        print(json.dumps({"same_pointer": b.ale.obj == a.ale.obj}))
        """, tmp_path, ATARI_PY_ENV)
    assert out["same_pointer"] is True


@pytest.mark.subprocess
@pytest.mark.rlpyt
def test_an_emulator_of_another_kind_is_said_at_start(tmp_path):
    out = run("""
        atari_py_adapter.install()
        from rlpyt.envs.atari.atari_env import AtariEnv
        np.random.seed(0)
        env = AtariEnv(game="pong")

        class Wrapped:                    # some other emulator object
            def __init__(self, ale):
                self.inner = ale
        env.ale = Wrapped(env.ale)
        print(json.dumps({"reasons": rstate.check(env, Ctx())}))
        """, tmp_path)
    assert len(out["reasons"]) == 1
    assert "Wrapped" in out["reasons"][0] and "new episode" in out["reasons"][0]


def test_standin_has_atari_pys_method_signatures():
    """The stand-in's public methods take the parameters atari_py's do."""
    for name, params in ATARI_PY_SIGNATURES.items():
        method = inspect.getattr_static(ALEInterface, name)
        function = method.__func__ if isinstance(method, staticmethod) else method
        got = list(inspect.signature(function).parameters)
        got = got if isinstance(method, staticmethod) else got[1:]
        assert got == params, (name, got, params)
    public = {n for n in vars(ALEInterface) if not n.startswith("_") and n != "Logger"}
    assert public == set(ATARI_PY_SIGNATURES)


@pytest.mark.skipif(not os.environ.get("ATARI_PY_SRC"),
                    reason="set ATARI_PY_SRC to an atari-py checkout to compare its source")
def test_signature_table_matches_atari_py_source():
    """ATARI_PY_SIGNATURES is atari_py/ale_python_interface.py's ALEInterface."""
    path = os.path.join(os.environ["ATARI_PY_SRC"], "atari_py", "ale_python_interface.py")
    with open(path) as f:
        tree = ast.parse(f.read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ALEInterface")
    found = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("__"):
            params = [a.arg for a in node.args.args]
            static = any(getattr(d, "id", None) == "staticmethod" for d in node.decorator_list)
            found[node.name] = params if static else params[1:]
    assert found == ATARI_PY_SIGNATURES


@pytest.mark.subprocess
@pytest.mark.rlpyt
def test_small_stand_in_env_has_real_pongs_state_layout(tmp_path):
    """AtariLike (the fast tests' env) steps and is sampled like rlpyt's AtariEnv on Pong."""
    out = run("""
        atari_py_adapter.install()
        from rlpyt.envs.atari.atari_env import AtariEnv
        from tests.rlpyt.envs import AtariLike
        from rlpyt.spaces.int_box import IntBox

        def layout(env):
            obs = env.reset()
            o, reward, done, info = env.step(0)
            space = env.observation_space
            attrs = rstate.capture(env, Ctx())["rlpyt.envs.base.Env"]["attributes"]
            return {"obs": [o.dtype.str, o.ndim, list(o.shape) == list(space.shape)],
                    "space": [type(space).__name__, str(space.dtype)],
                    "action": type(env.action_space).__name__,
                    "reward": type(reward).__name__, "done": type(done).__name__,
                    "info": list(info._fields),
                    "info_types": [type(v).__name__ for v in info],
                    "score_dtype": str(np.asarray(info.game_score).dtype),
                    "frames_oldest_first": bool(np.array_equal(env.step(0)[0][-2], o[-1])),
                    "arrays": sorted(str(v.dtype) for v in attrs.values()
                                     if isinstance(v, np.ndarray) and v.ndim >= 2)[:1]}
        np.random.seed(0)
        print(json.dumps({"pong": layout(AtariEnv(game="pong")), "small": layout(AtariLike())}))
        """, tmp_path)
    assert out["small"] == out["pong"], out
