"""The ``>>>`` examples hold on every NumPy that setup.cfg accepts (numpy>=1.24).

NumPy 2 changed scalar reprs (``np.float64(3.0)`` instead of ``3.0``). The suite runs
the doctests with NumPy 2's own reprs; this test runs them again with NumPy 1's
(``numpy.set_printoptions(legacy="1.25")``, by the plugin tests/meta/numpy1_reprs.py), so an
example printing a NumPy-2-only repr fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO_ROOT
from tests.meta.test_doc_blocks import missing_optional_modules

pytestmark = pytest.mark.subprocess


def _doctests(*paths, legacy: bool) -> subprocess.CompletedProcess:
    plugin = ["-p", "tests.meta.numpy1_reprs"] if legacy else []
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                           *plugin, "--doctest-modules", "--doctest-glob=*.rst", *paths],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)


@pytest.mark.skipif(int(np.__version__.split(".")[0]) < 2,
                    reason="NumPy 1 runs the doctests with its own reprs already")
def test_doctests_pass_with_numpy_1_reprs():
    """Every doctest of the package and the docs passes with NumPy 1.x scalar reprs.

    Pages whose examples need files that earlier blocks write (``.. doc-test: file``) run
    only as tests/meta/test_doc_blocks.py runs them, which writes those files first."""
    docs = os.path.join(REPO_ROOT, "docs")
    pages = {name: open(os.path.join(docs, name), encoding="utf-8").read()
             for name in sorted(os.listdir(docs)) if name.endswith(".rst")}
    # ... and pages that import an optional dependency this Python lacks (torch, ray...).
    ignored = [f"--ignore={os.path.join(docs, name)}" for name, text in pages.items()
               if ".. doc-test: file" in text or missing_optional_modules(text)]
    proc = _doctests("namedschema", "docs", *ignored, legacy=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout.strip().splitlines()[-1]


def test_numpy_1_reprs_really_change_what_doctests_see(tmp_path):
    """With the legacy switch, a NumPy-2 repr in an example fails (the test above can fail)."""
    if int(np.__version__.split(".")[0]) < 2:
        pytest.skip("needs NumPy 2 to print a NumPy-2 repr")
    doc = tmp_path / "example.rst"
    doc.write_text(">>> import numpy as np\n>>> np.float64(3.0)\nnp.float64(3.0)\n")
    assert _doctests(str(doc), legacy=False).returncode == 0
    assert _doctests(str(doc), legacy=True).returncode == 1


def test_the_suite_collects_without_torch_or_rlpyt():
    """torch is an optional extra and rlpyt is not on PyPI: with torch unimportable and no
    RLPYT_SRC (a new user's clone), collecting the whole suite (doctests of
    namedschema/integrations/torch.py included) still works."""
    code = ("import sys; sys.modules['torch'] = None  # import torch -> ImportError\n"
            "import pytest\n"
            "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:randomly']))\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("RLPYT_SRC", "NAMEDSCHEMA_REQUIRE_RLPYT")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "tests collected" in proc.stdout.splitlines()[-1] and "ERROR" not in proc.stdout
