"""mypy on the package with pyproject.toml's configuration (what CI runs): every flag of
``--strict`` on every module."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

# What --strict turns on (mypy 1.x), each of which an override could turn off again.
STRICT_FLAGS = {"warn_unused_configs", "disallow_any_generics", "disallow_subclassing_any",
                "disallow_untyped_calls", "disallow_untyped_defs",
                "disallow_incomplete_defs", "check_untyped_defs",
                "disallow_untyped_decorators", "warn_redundant_casts", "warn_unused_ignores",
                "warn_return_any", "no_implicit_reexport", "strict_equality", "extra_checks"}


def _mypy_config() -> dict:
    with open(Path(REPO_ROOT) / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mypy"]


def test_the_whole_package_is_checked_with_every_flag_of_strict():
    """``strict = true`` for everything mypy checks, and no section turns a flag off:
    the overrides only let untyped third-party imports in."""
    config = _mypy_config()
    assert config.get("strict") is True
    assert set(config["files"]) == {"namedschema", "benchmarks/suite"}
    relaxed = {flag: config[flag] for flag in STRICT_FLAGS if config.get(flag) is False}
    assert relaxed == {}
    for section in config.get("overrides", []):
        assert set(section) <= {"module", "ignore_missing_imports"}, section


@pytest.mark.subprocess
def test_mypy_passes_on_the_package():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip('mypy is not installed (pip install -e ".[lint]")')
    # mypy's default cache (.mypy_cache in the checkout): after one run, a rerun
    # rechecks only what changed, which keeps this test quick.
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy namedschema benchmarks/suite:\n{proc.stdout}{proc.stderr}"
