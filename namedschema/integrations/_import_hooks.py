"""Run a callback right after a named module finishes importing, without importing it.

Integrations must not import optional libraries (torch, cloudpickle, Ray) at
``import namedschema`` time, yet must act when those libraries arrive. A
single finder at the front of ``sys.meta_path`` watches for the wanted
names: it finds nothing itself, but for a watched name it asks the finders
behind it for the real spec and wraps that loader's ``exec_module`` on the
loader instance (restored right after), so the callback runs once the
module has executed. The finder removes itself when nothing is pending;
every other import costs one dict lookup.

when_imported   call ``callback(module)`` now if imported, else right after import
cancel          drop a pending callback
pending         names still awaited
"""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Any

__all__ = ["when_imported", "cancel", "pending"]

_lock = threading.RLock()
_pending: dict[str, list] = {}


def _run(callbacks, module):
    for callback in callbacks:
        try:
            callback(module)
        except Exception as exc:  # noqa: BLE001 - never break the user's import
            warnings.warn(f"namedschema: integration hook for {module.__name__} "
                          f"failed: {exc!r}", RuntimeWarning, stacklevel=3)


class _Watcher:
    """Meta-path finder that defers to the others and hooks watched modules' execution."""

    def __init__(self):
        self._busy = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _pending or getattr(self._busy, "active", False):
            return None
        self._busy.active = True
        try:
            spec = _find_behind(self, fullname, path, target)
        finally:
            self._busy.active = False
        loader: Any = getattr(spec, "loader", None)
        original = getattr(loader, "exec_module", None)
        if original is None:
            return spec
        had_own = "exec_module" in getattr(loader, "__dict__", {})

        def exec_module(module):
            try:
                original(module)
            finally:
                _restore(loader, original, had_own)
            with _lock:
                callbacks = _pending.pop(fullname, [])
                _remove_if_idle()
            _run(callbacks, module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader that takes no attributes
            pass
        return spec


def _find_behind(watcher, fullname, path, target):
    for finder in list(sys.meta_path):
        if finder is watcher:
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(fullname, path, target)
        if spec is not None:
            return spec
    return None


def _restore(loader, original, had_own):
    # The wrapper is an instance attribute: deleting it uncovers the class's
    # method again, unless the loader had its own instance attribute before.
    try:
        if had_own:
            loader.exec_module = original
        else:
            del loader.exec_module
    except AttributeError:
        pass


_watcher: _Watcher | None = None


def _remove_if_idle():
    global _watcher
    if not _pending and _watcher is not None:
        try:
            sys.meta_path.remove(_watcher)
        except ValueError:
            pass
        _watcher = None


def when_imported(name: str, callback) -> None:
    """Call ``callback(module)`` once module ``name`` has been imported.

    Runs it at once if the module is already fully imported; otherwise waits
    for the import. A failing callback warns (RuntimeWarning) instead of
    breaking the import.

    Args:
        name: full dotted module name, such as ``'torch.serialization'``.
        callback: called with the module object.
    """
    global _watcher
    module = sys.modules.get(name)
    if module is not None:
        spec = getattr(module, "__spec__", None)
        if not getattr(spec, "_initializing", False):
            _run([callback], module)
            return
    with _lock:
        callbacks = _pending.setdefault(name, [])
        if callback not in callbacks:
            callbacks.append(callback)
        if _watcher is None:
            _watcher = _Watcher()
            sys.meta_path.insert(0, _watcher)


def cancel(name: str, callback) -> None:
    """Drop ``callback`` from those waiting for ``name`` (no error if absent)."""
    with _lock:
        callbacks = _pending.get(name, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            _pending.pop(name, None)
        _remove_if_idle()


def pending() -> list[str]:
    """Names of modules whose import is still awaited."""
    with _lock:
        return sorted(_pending)
