"""Pickling schemas by value, and the process-local registry that keeps them unique.

A schema class cannot be pickled by reference (it is made at run time and is
usually not reachable as ``module.name``), so it is pickled as the data that
defines it plus a random id given at creation. Loading looks the id up in a
registry of live schemas in this process:

* in the process that made the schema, the very same class comes back;
* in any other process, the first load builds the class and registers it
  under that id, and every later load (in any ``pickle.load`` call) reuses it.

Instances need nothing special: ``__getnewargs__`` gives their values, and
pickle stores their class once per pickle through the reducer registered here
with ``copyreg`` (which the C and Python picklers consult before falling back
to pickling a class by name). The registry holds classes weakly.

register_schema           add a newly made schema class to the registry
lookup_schema             the live schema registered under an id, or None
is_registered_schema      whether an object is a live schema made by a factory
registered_schema_count   how many schemas this process holds
derived_schema_id         the one deterministic id derivation (module-level
                          schemas, checkpoints of classic namedtuple classes)
rebuild_schema            the unpickling entry point (stable name: pickles refer to it)
reduce_schema             the copyreg reducer for schema metaclasses
"""

from __future__ import annotations

import threading
import uuid
import weakref
from typing import Any

from .errors import SchemaConflictError, SchemaDefinitionError

# Values are schema classes (typed Any: their _fields etc. come from the metaclass).
_registry: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
# Re-entrant: rebuilding a schema happens while holding it, and building one
# registers it under the same lock.
_lock = threading.RLock()

# Filled by _schema: metaclass name -> (metaclass, builder). Pickles name the
# kind by string so that loading never imports anything chosen by the file.
KINDS: dict[str, tuple] = {}


def register_schema(cls, schema_id: str) -> None:
    """Record ``cls`` as the live schema for ``schema_id``."""
    with _lock:
        _registry[schema_id] = cls


def lookup_schema(schema_id: str):
    """The live schema registered under ``schema_id``, or None."""
    return _registry.get(schema_id)


def is_registered_schema(obj) -> bool:
    """True if ``obj`` is a schema class made by a factory and live in this process.

    False for everything else, including classes made by a class statement
    that subclasses a schema (they have no id of their own and pickle by
    reference, like any class).
    """
    if not isinstance(obj, type):
        return False
    schema_id = obj.__dict__.get("_schema_id")
    return type(schema_id) is str and _registry.get(schema_id) is obj


def registered_schema_count() -> int:
    """Number of live schema classes registered in this process."""
    return len(_registry)


# Deterministic ids are name-based UUIDs (RFC 4122 version 5) in this namespace.
_ID_NAMESPACE = uuid.UUID("6f1c1d2e-5a0b-4c8e-9a57-2f3c4b5d6e7f")


def derived_schema_id(kind: str, module, typename: str, fields, defaults,
                      occurrence: int = 0) -> str | None:
    """The id a definition always gets, in every process; None if it has none.

    ``occurrence`` tells apart identical definitions made in one module (the
    n-th one gets ``n``). ``defaults`` enter through ``repr``; a default whose
    repr fails gives no derived id (the caller uses a random one).
    ``multiprocessing``'s name for the parent's ``__main__``, ``__mp_main__``,
    counts as ``__main__``, so a spawn child derives its parent's ids.
    """
    if module == "__mp_main__":
        module = "__main__"
    try:
        key = "\x1f".join([kind, str(module), typename, ",".join(fields),
                           repr(tuple(defaults) if defaults is not None else None),
                           str(occurrence)])
    except Exception:  # noqa: BLE001 - an unrepresentable default
        return None
    return uuid.uuid5(_ID_NAMESPACE, key).hex


def reduce_schema(cls):
    """copyreg reducer: schema classes by value, user subclasses by name."""
    schema_id = cls.__dict__.get("_schema_id")
    if schema_id is None:
        # ``class Point(SomeSchema): ...`` -- an ordinary class statement;
        # pickle it by reference like any other class.
        return cls.__qualname__
    module = cls.__module__ if isinstance(cls.__module__, str) else None
    defaults = tuple(cls._field_defaults.values())
    return (rebuild_schema,
            (type(cls).__name__, schema_id, cls._typename, cls._fields,
             defaults, module))


def rebuild_schema(kind, schema_id, typename, fields, defaults, module):
    """Return the schema for ``schema_id``, building it on first sight."""
    try:
        _metaclass, build = KINDS[kind]
    except (KeyError, TypeError):
        raise SchemaDefinitionError(
            f"unpickled schema {typename!r} has unknown kind {kind!r}; "
            f"expected one of {sorted(KINDS)}") from None
    if not isinstance(schema_id, str):
        raise SchemaDefinitionError(
            f"unpickled schema {typename!r} has an invalid id {schema_id!r}")
    with _lock:
        existing = _registry.get(schema_id)
        if existing is not None:
            if (type(existing).__name__ != kind or existing._typename != typename
                    or existing._fields != tuple(fields)
                    or len(existing._field_defaults) != len(defaults)):
                raise SchemaConflictError(
                    f"unpickled schema {typename!r} ({kind}) has fields "
                    f"({', '.join(fields)}) but this process already registered "
                    f"id {schema_id} as {existing._typename!r} "
                    f"({type(existing).__name__}) with fields "
                    f"({', '.join(existing._fields)})")
            return existing
        return build(typename, fields, defaults=defaults, module=module,
                     schema_id=schema_id)
