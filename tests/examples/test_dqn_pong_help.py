"""``python examples/dqn_pong.py --help`` shows every option with its default (issue 35, 10)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.subprocess

pytest.importorskip("gymnasium")
pytest.importorskip("ale_py")
pytest.importorskip("torch")

EXAMPLE = os.path.join(REPO_ROOT, "examples", "dqn_pong.py")

# Runs the example with argparse's parse_args replaced: prints the parser's options and
# their defaults as JSON instead of parsing (what the help must show).
_OPTIONS = """
import argparse, json, runpy, sys
def dump(self, args=None, namespace=None):
    print(json.dumps([[a.option_strings, a.default] for a in self._actions
                      if a.help is not argparse.SUPPRESS and "-h" not in a.option_strings]))
    sys.exit(0)
argparse.ArgumentParser.parse_args = dump
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _run(*args):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _entries(help_text):
    """Each option's entry of the help's options section, by its long option string."""
    section = help_text.split("options:\n", 1)[1].split("\n\n", 1)[0]
    entries: dict[str, str] = {}
    current = None
    for line in section.splitlines():
        match = re.match(r"  (-\S+)", line)
        if match:
            current = match.group(1)
            entries[current] = line
        elif current is not None:
            entries[current] += " " + line.strip()
    return {name: " ".join(text.split()) for name, text in entries.items()}


def test_help_shows_every_option_with_its_default():
    options = json.loads(_run("-c", _OPTIONS, EXAMPLE))
    assert len(options) >= 15
    help_text = _run(EXAMPLE, "--help")
    assert help_text.startswith("usage: dqn_pong.py")
    assert "DQN on Atari Pong" in help_text            # the description, not only usage
    entries = _entries(help_text)
    for strings, default in options:
        long = max(strings, key=len)
        assert long in entries, f"{long} is not in --help"
        assert f"(default: {default})" in entries[long], (long, entries[long])
        assert len(entries[long].split("(default:")[0].split()) > 2, f"{long} has no help"
