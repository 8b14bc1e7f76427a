"""The diffs docs/cleanrl.rst shows are the examples' diffs, and the examples' marks hold.

docs/cleanrl_dqn.diff and docs/cleanrl_dqn_atari.diff are CleanRL's files against
examples/cleanrl_dqn*.py (below their license header). Each hunk's new side (its
context and added lines) must be the example's lines at the place the hunk says, so an
example changed without its diff fails here. Every line the diffs add carries a mark
(``# namedschema``, ``# resumed logs``, ``# gymnasium 1.x``) or is a docstring of a
marked field, which is what the twin test's run without namedschema relies on.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.examples.cleanrl_driver import without_namedschema
from tests.helpers import REPO_ROOT

SCRIPTS = ["dqn", "dqn_atari"]
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
MARKS = ("# namedschema", "# resumed logs", "# gymnasium 1.x")


def read(*parts: str) -> str:
    with open(os.path.join(REPO_ROOT, *parts)) as f:
        return f.read()


def body(name: str) -> list[str]:
    lines = read("examples", f"cleanrl_{name}.py").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# docs and experiment"))
    return lines[start:]


def hunks(diff: str) -> list[tuple[int, list[str], list[str]]]:
    """(first new line, new-side lines, added lines) of each hunk."""
    out: list[tuple[int, list[str], list[str]]] = []
    for line in diff.splitlines()[2:]:
        m = HUNK.match(line)
        if m:
            out.append((int(m.group(3)), [], []))
        elif line.startswith(("+", " ")) or line == "":
            out[-1][1].append(line[1:])
            if line.startswith("+"):
                out[-1][2].append(line[1:])
    return out


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_documented_diff_is_the_example(name):
    lines = body(name)
    found = hunks(read("docs", f"cleanrl_{name}.diff"))
    assert found
    for first, new_side, _ in found:
        assert lines[first - 1:first - 1 + len(new_side)] == new_side, (name, first)


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_added_line_is_marked(name):
    added = [line for _, _, plus in hunks(read("docs", f"cleanrl_{name}.diff")) for line in plus]
    unmarked = [line for line in added
                if line.strip() and not any(mark in line for mark in MARKS)
                and not line.strip().startswith('"""')]
    assert unmarked == []
    assert "import namedschema" not in without_namedschema("\n".join(body(name)))
