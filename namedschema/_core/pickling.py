"""Pickling: schema classes by value, and the flag of the checkpoint's own pickler.

Standard library only (``import namedschema`` loads it).

Arrays kept apart
-----------------

Whether the pickler now running keeps arrays out of the pickle (``namedschema.save``'s).

The checkpoint's pickler stores every array raw in the file and keeps views as
views itself. Reductions that would otherwise turn views into offsets for plain
pickle (``namedschema.rlpyt.patch.pickling``) ask :func:`arrays_kept_apart` and
hand the arrays over as they are. The flag lives here, below both layers: the
checkpoint sets it, the patch reads it, and neither looks into the other.

keeping_arrays_apart   context manager: the flag is set while it runs
arrays_kept_apart      whether the flag is set (in this thread or task)

Pickling by value
-----------------

Pickling schemas by value, and the process-local registry that keeps them unique.

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

Identity a file cannot forge. A schema that arrives in a file or a pickle
only ever gets a class whose definition is exactly the one it states
(defaults compared by type and value, ``False`` is not ``0``):

* an id already held by a class this program defined (a factory call in
  its own code) is never replaced: a different definition under that id is
  a SchemaError;
* an id held by a class built from another file with a different
  definition is no reason to fail: the new definition is registered under
  an id derived from the claimed id and its exact definition, so each file
  gets what it says and neither can block the other;
* a module-level definition adopts a class that arrived first only when the
  definitions are exactly equal; otherwise it builds its own class and takes
  the id over (see ``schema``).

``__module__`` of a class built from a pickle or a file is the module its
definition names when that module is already imported in this process, and
otherwise ``REBUILT_MODULE`` (a name no import can find): nothing named in
a file is ever imported later, say by ``dill`` looking the class up. The
recorded name is kept for pickling it on, and a module-level definition that
adopts the class restores it.

register_schema           add a newly made schema class to the registry
on_schema_use             call a function whenever a schema is made, rebuilt or pickled
lookup_schema             the live schema registered under an id, or None
is_registered_schema      whether an object is a live schema made by a factory
registered_schema_count   how many schemas this process holds
derived_schema_id         the one deterministic id derivation (module-level
                          schemas, checkpoints of classic namedtuple classes)
rebuild_schema            the unpickling entry point (stable name: pickles refer to it)
reduce_schema             the copyreg reducer for schema metaclasses
same_value                equality by type and value (the rule for defaults)
adopt_rebuilt             hand a class built from a file over to the module defining it
REBUILT_MODULE            ``__module__`` of rebuilt classes whose module is not imported
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ..errors import SchemaError

__all__ = ["arrays_kept_apart", "keeping_arrays_apart"]


# --------------------------------------------------------------------------
# Arrays kept apart
# --------------------------------------------------------------------------

_kept_apart = contextvars.ContextVar("namedschema_arrays_kept_apart", default=False)


@contextlib.contextmanager
def keeping_arrays_apart() -> Iterator[None]:
    """Set the flag while the block runs: the pickler in it stores arrays itself."""
    token = _kept_apart.set(True)
    try:
        yield
    finally:
        _kept_apart.reset(token)


def arrays_kept_apart() -> bool:
    """True inside :func:`keeping_arrays_apart`: arrays go to the pickler's own store."""
    return _kept_apart.get()


# --------------------------------------------------------------------------
# Pickling by value
# --------------------------------------------------------------------------

# A schema class, typed Any: its _fields, _typename etc. come from the metaclass, and
# this module (standard library only, below ``schema``) imports no schema type.
SchemaClass = Any
_registry: weakref.WeakValueDictionary[str, SchemaClass] = weakref.WeakValueDictionary()
# Re-entrant: rebuilding a schema happens while holding it, and building one
# registers it under the same lock.
_lock = threading.RLock()

# Filled by ``schema``: metaclass name -> (metaclass, builder). Pickles name the
# kind by string so that loading never imports anything chosen by the file.
KINDS: dict[str, tuple[Any, ...]] = {}

REBUILT_MODULE = "<namedschema rebuilt>"
# A class built by rebuild_schema (from a pickle or a file) carries, in this
# attribute, a 1-tuple of the module name its definition recorded;
# adopt_rebuilt removes it. (An attribute: the class itself says where it
# came from, with no mapping to keep in step.)
_REBUILT_FROM = "_schema_rebuilt_from"
_VARIANT_NAMESPACE = uuid.UUID("0b6d6c1e-8f57-4a0e-b1f4-5e0b2b8c9a31")


# Called after a schema is registered (made or rebuilt) and whenever one is pickled:
# ``namedschema.integrations`` hooks there the libraries imported since (no import hook).
_on_use: list[Callable[[], object]] = []


def on_schema_use(callback: Callable[[], object]) -> None:
    """Call ``callback()`` whenever a schema is made, rebuilt or pickled (once per callback).

    It runs at the start of pickling a schema class, before anything of it is
    written, and after a new schema class is registered; it must be cheap.
    """
    with _lock:
        if callback not in _on_use:
            _on_use.append(callback)


def _used() -> None:
    for callback in _on_use:
        callback()


def register_schema(cls: SchemaClass, schema_id: str) -> None:
    """Record ``cls`` as the live schema for ``schema_id``."""
    with _lock:
        _registry[schema_id] = cls
    _used()


def lookup_schema(schema_id: str) -> SchemaClass | None:
    """The live schema registered under ``schema_id``, or None."""
    return _registry.get(schema_id)


