"""Release metadata and the sdist: what a user or a packager gets from ``pip``."""

import configparser
import os
import subprocess
import sys
import tarfile
import zipfile

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


def test_project_urls_name_the_documentation_and_the_changelog():
    """The metadata has project URLs (issue 35, item 10); with no hosted pages yet, they
    name files of the source tree and the sdist, which must exist."""
    urls = dict(line.split("=", 1) for line in _metadata()["project_urls"].strip().split("\n"))
    urls = {label.strip(): target.strip() for label, target in urls.items()}
    assert set(urls) >= {"Documentation", "Changelog"}, urls
    for label, target in urls.items():
        if not target.startswith("https://"):
            assert os.path.isfile(os.path.join(REPO_ROOT, target)), (label, target)


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
        (pkg_info,) = [m for m in tar.getmembers() if m.name.count("/") == 1
                       and m.name.endswith("/PKG-INFO")]
        metadata = tar.extractfile(pkg_info).read().decode()
    assert "Project-URL: Documentation, docs/index.rst" in metadata.splitlines()
    assert "Project-URL: Changelog, docs/changelog.rst" in metadata.splitlines()
    for needed in ("conftest.py", "tests/__init__.py", "tests/helpers.py",
                   "tests/conftest.py", "tests/meta/test_docs_build.py",
                   "tests/checkpoint/data/format-1.0.nsb", "docs/conf.py",
                   "docs/inventories/python.inv", "benchmarks/suite/runner.py",
                   "benchmarks/bench_core.py", "namedschema/py.typed",
                   "LICENSE", "README.md", "examples/dqn_pong.py",
                   "examples/train_loop.py", "examples/cleanrl_dqn.py",
                   "examples/cleanrl_dqn_atari.py", "examples/cleanrl_namedschema_buffer.py"):
        assert any(n == needed or n.startswith(needed + "/") for n in names), needed
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)


@pytest.mark.subprocess
def test_the_wheel_holds_the_package_without_the_benchmarks(tmp_path):
    """The installed package is the library, its command and the demo: the benchmark
    harness and topics (benchmarks/suite, run by ``namedschema bench`` from a source
    checkout) and the benchmark scripts are not in the wheel (issue 29)."""
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path),
         "build", "--build-base", str(tmp_path / "build"),
         "bdist_wheel", "--bdist-dir", str(tmp_path / "bdist"), "-d", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("namedschema-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    packages = {name.split("/", 1)[0] for name in names if "/" in name}
    assert {p for p in packages if not p.endswith(".dist-info")} == {"namedschema"}
    for needed in ("namedschema/apps/cli.py", "namedschema/apps/demo.py",
                   "namedschema/apps/harness.py", "namedschema/__main__.py"):
        assert needed in names, needed
    assert not any(n.startswith("namedschema/apps/bench") for n in names)
    topics = ("runner", "common", "core", "pickling", "checkpoint", "incremental",
              "compression", "replay")
    assert not any(n.endswith(f"/{t}.py") and "/apps/" in n for n in names for t in topics)
