"""Allowlist schema pickles for ``torch.load(weights_only=True)`` without importing torch.

torch's weights-only unpickler refuses every global it does not know, and for
the NEWOBJ opcode it requires the class itself to be allowlisted. Schema
classes are made at run time (and rebuilt from the pickle when loading), so
no fixed list of classes can name them. Two entries are enough:

* ``namedschema._pickle.rebuild_schema`` (the only global a schema pickle
  names) mapped to :func:`checked_rebuild_schema`, which accepts nothing but
  plain strings and tuples before handing over to ``rebuild_schema``;
* :data:`ANY_SCHEMA`, an allowlist entry that compares equal to live,
  registered schema classes and to nothing else, which is how the NEWOBJ
  check (``cls in allowed.values()``) lets their instances be created.

Building a schema executes only a ``__new__`` generated from validated
identifiers, and creating an instance only makes a tuple, so this adds no way
to run code chosen by the file.

``import namedschema`` registers at once if ``torch.serialization`` is
already imported, and otherwise whenever a schema is next made, rebuilt or
pickled once it is (:func:`register_if_loaded`, installs no import hook).
:func:`install` (explicit) registers now, or asks
:mod:`namedschema.integrations.import_hooks` to register right after
``torch.serialization`` finishes executing.

ANY_SCHEMA              allowlist entry matching live schema classes only
checked_rebuild_schema  rebuild_schema with strict argument types
safe_globals            the entries to pass to torch's safe-globals functions
register                add them to torch's allowlist now (needs torch)
register_if_loaded      register if torch is imported; never imports it
install                 register now or as soon as torch is imported (import hook)
uninstall               drop the pending registration, if any
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, TypeGuard

from .._core import pickling as _pickle
from ..errors import SchemaError

if TYPE_CHECKING:
    from types import ModuleType

    from .._core.pickling import SchemaClass

__all__ = ["ANY_SCHEMA", "checked_rebuild_schema", "safe_globals", "register",
           "register_if_loaded", "is_registered", "install", "uninstall"]

REBUILD_NAME = "namedschema._pickle.rebuild_schema"
ANY_SCHEMA_NAME = "namedschema.integrations._torch_hook.ANY_SCHEMA"
_WATCHED = "torch.serialization"


class _AnySchema:
    """Equal to every live schema class registered in this process, and nothing else."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        # Exactly a built-in kind: a metaclass subclass could not be rebuilt by name.
        return (_pickle.is_registered_schema(other)
                and type(other).__name__ in _pickle.KINDS
                and type(other) is _pickle.KINDS[type(other).__name__][0])

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return id(self) >> 4

    def __repr__(self) -> str:
        return "<namedschema: any registered schema class>"

    def __reduce__(self) -> str:
        return ANY_SCHEMA_NAME.rpartition(".")[2]


ANY_SCHEMA = _AnySchema()


def _is_str_tuple(value: object) -> TypeGuard[tuple[str, ...]]:
    return type(value) is tuple and all(type(item) is str for item in value)


def checked_rebuild_schema(kind: object, schema_id: object, typename: object, fields: object,
                           defaults: object, module: object) -> SchemaClass:
    """``rebuild_schema`` for untrusted files: plain strings and tuples only.

    The weights-only unpickler can only produce plain data, but a crafted
    file could still pass, say, a dict where a name belongs; this refuses
    anything but the types a genuine schema pickle holds.

    Args:
        kind: metaclass name, ``'NamedTupleSchema'`` or ``'NamedArrayTupleSchema'``.
        schema_id: the schema's id.
        typename: the type name.
        fields: tuple of field names.
        defaults: tuple of default values.
        module: the class's ``__module__`` (a str) or None.

    Returns:
        The live schema class for ``schema_id``.

    Raises:
        SchemaError: an argument has the wrong type or a name is
            invalid.
        SchemaError: the id belongs to a different schema here.
    """
    if not (type(kind) is str and type(schema_id) is str and type(typename) is str
            and _is_str_tuple(fields) and type(defaults) is tuple
            and (module is None or type(module) is str)):
        raise SchemaError(
            f"weights-only load: schema record for {typename!r} does not hold "
            "plain strings and tuples (kind, id, typename, fields, defaults, "
            f"module); got types {type(kind).__name__}, {type(schema_id).__name__}, "
            f"{type(typename).__name__}, {type(fields).__name__}, "
            f"{type(defaults).__name__}, {type(module).__name__}")
    return _pickle.rebuild_schema(kind, schema_id, typename, fields, defaults, module)


def safe_globals() -> list[Any]:
    """The allowlist entries, in the ``(object, "dotted.name")`` form torch takes.

    Returns:
        A list for ``torch.serialization.add_safe_globals`` or the
        ``torch.serialization.safe_globals`` context manager.
    """
    return [(checked_rebuild_schema, REBUILD_NAME), (ANY_SCHEMA, ANY_SCHEMA_NAME)]


_registered = False
_lock = threading.Lock()


def is_registered() -> bool:
    """True once :func:`register` has added the schema globals to torch's allowlist."""
    return _registered


def register() -> bool:
    """Add :func:`safe_globals` to torch's weights-only allowlist (idempotent).

    Imports ``torch.serialization``: call it only when torch is wanted.

    Returns:
        True if the entries are registered, False if this torch has no
        ``add_safe_globals`` (torch older than 2.4).
    """
    global _registered
    with _lock:
        if _registered:
            return True
        # import_module, not ``import torch.serialization``: when called from
        # the import hook, ``torch`` is still initialising and does not yet
        # have the ``serialization`` attribute.
        from importlib import import_module

        add = getattr(import_module(_WATCHED), "add_safe_globals", None)
        if add is None:
            return False
        add(safe_globals())
        _registered = True
        return True


def register_if_loaded() -> bool:
    """Register if ``torch.serialization`` is imported (and done executing); else nothing.

    Never imports torch. Returns whether the entries are registered.
    """
    if _registered:
        return True
    module = sys.modules.get(_WATCHED)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return False
    return register()


def _register_hook(module: ModuleType) -> None:
    # Called right after torch.serialization executed; torch itself may still
    # be initialising, which register() allows for.
    register()


def install() -> None:
    """Register with torch now if it is imported, else as soon as it is.

    Cheap and idempotent; it never imports torch. Until torch is imported a
    finder of :mod:`~namedschema.integrations.import_hooks` waits for it in
    ``sys.meta_path``: an explicit call (``import namedschema`` installs none).
    """
    if not _registered:
        from . import import_hooks

        import_hooks.when_imported(_WATCHED, _register_hook)


def uninstall() -> None:
    """Drop the registration still waiting for torch, if any."""
    from . import import_hooks

    import_hooks.cancel(_WATCHED, _register_hook)
