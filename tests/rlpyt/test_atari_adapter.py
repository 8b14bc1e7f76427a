"""The atari_py adapter over ale-py: rlpyt's own ``AtariEnv`` plays real Pong.

Opt-in like the other real-rlpyt tests (RLPYT_SRC); needs ale-py and
opencv-python-headless (the ``test`` extra). Each test runs in a fresh
interpreter, since installing the adapter adds ``atari_py`` to ``sys.modules``.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.helpers import run_fresh

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = pytest.mark.rlpyt


def run(body, timeout=120):
    code = "import json, os, sys\nsys.path.append(os.environ['RLPYT_SRC'])\n" + \
        textwrap.dedent(body)
    proc = run_fresh(code, timeout=timeout)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def test_rlpyt_atari_env_plays_pong_as_ale_py_does():
    """Every frame rlpyt's AtariEnv sees is the screen of a plain ale-py emulator."""
    out = run("""
        import numpy as np
        from namedschema.rlpyt import atari_py_adapter
        assert atari_py_adapter.install() is True
        assert atari_py_adapter.install() is True          # again: harmless
        import ale_py
        from rlpyt.envs.atari.atari_env import AtariEnv
        np.random.seed(3)
        env = AtariEnv(game="pong", max_start_noops=0)
        plain = ale_py.ALEInterface()
        plain.setFloat("repeat_action_probability", 0.0)
        plain.loadROM(str(ale_py.roms.get_rom_path("pong")))
        plain.reset_game()
        plain.act(0)                         # AtariEnv's _life_reset after reset_game
        same, rewards = [], 0.0
        for t in range(300):
            a = int(np.random.randint(len(env._action_set)))
            obs, reward, done, info = env.step(a)
            for _ in range(4):
                rewards += plain.act(plain.getMinimalActionSet()[a])
            same.append(bool(np.array_equal(env.ale.getScreenGrayscale(),
                                            plain.getScreenGrayscale())))
            if done:
                break
        print(json.dumps({"same": all(same), "steps": len(same),
                          "actions": env._action_set.tolist(),
                          "dtype": str(env._action_set.dtype),
                          "meanings": env.get_action_meanings(),
                          "obs": list(obs.shape), "obs_dtype": str(obs.dtype),
                          "lives": int(env.ale.lives()),
                          "nonzero": int(np.count_nonzero(obs)),
                          "game_score": float(info.game_score)}))
        """)
    assert out["same"] and out["steps"] == 300
    assert out["actions"] == [0, 1, 3, 4, 11, 12] and out["dtype"] == "int32"
    assert out["meanings"] == ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]
    assert out["obs"] == [4, 104, 80] and out["obs_dtype"] == "uint8"
    assert out["nonzero"] > 1000


def test_adapter_takes_atari_py_calling_conventions():
    """Bytes keys and paths, numpy integer actions, int action sets, ROM lookup errors."""
    out = run("""
        import numpy as np
        from namedschema.rlpyt import atari_py_adapter
        atari_py_adapter.install()
        import atari_py
        ale = atari_py.ALEInterface()
        ale.setInt(b"random_seed", 123)
        ale.setFloat(b"repeat_action_probability", 0.25)
        ale.setBool(b"color_averaging", False)
        ale.loadROM(atari_py.get_game_path("pong").encode())
        out = {"seed": ale.getInt(b"random_seed"),
               "sticky": round(ale.getFloat("repeat_action_probability"), 6),
               "reward": ale.act(np.int64(3)),
               "legal": ale.getLegalActionSet().dtype.kind,
               "module": type(ale).__module__,
               "games": "pong" in atari_py.list_games(),
               "is_ale_py": isinstance(ale, __import__("ale_py").ALEInterface)}
        try:
            atari_py.get_game_path("no_such_game")
        except ImportError as exc:
            out["missing"] = str(exc)
        print(json.dumps(out))
        """)
    assert out["seed"] == 123 and out["sticky"] == 0.25 and out["reward"] == 0
    assert out["legal"] == "i" and out["module"] == "atari_py" and out["games"]
    assert out["is_ale_py"]
    assert "no_such_game" in out["missing"]


def test_a_real_atari_py_is_left_alone(tmp_path):
    """install() only stands in when no atari_py can be imported."""
    (tmp_path / "atari_py").mkdir()
    (tmp_path / "atari_py" / "__init__.py").write_text("REAL = True\n")
    out = run(f"""
        sys.path.insert(0, {str(tmp_path)!r})
        from namedschema.rlpyt import atari_py_adapter
        installed = atari_py_adapter.install()
        import atari_py
        print(json.dumps({{"installed": installed, "real": getattr(atari_py, "REAL", False)}}))
        """)
    assert out == {"installed": False, "real": True}