def is_registered_schema(obj: object) -> bool:
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


def derived_schema_id(kind: str, module: object, typename: str, fields: Iterable[str],
                      defaults: Iterable[object] | None,
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
    except Exception:  # an unrepresentable default
        return None
    return uuid.uuid5(_ID_NAMESPACE, key).hex


def reduce_schema(cls: SchemaClass
                  ) -> str | tuple[Callable[..., SchemaClass], tuple[object, ...]]:
    """copyreg reducer: schema classes by value, user subclasses by name."""
    _used()
    schema_id = cls.__dict__.get("_schema_id")
    if schema_id is None:
        # ``class Point(SomeSchema): ...`` -- an ordinary class statement;
        # pickle it by reference like any other class.
        qualname: str = cls.__qualname__
        return qualname
    recorded = cls.__dict__.get(_REBUILT_FROM)
    module = recorded[0] if recorded is not None else cls.__module__
    module = module if isinstance(module, str) else None
    defaults = tuple(cls._field_defaults.values())
    return (rebuild_schema,
            (type(cls).__name__, schema_id, cls._typename, cls._fields,
             defaults, module))


def rebuild_schema(kind: str, schema_id: object, typename: str, fields: Sequence[str],
                   defaults: Sequence[object], module: object) -> SchemaClass:
    """Return the schema for ``schema_id``, building it on first sight.

    The arguments are what a pickle holds (any object a crafted one chose): the id and
    the module are checked here, the rest by the schema's builder."""
    try:
        _metaclass, build = KINDS[kind]
    except (KeyError, TypeError):
        raise SchemaError(
            f"unpickled schema {typename!r} has unknown kind {kind!r}; "
            f"expected one of {sorted(KINDS)}") from None
    if not isinstance(schema_id, str):
        raise SchemaError(
            f"unpickled schema {typename!r} has an invalid id {schema_id!r}")
    with _lock:
        existing = _registry.get(schema_id)
        if existing is not None and not _same_definition(existing, kind, typename, fields,
                                                         defaults):
            if _REBUILT_FROM not in existing.__dict__:
                raise SchemaError(
                    f"unpickled schema {typename!r} ({kind}) with fields "
                    f"({', '.join(fields)}) and defaults {tuple(defaults)!r:.200} claims "
                    f"id {schema_id}, which this program already registered as "
                    f"{existing._typename!r} ({type(existing).__name__}) with fields "
                    f"({', '.join(existing._fields)}) and defaults "
                    f"{tuple(existing._field_defaults.values())!r:.200}")
            # Another file's definition holds the id: this one gets its own,
            # derived from the id and the definition (so one class per
            # definition); a forger holding that one too only earns it a
            # random id.
            schema_id = _variant_id(schema_id, kind, typename, fields, defaults)
            existing = _registry.get(schema_id)
            if existing is not None and not _same_definition(existing, kind, typename,
                                                             fields, defaults):
                schema_id, existing = uuid.uuid4().hex, None
        if existing is not None:
            return existing
        cls = build(typename, fields, defaults=defaults, schema_id=schema_id,
                    module=module if isinstance(module, str) and module in sys.modules
                    else REBUILT_MODULE)
        type.__setattr__(cls, _REBUILT_FROM, (module,))
        return cls



# Pickles name this function as ``namedschema._pickle.rebuild_schema`` (its home
# before the core moved into ``_core``); that module re-exports it, so files written
# by any version load, and new pickles are byte-identical to old ones.
rebuild_schema.__module__ = "namedschema._pickle"

def _same_definition(cls: SchemaClass, kind: str, typename: str, fields: Iterable[str],
                     defaults: Iterable[object]) -> bool:
    return (type(cls).__name__ == kind and cls._typename == typename
            and cls._fields == tuple(fields)
            and same_value(tuple(cls._field_defaults.values()), tuple(defaults)))


def _variant_id(schema_id: str, kind: str, typename: str, fields: Iterable[str],
                defaults: Iterable[object]) -> str:
    """The id of a definition that claims an id another file's definition holds."""
    try:
        text = repr((schema_id, kind, typename, tuple(fields), tuple(defaults)))
    except Exception:  # an unrepresentable default: no stable id
        return uuid.uuid4().hex
    return uuid.uuid5(_VARIANT_NAMESPACE, text).hex


def same_value(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` (any objects: users' field defaults) are equal in type and
    value (tuples, lists, dicts deeply).

    ``False == 0 == 0.0`` in Python, but as defaults they differ. Floats and
    complex numbers compare by ``repr`` (so ``nan`` equals itself and ``-0.0``
    is not ``0.0``); numpy arrays and scalars by dtype, shape and bytes.
    """
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (float, complex)):
        return repr(a) == repr(b)
    if hasattr(a, "shape") and hasattr(a, "dtype"):  # numpy arrays and scalars
        try:
            if a.shape != b.shape or a.dtype != b.dtype:
                return False
            if getattr(a.dtype, "kind", "O") != "O":
                return bool(a.tobytes() == b.tobytes())  # bit for bit, as repr for floats
            return bool((a == b).all())
        except Exception:
            return False
    try:
        return bool(a == b)
    except Exception:  # an object that cannot compare
        return False


def adopt_rebuilt(cls: SchemaClass, module: str) -> None:
    """``cls``, built from a file, now belongs to ``module``'s own definition."""
    with _lock:
        if _REBUILT_FROM in cls.__dict__:
            type.__delattr__(cls, _REBUILT_FROM)
            cls.__module__ = module
