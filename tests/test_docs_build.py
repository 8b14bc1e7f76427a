"""The Sphinx site builds with warnings treated as errors (API reference from docstrings)."""

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT


def test_docs_build_without_warnings(tmp_path):
    """sphinx-build -W -n over docs/ succeeds and produces the API page."""
    pytest.importorskip("sphinx")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         os.path.join(REPO_ROOT, "docs"), str(tmp_path / "html")],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    api = (tmp_path / "html" / "api.html").read_text()
    assert "NamedArrayTupleSchema" in api and "namedarraytuple_like" in api
