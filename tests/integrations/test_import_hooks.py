"""import_hooks.after_each_import: a callback after every later import of a package's modules.

The one run-after-import mechanism of the package: the torch and cloudpickle
hooks wait for one module (``when_imported``, tested with the torch
integration), the rlpyt patch rebinds every rlpyt module imported after it.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from namedschema.integrations import import_hooks


def _watchers() -> int:
    return sum(type(f).__name__ == "_Watcher" for f in sys.meta_path)


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A package ``ns_fake_pkg`` with a subpackage and two modules, none imported yet."""
    root = tmp_path / "ns_fake_pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("NAME = 'pkg'\n")
    (root / "a.py").write_text("NAME = 'a'\nfrom . import b\n")
    (root / "b.py").write_text("NAME = 'b'\n")
    (root / "sub" / "__init__.py").write_text("NAME = 'sub'\n")
    (tmp_path / "ns_fake_pkg_other.py").write_text("NAME = 'other'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("ns_fake_pkg")]:
        monkeypatch.delitem(sys.modules, name)
    yield "ns_fake_pkg"
    for name in [n for n in sys.modules if n.startswith("ns_fake_pkg")]:
        del sys.modules[name]


def test_after_each_import_sees_every_module_of_the_package_once_executed(fake_package):
    """Each module of the package (nested imports included), after it ran; no other module."""
    seen = []

    def callback(module):
        seen.append((module.__name__, module.NAME))
    import_hooks.after_each_import(fake_package, callback)
    try:
        assert sys.meta_path[0].__class__.__name__ == "_Watcher"
        importlib.import_module("ns_fake_pkg.a")
        importlib.import_module("ns_fake_pkg.sub")
        importlib.import_module("ns_fake_pkg_other")
    finally:
        import_hooks.stop_each_import(fake_package, callback)
    assert seen == [("ns_fake_pkg", "pkg"), ("ns_fake_pkg.b", "b"), ("ns_fake_pkg.a", "a"),
                    ("ns_fake_pkg.sub", "sub")]
    assert "exec_module" not in vars(sys.modules["ns_fake_pkg.a"].__spec__.loader)


def test_stop_each_import_stops_and_the_watcher_goes_when_idle(fake_package):
    """After stop_each_import nothing is called, and with nothing else watched no finder stays."""
    seen = []
    import_hooks.after_each_import(fake_package, seen.append)
    import_hooks.stop_each_import(fake_package, seen.append)
    importlib.import_module("ns_fake_pkg.b")
    assert seen == []
    if not import_hooks.pending():
        assert _watchers() == 0


def test_after_each_import_wants_a_top_level_package():
    with pytest.raises(ValueError, match="top-level"):
        import_hooks.after_each_import("ns_fake_pkg.sub", print)
