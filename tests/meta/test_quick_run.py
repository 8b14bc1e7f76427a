"""The quick run's shortcuts: whole-slow modules left uncollected, scaled example counts."""

from __future__ import annotations

import types

import pytest

from tests import conftest
from tests.helpers import examples


def _config(markexpr):
    return types.SimpleNamespace(getoption=lambda name, default=None: markexpr)


@pytest.mark.parametrize("line, ignored", [
    ("pytestmark = pytest.mark.slow", True),
    ("pytestmark = pytest.mark.subprocess  # a local Ray cluster", True),
    ("pytestmark = [pytest.mark.rlpyt, pytest.mark.subprocess]", True),
    ("pytestmark = pytest.mark.rlpyt", False),
    ("pytestmark = pytest.mark.slowish", False),
    ("# pytestmark = pytest.mark.slow", False),
    ("    pytestmark = pytest.mark.slow", False),      # not at module level
])
def test_only_modules_marked_slow_as_a_whole_are_left_out(tmp_path, line, ignored):
    path = tmp_path / "test_mod.py"
    path.write_text(f'"""Doc."""\nimport pytest\n\n{line}\n')
    assert conftest.pytest_ignore_collect(path, _config("not slow")) is (True if ignored
                                                                         else None)
    # Any other selection (the full run, -m slow, -m rlpyt) collects the module.
    for markexpr in ("", None, "slow", "rlpyt", "not rlpyt"):
        assert conftest.pytest_ignore_collect(path, _config(markexpr)) is None
    helper = tmp_path / "helper.py"
    helper.write_text(path.read_text())
    assert conftest.pytest_ignore_collect(helper, _config("not slow")) is None


def test_example_counts_follow_the_profile(monkeypatch):
    from tests import helpers
    monkeypatch.setattr(helpers, "HYPOTHESIS_PROFILE", "ci")
    assert examples(150) == 150 and examples(2) == 2
    monkeypatch.setattr(helpers, "HYPOTHESIS_PROFILE", "dev")
    assert examples(150) == 37 and examples(8) == 3


def test_test_modules_are_not_searched_for_doctests():
    """The package's doctests stay (they are collected outside tests/, where this
    conftest does not apply); a test module's doctest collector is dropped."""
    from _pytest.doctest import DoctestModule
    doctests, module = object.__new__(DoctestModule), object()
    hook = conftest.pytest_collect_file(file_path=None, parent=None)
    next(hook)
    with pytest.raises(StopIteration) as stop:
        hook.send([doctests, module])
    assert stop.value.value == [module]
