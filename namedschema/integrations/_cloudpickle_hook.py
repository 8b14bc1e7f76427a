"""Make cloudpickle (and Ray's copy of it) pickle schema classes by id, like pickle does.

cloudpickle's ``reducer_override`` takes every class that is not importable
as ``module.qualname`` (schemas made in ``__main__`` or in a function, and
every schema rebuilt from a pickle in another process) and ships it as a
"dynamic class" of its own making, ignoring the copyreg reducer. The
receiving process then builds a second class for a schema id it already
knows, so instances sent to a Ray worker come back as an equal but
distinct class. Routing registered schema classes back to the copyreg
reducer (``rebuild_schema``, by id) restores one class per schema in every
process, and makes the pickle smaller.

The hook wraps ``Pickler.reducer_override``, the public extension point of
cloudpickle's pickler (the method pickle's protocol calls first for every
object), of each cloudpickle copy once it is imported; everything but a
registered schema class goes to the original method unchanged.

MODULES       the cloudpickle modules hooked when imported
patch         hook one cloudpickle module (idempotent)
is_patched    whether a cloudpickle module is hooked
patch_loaded  hook those imported by now; never imports one
install       hook them now or as soon as they are imported (import hook)

``import namedschema`` hooks the copies already imported, and the others
whenever a schema is next made, rebuilt or pickled once they are
(:func:`patch_loaded`; no import hook). A copy imported after the last of
those is not hooked until then: its pickles ship schema classes by value
(an equal but distinct class on the other side) until the next schema is
made or rebuilt, or :func:`namedschema.integrations.install` is called.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.pickling import is_registered_schema

if TYPE_CHECKING:
    from types import ModuleType

# Pickler.reducer_override, unbound: (pickler, obj) -> a reduce value or NotImplemented
_ReducerOverride = Callable[[Any, object], object]

__all__ = ["MODULES", "patch", "is_patched", "patch_loaded", "install"]

MODULES = (
    "cloudpickle.cloudpickle",
    "ray.cloudpickle.cloudpickle",
    "joblib.externals.cloudpickle.cloudpickle",
    "srsly.cloudpickle.cloudpickle",
)


def _reducer_override(module: ModuleType) -> _ReducerOverride | None:
    return getattr(getattr(module, "Pickler", None), "reducer_override", None)


def is_patched(module: ModuleType) -> bool:
    """Whether ``module``'s ``Pickler.reducer_override`` routes schema classes by id."""
    return getattr(_reducer_override(module), "_namedschema_original", None) is not None


def patch(module: ModuleType) -> bool:
    """Route registered schema classes in ``module.Pickler.reducer_override`` to copyreg.

    Args:
        module: a ``cloudpickle.cloudpickle`` module (any vendored copy).

    Returns:
        True if the module is (now) hooked, False if its ``Pickler`` has no
        ``reducer_override`` to wrap (an unknown cloudpickle version).
    """
    original = _reducer_override(module)
    if original is None:
        return False
    if is_patched(module):
        return True

    def reducer_override(self: Any, obj: object) -> object:
        # Class statements subclassing a schema have no id of their own: they
        # go to cloudpickle, which may pickle them by reference or by value.
        if isinstance(obj, type) and is_registered_schema(obj):
            # NotImplemented makes the pickler use its dispatch table, which
            # includes copyreg's entry for the schema metaclasses.
            return NotImplemented
        return original(self, obj)

    reducer_override.__dict__["_namedschema_original"] = original
    reducer_override.__doc__ = original.__doc__
    module.Pickler.reducer_override = reducer_override
    return True


_patched: set[str] = set()   # names in MODULES hooked (or found unhookable) already


def patch_loaded() -> None:
    """Hook every cloudpickle copy imported by now (and done executing); import none."""
    if len(_patched) == len(MODULES):
        return
    for name in MODULES:
        module = sys.modules.get(name)
        if name in _patched or module is None or getattr(
                getattr(module, "__spec__", None), "_initializing", False):
            continue
        patch(module)
        _patched.add(name)


def install() -> None:
    """Hook every cloudpickle copy now if imported, else right after it is.

    Until then a finder of :mod:`~namedschema.integrations.import_hooks`
    waits for them in ``sys.meta_path``: an explicit call
    (``import namedschema`` installs none).
    """
    from . import import_hooks

    for name in MODULES:
        import_hooks.when_imported(name, patch)
