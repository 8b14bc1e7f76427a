"""``namedschema demo`` reports what its labels say, readably: the load column times the
load alone (not importing namedschema's checkpoint module), and a terminal shows one
progress bar at a time."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.subprocess

# A meta-path finder that makes importing namedschema.checkpoint._read take 1 s.
_SLOW_IMPORT = """
import importlib.abc, sys, time
class Slow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "namedschema.checkpoint._read":
            time.sleep(1.0)
        return None
sys.meta_path.insert(0, Slow())
"""


def test_load_time_excludes_importing_the_loader(tmp_path):
    path = tmp_path / "replay.nsb"
    code = f"""
import json, sys, subprocess
import numpy as np
from namedschema.apps import demo
transition_cls, state_cls = demo._schemas()
replay = demo._fill(transition_cls, 64, 0, False)
import namedschema.checkpoint as c
c.save(replay.state(state_cls), {str(path)!r})
child = {_SLOW_IMPORT!r} + "from namedschema.apps.demo import _child_load\\n" + \\
    "import json; print(json.dumps(_child_load('namedschema', {str(path)!r}, 0)))"
proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
assert proc.returncode == 0, proc.stderr
print(json.loads(proc.stdout)["load_s"])
"""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.strip()) < 0.5   # the 1 s import is not in the load time


def _screen(data: str) -> list[str]:
    """The lines a terminal shows for ``data`` (carriage returns overwrite)."""
    lines, line, col = [], [], 0
    for char in data:
        if char == "\n":
            lines.append("".join(line))
            line, col = [], 0
        elif char == "\r":
            col = 0
        else:
            if col < len(line):
                line[col] = char
            else:
                line.append(char)
            col += 1
    return lines + ["".join(line)]


def test_a_terminal_shows_one_progress_bar_per_line():
    """Run under a pseudo-terminal: no line is left holding the remains of two bars."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    env.pop("RLPYT_SRC", None)
    parent, child = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "namedschema", "demo", "--size", "4MB"],
                                stdout=subprocess.PIPE, stderr=child, env=env)
        os.close(child)
        chunks = []
        while True:
            try:
                data = os.read(parent, 65536)
            except OSError:   # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        out, _ = proc.communicate(timeout=300)
    finally:
        os.close(parent)
    assert proc.returncode == 0, out
    screen = _screen(b"".join(chunks).decode())
    assert any("saving [" in line for line in screen), screen   # save drew its own bar
    for line in screen:
        assert line.count("%") <= 1 and line.count("[") <= 1, screen
