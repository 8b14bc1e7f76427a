"""mypy and pyright on tests/meta/typing: every ``pass_*.py`` type-checks clean (its ``assert_type``
expectations hold), and in every ``fail_*.py`` exactly the lines marked ``# expect-error`` are
rejected, by each checker."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

TYPING_DIR = Path(REPO_ROOT) / "tests" / "meta" / "typing"
FILES = sorted(TYPING_DIR.glob("pass_*.py")) + sorted(TYPING_DIR.glob("fail_*.py"))
MARK = "# expect-error"


def _expected() -> dict[str, set[int]]:
    return {path.name: {n for n, line in enumerate(path.read_text().splitlines(), 1)
                        if MARK in line} for path in FILES}


def _run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)


def _mypy(tmp_path) -> dict[str, set[int]]:
    env = dict(os.environ, MYPYPATH=REPO_ROOT)
    proc = _run([sys.executable, "-m", "mypy", "--strict", "--config-file=", "--no-incremental",
                 f"--cache-dir={tmp_path / 'mypy-cache'}", "--follow-imports=silent",
                 "--python-version=3.11", f"--python-executable={sys.executable}",
                 "--no-error-summary", "--show-absolute-path", *map(str, FILES)],
                env=env, cwd=tmp_path)
    if proc.returncode not in (0, 1) or proc.stderr.strip():
        raise AssertionError(f"mypy did not run ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    found: dict[str, set[int]] = {path.name: set() for path in FILES}
    for line in proc.stdout.splitlines():
        match = re.match(r"(.+?):(\d+): error: ", line)
        if match:
            found.setdefault(Path(match[1]).name, set()).add(int(match[2]))
    return found


def _pyright_or_skip(tmp_path) -> dict[str, set[int]]:
    command = [sys.executable, "-m", "pyright"]
    version = _run([*command, "--version"], cwd=tmp_path)
    if version.returncode != 0:  # the PyPI wrapper needs node, or a network to fetch it
        pytest.skip(f"pyright cannot run here: {(version.stderr or version.stdout).strip()}")
    config = tmp_path / "pyrightconfig.json"
    config.write_text(json.dumps({"typeCheckingMode": "standard", "pythonVersion": "3.11",
                                  "extraPaths": [REPO_ROOT]}))
    proc = _run([*command, "-p", str(config), "--pythonpath", sys.executable, "--outputjson",
                 *map(str, FILES)], cwd=tmp_path)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"pyright did not run ({proc.returncode}):\n"
                             f"{proc.stderr}{proc.stdout}") from None
    assert report["summary"]["filesAnalyzed"] == len(FILES), report["summary"]
    found: dict[str, set[int]] = {path.name: set() for path in FILES}
    for diagnostic in report["generalDiagnostics"]:
        if diagnostic["severity"] == "error":
            found.setdefault(Path(diagnostic["file"]).name, set()).add(
                diagnostic["range"]["start"]["line"] + 1)
    return found


def test_the_typing_folder_has_both_kinds_of_file():
    expected = _expected()
    assert any(name.startswith("pass_") for name in expected)
    assert all(lines for name, lines in expected.items() if name.startswith("fail_"))
    assert not any(lines for name, lines in expected.items() if name.startswith("pass_"))


# What the README shows a user calling; the user file must call each (and type-check).
README_CALLS = {"save", "load", "inspect", "verify", "upgrade", "buffer_from_example",
                "resumable", "patch_rlpyt", "ReplayBuffer", "PrioritizedReplayBuffer",
                "RunCheckpoint", "ShardedReplay", "capture_env", "restore_env",
                "declared_dtypes"}


def test_the_readme_file_is_a_strict_user_file_of_the_whole_api():
    """pass_readme.py calls every entry point the README shows, and pyright checks it in
    strict mode (mypy runs with --strict on every file)."""
    source = (TYPING_DIR / "pass_readme.py").read_text()
    called = {node.func.attr if isinstance(node.func, ast.Attribute) else
              getattr(node.func, "id", None) for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Call)}
    assert README_CALLS - called == set()
    assert "\n# pyright: strict\n" in source


@pytest.mark.parametrize("checker", ["mypy", "pyright"])
def test_checker_accepts_pass_files_and_rejects_exactly_the_marked_lines(checker, tmp_path):
    found = _mypy(tmp_path) if checker == "mypy" else _pyright_or_skip(tmp_path)
    expected = _expected()
    problems = []
    for name in expected:
        unexpected = sorted(found.get(name, set()) - expected[name])
        missed = sorted(expected[name] - found.get(name, set()))
        if unexpected:
            problems.append(f"{name}: {checker} reports errors on unmarked lines {unexpected}")
        if missed:
            problems.append(f"{name}: {checker} accepts lines that must be rejected {missed}")
    assert problems == []
