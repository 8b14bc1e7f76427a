"""mypy on the package with pyproject.toml's configuration (what CI runs), and the strict
modules' ratchet: the list of modules checked with every flag of ``--strict`` only grows."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

# The ratchet: the number of strict modules when this was last raised. Raise it when
# modules join the list in pyproject.toml; never lower it (a module never leaves).
STRICT_MODULES_AT_LEAST = 47

# The per-module flags of --strict; the rest of --strict is set for the whole package.
PER_MODULE_STRICT = {"disallow_untyped_defs", "disallow_incomplete_defs",
                     "disallow_untyped_calls", "disallow_any_generics", "warn_return_any"}
GLOBAL_STRICT = {"check_untyped_defs", "warn_unused_ignores", "warn_redundant_casts",
                 "strict_equality", "extra_checks", "no_implicit_reexport",
                 "disallow_subclassing_any", "disallow_untyped_decorators"}


def _mypy_config() -> dict:
    with open(Path(REPO_ROOT) / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mypy"]


def _strict_sections() -> list[dict]:
    return [section for section in _mypy_config().get("overrides", [])
            if PER_MODULE_STRICT & set(section)]


def _strict_modules() -> list[str]:
    sections = _strict_sections()
    assert len(sections) == 1, "the strict modules are listed in one override section"
    return sections[0]["module"]


def test_the_strict_modules_only_grow():
    modules = _strict_modules()
    assert len(modules) >= STRICT_MODULES_AT_LEAST, (
        f"{len(modules)} strict modules in pyproject.toml, fewer than the "
        f"{STRICT_MODULES_AT_LEAST} recorded: a module never leaves the list")
    assert modules == sorted(modules)
    assert len(set(modules)) == len(modules)


def test_every_strict_module_exists_and_gets_every_flag_of_strict():
    root = Path(REPO_ROOT)
    missing = [name for name in _strict_modules()
               if not any((root / (name.replace(".", "/") + tail)).is_file()
                          for tail in (".py", "/__init__.py"))]
    assert missing == [], "a misspelt module name would silently stay unchecked"
    section = _strict_sections()[0]
    assert {flag for flag in PER_MODULE_STRICT if section.get(flag) is True} == PER_MODULE_STRICT
    config = _mypy_config()
    assert {flag for flag in GLOBAL_STRICT if config.get(flag) is True} == GLOBAL_STRICT


@pytest.mark.subprocess
def test_mypy_passes_on_the_package():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip('mypy is not installed (pip install -e ".[lint]")')
    # mypy's default cache (.mypy_cache in the checkout): after one run, a rerun
    # rechecks only what changed, which keeps this test quick.
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy namedschema benchmarks/suite:\n{proc.stdout}{proc.stderr}"
