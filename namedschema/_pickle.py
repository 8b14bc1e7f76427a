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

register_schema   add a newly made schema class to the registry
rebuild_schema    the unpickling entry point (stable name: pickles refer to it)
reduce_schema     the copyreg reducer for schema metaclasses
"""

from __future__ import annotations

import threading
import weakref

from .errors import SchemaConflictError, SchemaDefinitionError

_registry: "weakref.WeakValueDictionary[str, type]" = weakref.WeakValueDictionary()
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
