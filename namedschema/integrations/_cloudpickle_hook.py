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

The patch wraps the module-level ``_class_reduce`` function of each
cloudpickle copy that gets imported; classes other than registered schemas
go to the original function unchanged.

MODULES     the cloudpickle modules patched when imported
patch       patch one cloudpickle module (idempotent)
install     patch them now or as soon as they are imported
"""

from __future__ import annotations

from .._core.pickling import is_registered_schema
from . import _import_hooks

__all__ = ["MODULES", "patch", "install"]

MODULES = (
    "cloudpickle.cloudpickle",
    "ray.cloudpickle.cloudpickle",
    "joblib.externals.cloudpickle.cloudpickle",
    "srsly.cloudpickle.cloudpickle",
)


def patch(module) -> bool:
    """Route registered schema classes in ``module._class_reduce`` to copyreg.

    Args:
        module: a ``cloudpickle.cloudpickle`` module (any vendored copy).

    Returns:
        True if the module is (now) patched, False if it has no
        ``_class_reduce`` to wrap (an unknown cloudpickle version).
    """
    original = getattr(module, "_class_reduce", None)
    if original is None:
        return False
    if getattr(original, "_namedschema_original", None) is not None:
        return True

    def _class_reduce(obj):
        # Class statements subclassing a schema have no id of their own: they
        # go to cloudpickle, which may pickle them by reference or by value.
        if is_registered_schema(obj):
            # NotImplemented makes the pickler use its dispatch table, which
            # includes copyreg's entry for the schema metaclasses.
            return NotImplemented
        return original(obj)

    _class_reduce.__dict__["_namedschema_original"] = original
    _class_reduce.__doc__ = original.__doc__
    module._class_reduce = _class_reduce
    return True


def install() -> None:
    """Patch every cloudpickle copy now if imported, else right after it is."""
    for name in MODULES:
        _import_hooks.when_imported(name, patch)
