"""Run a callback right after a module finishes importing, without importing it.

Integrations must not import optional libraries (torch, cloudpickle, Ray) at
``import namedschema`` time, yet must act when those libraries arrive; the
rlpyt patch must rebind the globals of every rlpyt module imported after it.
One finder at the front of ``sys.meta_path`` serves both: it finds nothing
itself, but for a watched name it asks the finders behind it for the real
spec and wraps that loader's ``exec_module`` on the loader instance (restored
right after), so the callbacks run once the module has executed. The finder
removes itself when nothing is watched; every other import costs one dict
lookup.

when_imported       call ``callback(module)`` once: now if imported, else right after import
cancel              drop a pending :func:`when_imported` callback
pending             names still awaited
after_each_import   call ``callback(module)`` after every later import of a package's modules
stop_each_import    drop an :func:`after_each_import` callback
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["when_imported", "cancel", "pending", "after_each_import", "stop_each_import"]

Callback = Callable[[Any], object]

_lock = threading.RLock()
# Module name -> callbacks to run once, after it imports.
_pending: dict[str, list[Callback]] = {}
# Package name -> callbacks to run after each import of it or a module under it.
_each: dict[str, list[Callback]] = {}


def _run(callbacks: Iterable[Callback], module: ModuleType) -> None:
    for callback in callbacks:
        try:
            callback(module)
        except Exception as exc:
            warnings.warn(f"namedschema: import hook for {module.__name__} "
                          f"failed: {exc!r}", RuntimeWarning, stacklevel=3)


def _each_for(fullname: str) -> list[Callback]:
    if not _each:
        return []
    package = fullname.partition(".")[0]
    return list(_each.get(package, ()))


class _Watcher:
    """Meta-path finder that defers to the others and hooks watched modules' execution."""

    def __init__(self) -> None:
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if (fullname not in _pending and not _each_for(fullname)) \
                or getattr(self._busy, "active", False):
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

        def exec_module(module: ModuleType) -> None:
            try:
                original(module)
            finally:
                _restore(loader, original, had_own)
            with _lock:
                callbacks = _pending.pop(fullname, []) + _each_for(fullname)
                _remove_if_idle()
            _run(callbacks, module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader that takes no attributes
            pass
        return spec


def _find_behind(watcher: _Watcher, fullname: str, path: Sequence[str] | None,
                 target: ModuleType | None) -> ModuleSpec | None:
    for finder in list(sys.meta_path):
        if finder is watcher:
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec: ModuleSpec | None = find(fullname, path, target)    # a finder's find_spec
        if spec is not None:
            return spec
    return None


def _restore(loader: Any, original: Callable[[ModuleType], object], had_own: bool) -> None:
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


def _ensure_watcher(front: bool = False) -> None:
    """Put the finder in ``sys.meta_path`` (first, or moved to the front if ``front``)."""
    global _watcher
    if _watcher is None:
        _watcher = _Watcher()
        sys.meta_path.insert(0, _watcher)
    elif front and sys.meta_path[:1] != [_watcher]:
        # Ahead of finders inserted since, which could otherwise find these modules first.
        if _watcher in sys.meta_path:
            sys.meta_path.remove(_watcher)
        sys.meta_path.insert(0, _watcher)


def _remove_if_idle() -> None:
    global _watcher
    if not _pending and not _each and _watcher is not None:
        try:
            sys.meta_path.remove(_watcher)
        except ValueError:
            pass
        _watcher = None


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once module ``name`` has been imported.

    Runs it at once if the module is already fully imported; otherwise waits
    for the import. A failing callback warns (RuntimeWarning) instead of
    breaking the import.

    Args:
        name: full dotted module name, such as ``'torch.serialization'``.
        callback: called with the module object.
    """
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
        _ensure_watcher()


def cancel(name: str, callback: Callback) -> None:
    """Drop ``callback`` from those waiting for ``name`` (no error if absent)."""
    _drop_callback(_pending, name, callback)


def pending() -> list[str]:
    """Names of modules whose import is still awaited."""
    with _lock:
        return sorted(_pending)


def after_each_import(package: str, callback: Callback) -> None:
    """Call ``callback(module)`` right after each later import of ``package`` or of a
    module under it, until :func:`stop_each_import`. Modules imported already are not
    called back (walk ``sys.modules`` for them). A failing callback warns.

    Args:
        package: a top-level package name, such as ``'rlpyt'``.
        callback: called with each module object, once it has executed.
    """
    if "." in package:
        raise ValueError(f"after_each_import: {package!r} is not a top-level package name")
    with _lock:
        callbacks = _each.setdefault(package, [])
        if callback not in callbacks:
            callbacks.append(callback)
        _ensure_watcher(front=True)


def stop_each_import(package: str, callback: Callback) -> None:
    """Drop an :func:`after_each_import` callback (no error if absent)."""
    _drop_callback(_each, package, callback)


def _drop_callback(table: dict[str, list[Callback]], name: str, callback: Callback) -> None:
    """Remove ``callback`` from ``table[name]`` (the entry goes when empty); unhook if idle."""
    with _lock:
        callbacks = table.get(name, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            table.pop(name, None)
        _remove_if_idle()
