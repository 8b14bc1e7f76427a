"""Test-suite configuration: hypothesis profiles, the markers, the real-rlpyt fixture.

Markers (registered in setup.cfg): ``slow`` (left out of the quick run,
``pytest -m "not slow"``), ``subprocess`` (starts fresh interpreters; such tests are
``slow`` too), ``rlpyt`` (needs the real rlpyt; see below).
"""

import gc
import os
import re

import pytest
from _pytest.doctest import DoctestModule
from hypothesis import HealthCheck, settings

from tests.helpers import HYPOTHESIS_PROFILE

settings.register_profile(
    "ci", max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# The everyday default: a quarter of CI's examples (tests with their own count scale
# it with tests.helpers.examples the same way).
settings.register_profile(
    "dev", max_examples=15, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    "long", max_examples=2000, deadline=None,
    suppress_health_check=list(HealthCheck))
settings.load_profile(HYPOTHESIS_PROFILE)


# ----------------------------------------------------------------- real rlpyt (marker)
# Tests marked ``rlpyt`` need rlpyt's source (not on PyPI) in RLPYT_SRC. Without it
# they skip with a message saying how to get it; with NAMEDSCHEMA_REQUIRE_RLPYT=1
# (set by .ci/run) a missing tree or a skipped rlpyt test fails the run instead.

RLPYT_HOW = ("set RLPYT_SRC to an rlpyt source tree (the folder holding rlpyt/): "
             "extract ../shared/vendor/rlpyt-f04f23d.tar.gz or clone "
             "https://github.com/astooke/rlpyt, or run bash .ci/run, which does it")


def rlpyt_src() -> str | None:
    """The rlpyt source tree named by RLPYT_SRC, or None when unset or not a tree."""
    root = os.environ.get("RLPYT_SRC", "")
    return root if root and os.path.isdir(os.path.join(root, "rlpyt")) else None


@pytest.fixture(scope="session")
def rlpyt_root() -> str:
    """The real rlpyt source tree (RLPYT_SRC); a test that asks for it is marked ``rlpyt``.

    The one place that decides whether real-rlpyt tests run: the marker (added here for
    the fixture's users) skips them without a tree, and fails the run in CI.
    """
    root = rlpyt_src()
    if root is None:
        pytest.skip("real rlpyt needed: " + RLPYT_HOW)
    return root


def _require_rlpyt() -> bool:
    return os.environ.get("NAMEDSCHEMA_REQUIRE_RLPYT") == "1"


_rlpyt_ids: set[str] = set()
_rlpyt_outcomes: dict[str, int] = {}


# ----------------------------------------------------------------- the quick run
# Under -m "not slow" a module whose pytestmark is ``slow`` or ``subprocess`` would
# only be imported (Ray, rlpyt, torch...) for all its tests to be deselected: it is
# not collected at all. The line is read, not imported; other marks are left to pytest.
_WHOLLY_SLOW = re.compile(rb"^pytestmark\s*=\s*\[?[^\n]*\bpytest\.mark\.(slow|subprocess)\b",
                          re.MULTILINE)


def pytest_ignore_collect(collection_path, config):
    if (config.getoption("markexpr", "") or "").strip() != "not slow":
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    try:
        head = collection_path.read_bytes()
    except OSError:
        return None
    return True if _WHOLLY_SLOW.search(head) else None


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    """Test modules hold no doctests: --doctest-modules (setup.cfg, for the package's
    examples) would otherwise walk every test function of the suite looking for some."""
    collectors = yield
    return [c for c in collectors if not isinstance(c, DoctestModule)]


def pytest_collection_finish(session):
    """What collection imported (numpy, torch, the test modules) lives to the end: the
    collector need not walk it again at each full collection (nor at pytest's last one)."""
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "rlpyt_root" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.rlpyt)
        # A fresh interpreter costs a second or more: the quick run (-m "not slow") skips them.
        if item.get_closest_marker("subprocess") is not None:
            item.add_marker(pytest.mark.slow)
    marked = [item for item in items if item.get_closest_marker("rlpyt") is not None]
    _rlpyt_ids.update(item.nodeid for item in marked)
    if rlpyt_src() is not None:
        return
    if _require_rlpyt():
        raise pytest.UsageError(f"NAMEDSCHEMA_REQUIRE_RLPYT=1 but RLPYT_SRC="
                                f"{os.environ.get('RLPYT_SRC', '')!r} is no rlpyt tree; "
                                + RLPYT_HOW)
    skip = pytest.mark.skip(reason="real rlpyt needed: " + RLPYT_HOW)
    for item in marked:
        item.add_marker(skip)


def pytest_runtest_logreport(report):
    """Count each real-rlpyt test once: passed (call), or failed / skipped (any phase)."""
    if report.nodeid not in _rlpyt_ids:
        return
    if (report.when == "call") or (report.outcome != "passed" and report.when == "setup") \
            or (report.outcome == "failed" and report.when == "teardown"):
        _rlpyt_outcomes[report.outcome] = _rlpyt_outcomes.get(report.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if config.option.collectonly or not _rlpyt_outcomes:
        if _require_rlpyt() and not config.option.collectonly:
            terminalreporter.write_line("real-rlpyt tests: none ran, and "
                                        "NAMEDSCHEMA_REQUIRE_RLPYT=1 requires them")
        return
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(_rlpyt_outcomes.items()))
    where = "RLPYT_SRC set" if rlpyt_src() else "RLPYT_SRC unset"
    terminalreporter.write_line(f"real-rlpyt tests ({where}): {counts}")


def pytest_sessionfinish(session, exitstatus):
    if not _require_rlpyt() or session.config.option.collectonly:
        return
    if exitstatus == 0 and (_rlpyt_outcomes.get("skipped") or not _rlpyt_outcomes):
        session.exitstatus = 1  # CI must run every real-rlpyt test it collects
