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

``import namedschema`` calls :func:`install`: it registers at once if
``torch.serialization`` is already imported, and otherwise puts a small
finder at the front of ``sys.meta_path`` that waits for
``torch.serialization`` to finish executing, registers, and removes itself.

ANY_SCHEMA              allowlist entry matching live schema classes only
checked_rebuild_schema  rebuild_schema with strict argument types
safe_globals            the entries to pass to torch's safe-globals functions
register                add them to torch's allowlist now (needs torch)
install                 register now or as soon as torch is imported
uninstall               remove the pending import hook, if any
"""

from __future__ import annotations

import sys
import threading
import warnings

from .. import _pickle
from ..errors import SchemaDefinitionError

__all__ = ["ANY_SCHEMA", "checked_rebuild_schema", "safe_globals", "register",
           "install", "uninstall"]

REBUILD_NAME = "namedschema._pickle.rebuild_schema"
ANY_SCHEMA_NAME = "namedschema.integrations._torch_hook.ANY_SCHEMA"
_WATCHED = "torch.serialization"


class _AnySchema:
    """Equal to every live schema class registered in this process, and nothing else."""

    __slots__ = ()

    def __eq__(self, other):
        if other is self:
            return True
        schema_id = getattr(other, "__dict__", {}).get("_schema_id") if isinstance(
            other, type) else None
        return (isinstance(schema_id, str)
                and type(other).__name__ in _pickle.KINDS
                and type(other) is _pickle.KINDS[type(other).__name__][0]
                and _pickle.lookup_schema(schema_id) is other)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return id(self) >> 4

    def __repr__(self):
        return "<namedschema: any registered schema class>"

    def __reduce__(self):
        return ANY_SCHEMA_NAME.rpartition(".")[2]


ANY_SCHEMA = _AnySchema()


def _is_str_tuple(value) -> bool:
    return type(value) is tuple and all(type(item) is str for item in value)


def checked_rebuild_schema(kind, schema_id, typename, fields, defaults, module):
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
        SchemaDefinitionError: an argument has the wrong type or a name is
            invalid.
        SchemaConflictError: the id belongs to a different schema here.
    """
    if not (type(kind) is str and type(schema_id) is str and type(typename) is str
            and _is_str_tuple(fields) and type(defaults) is tuple
            and (module is None or type(module) is str)):
        raise SchemaDefinitionError(
            f"weights-only load: schema record for {typename!r} does not hold "
            "plain strings and tuples (kind, id, typename, fields, defaults, "
            f"module); got types {type(kind).__name__}, {type(schema_id).__name__}, "
            f"{type(typename).__name__}, {type(fields).__name__}, "
            f"{type(defaults).__name__}, {type(module).__name__}")
    return _pickle.rebuild_schema(kind, schema_id, typename, fields, defaults, module)


def safe_globals() -> list:
    """The allowlist entries, in the ``(object, "dotted.name")`` form torch takes.

    Returns:
        A list for ``torch.serialization.add_safe_globals`` or the
        ``torch.serialization.safe_globals`` context manager.
    """
    return [(checked_rebuild_schema, REBUILD_NAME), (ANY_SCHEMA, ANY_SCHEMA_NAME)]


_registered = False
_lock = threading.Lock()


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


class _TorchSerializationWatcher:
    """A meta-path finder that registers right after ``torch.serialization`` executes.

    It finds nothing itself: for that one module it asks the finders behind
    it for the real spec and wraps that spec's loader's ``exec_module`` on the
    loader instance, restoring it afterwards. Every other import costs one
    string comparison.
    """

    def __init__(self):
        self._busy = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _WATCHED or getattr(self._busy, "active", False):
            return None
        self._busy.active = True
        try:
            spec = _find_behind(self, fullname, path, target)
        finally:
            self._busy.active = False
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = getattr(loader, "exec_module", None)
        if original is None:
            return spec
        had_own = "exec_module" in getattr(loader, "__dict__", {})

        def exec_module(module):
            try:
                original(module)
            finally:
                _restore(loader, original, had_own)
            uninstall()
            try:
                register()
            except Exception as exc:  # noqa: BLE001 - never break importing torch
                warnings.warn(f"namedschema could not allowlist its schemas for "
                              f"torch.load(weights_only=True): {exc!r}",
                              RuntimeWarning, stacklevel=2)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader that takes no attributes
            return spec
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


_watcher: _TorchSerializationWatcher | None = None


def install() -> None:
    """Register with torch now if it is imported, else as soon as it is.

    Cheap and idempotent; this is what ``import namedschema`` runs. It never
    imports torch.
    """
    global _watcher
    if _registered:
        return
    module = sys.modules.get(_WATCHED)
    if module is not None and hasattr(module, "add_safe_globals"):
        try:
            register()
        except Exception as exc:  # noqa: BLE001 - importing namedschema must work
            warnings.warn(f"namedschema could not allowlist its schemas for "
                          f"torch.load(weights_only=True): {exc!r}",
                          RuntimeWarning, stacklevel=2)
        return
    with _lock:
        if _watcher is None:
            _watcher = _TorchSerializationWatcher()
            sys.meta_path.insert(0, _watcher)


def uninstall() -> None:
    """Remove the import hook that :func:`install` left waiting, if any."""
    global _watcher
    with _lock:
        watcher, _watcher = _watcher, None
        if watcher is not None:
            try:
                sys.meta_path.remove(watcher)
            except ValueError:
                pass
