"""Release metadata and the sdist: what a user or a packager gets from ``pip``."""

import configparser
import os
import subprocess
import sys
import tarfile

import pytest

from tests.helpers import REPO_ROOT


def _metadata():
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO_ROOT, "setup.cfg"))
    return config["metadata"]


def test_classifiers_name_the_supported_pythons_and_the_status():
    classifiers = _metadata()["classifiers"].split("\n")
    for version in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    assert "Typing :: Typed" in classifiers
    assert _metadata()["author"]


@pytest.mark.subprocess
def test_sdist_holds_the_tests_docs_benchmarks_and_examples_they_need(tmp_path):
    """Built from this checkout, the sdist has every file the tests import or read, and
    the examples the docs include and the tests run (issue 35, item 7)."""
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path),
         "sdist", "-d", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (archive,) = tmp_path.glob("namedschema-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for needed in ("conftest.py", "tests/__init__.py", "tests/helpers.py",
                   "tests/conftest.py", "tests/meta/test_docs_build.py",
                   "tests/checkpoint/data/format-1.0.nsb", "docs/conf.py",
                   "docs/inventories/python.inv", "benchmarks", "namedschema/py.typed",
                   "LICENSE", "README.md", "examples/dqn_pong.py",
                   "examples/train_loop.py", "examples/cleanrl_dqn.py",
                   "examples/cleanrl_dqn_atari.py", "examples/cleanrl_namedschema_buffer.py"):
        assert any(n == needed or n.startswith(needed + "/") for n in names), needed
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
