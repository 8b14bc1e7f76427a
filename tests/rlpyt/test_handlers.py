"""Handlers users write: docs/rlpyt.rst's "Adding a class" example, run as written.

The example (an env whose simulator cannot be pickled, and its handler) is
taken from the docs and used as the env of a SAC run on a SerialSampler
(the driver's ``sac`` config): SIGKILLed between checkpoints and resumed, it
equals the uninterrupted run bit for bit and nothing is said. Also: what
``restore`` is handed (writable copies by default, the checkpoint's
read-only arrays with ``writable=False``), and that without a handler the
env is said at start. With the real rlpyt (opt-in: RLPYT_SRC).
"""

from __future__ import annotations

import json
import os
import re
import textwrap

import pytest

from tests.helpers import REPO_ROOT, run_fresh
from tests.rlpyt.test_twins import assert_same_from, drive

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = [pytest.mark.rlpyt, pytest.mark.subprocess]


def docs_example() -> str:
    """The first Python block of docs/rlpyt.rst's "Adding a class" section."""
    with open(os.path.join(REPO_ROOT, "docs", "rlpyt.rst")) as f:
        text = f.read()
    section = text[text.index("Adding a class\n---"):]
    match = re.search(r"\.\. code-block:: python\n\n((?:    .*\n|\n)+)", section)
    return textwrap.dedent(match.group(1))


@pytest.fixture
def example_file(tmp_path):
    path = tmp_path / "sim_example.py"
    path.write_text(docs_example())
    return path


def test_docs_example_resumes_exactly(tmp_path, example_file):
    env = f"{example_file}:SimEnv"
    twin = drive(tmp_path, "twin", "sac", "--env-class", env)
    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", "sac", "--env-class", env, "--ckpt", ckpt, "--kill-at-itr", 35,
          expect_kill=True)
    resumed = drive(tmp_path, "resumed", "sac", "--env-class", env, "--ckpt", ckpt)
    assert resumed["notes"] == []
    assert_same_from(twin, resumed, 30)


RESTORE = """
import json, os, sys
sys.path.append(os.environ["RLPYT_SRC"])
import importlib.util
import numpy as np
import namedschema
from namedschema.rlpyt.resume import state as rstate
spec = importlib.util.spec_from_file_location("sim_example", {path!r})
example = importlib.util.module_from_spec(spec)
sys.modules["sim_example"] = example
spec.loader.exec_module(example)

def Ctx():
    return rstate.context(note_once=lambda message: None)
"""


def test_restore_gets_writable_copies_unless_asked_not_to(tmp_path, example_file):
    """The example's set_state keeps the array it gets and writes into it later."""
    out = run_fresh(RESTORE.format(path=str(example_file)) + textwrap.dedent(f"""
        out = {{}}
        for writable in (True, False):
            if not writable:
                rstate.register_handler(example.SimEnv, example.capture, example.restore,
                                        attributes=["sim"], writable=False)
            a = example.SimEnv()
            a.reset()
            a.step(np.ones(2))
            path = os.path.join({str(tmp_path)!r}, f"env{{writable}}.nsc")
            namedschema.save(rstate.capture(a, Ctx()), path, allow_pickle=True)
            state = namedschema.load(path, allow_pickle=True, mmap_mode="r")
            b = example.SimEnv()
            rstate.restore(b, state, Ctx(), "env")
            try:
                same = bool(np.array_equal(a.step(np.ones(2))[0], b.step(np.ones(2))[0]))
                out[str(writable)] = {{"same": same, "t": b.t}}
            except ValueError as exc:
                out[str(writable)] = {{"error": str(exc)}}
        print(json.dumps(out))
        """), timeout=120)
    out = json.loads(proc_stdout(out))
    assert out["True"] == {"same": True, "t": 2}
    assert "read-only" in out["False"]["error"]


def proc_stdout(proc):
    return proc.stdout.decode().strip().splitlines()[-1]


def test_without_a_handler_the_env_is_said_at_start(tmp_path, example_file):
    """Negative: SimEnv without its handler cannot be saved, and check() says so."""
    code = docs_example().replace("register_handler(SimEnv", "(lambda *a, **k: None)(SimEnv")
    path = tmp_path / "no_handler.py"
    path.write_text(code)
    proc = run_fresh(RESTORE.format(path=str(path)) + textwrap.dedent("""
        print(json.dumps(rstate.check(example.SimEnv(), Ctx())))
        """), timeout=120)
    reasons = json.loads(proc_stdout(proc))
    assert len(reasons) == 1 and "cannot be pickled" in reasons[0] and "lock" in reasons[0]


def test_a_subclass_handler_has_the_last_word_over_the_env_handler(tmp_path):
    """Which attributes the generic Env handler leaves to a subclass's handler, and order."""
    proc = run_fresh(RESTORE.format(path=str(tmp_path / "none.py")).replace(
        "spec.loader.exec_module(example)", "") + textwrap.dedent("""
        from rlpyt.envs.base import Env

        class Base(Env):
            def __init__(self):
                self.t = 0
                self.callback = lambda: None              # not picklable

        class Undeclared(Base):                           # handler says nothing
            pass

        class Declared(Base):                             # handler owns "t" only
            pass

        def capture(env, ctx):
            return {"t": env.t}

        def restore(env, state, ctx):
            env.t = state["t"] + 1000                     # runs after the generic one

        rstate.register_handler(Undeclared, capture, restore)
        rstate.register_handler(Declared, capture, restore, attributes=["t"])
        out = {}
        for cls in (Base, Undeclared, Declared):
            a = cls()
            a.t = 5
            reasons = rstate.check(a, Ctx())
            b = cls()
            fresh_callback = b.callback
            ctx = Ctx()
            ctx.fresh_envs = []
            rstate.restore(b, rstate.capture(a, ctx), ctx, "env")
            out[cls.__name__] = {"reasons": len(reasons), "t": b.t,
                                 "kept": b.callback is fresh_callback,
                                 "fresh": len(ctx.fresh_envs)}
        print(json.dumps(out))
        """), timeout=120)
    out = json.loads(proc_stdout(proc))
    assert out["Base"] == {"reasons": 1, "t": 0, "kept": True, "fresh": 1}
    assert out["Undeclared"] == {"reasons": 0, "t": 1005, "kept": True, "fresh": 0}
    assert out["Declared"] == {"reasons": 1, "t": 1005, "kept": True, "fresh": 1}
