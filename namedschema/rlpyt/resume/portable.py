"""Checkpoint state that loads anywhere, without ``patch_rlpyt()``: rlpyt's named tuples by value.

rlpyt makes its sample types at run time (``namedarraytuple_like``: classes
that no module holds, so pickle cannot name them) or assigns them to module
globals lazily (``BufferSamples``: a fresh interpreter has ``None`` there).
Pickles of such instances fail when written, or worse, when read. Here, in
the state a resume checkpoint holds, every such named tuple of a class-per-type
kind (rlpyt's ``namedarraytuple``, ``collections.namedtuple``) is replaced by
an instance of a namedschema schema with the same name and fields, which
the checkpoint stores by value; restoring writes field by field into the
objects the freshly built run made, so their own classes stay.

portable      the state with classic named tuples replaced (containers copied, not arrays)
retype        a restored named tuple rebuilt with the classes of the built run's one
dry_pickle    pickle a state without its arrays: what a checkpoint will refuse, said early
unsavable     why a captured state could not be checkpointed, or None
"""

from __future__ import annotations

import io
import pickle
import sys
import weakref

from ..._core.schema import (
    NamedArrayTupleSchema,
    NamedTupleSchema,
    is_classic_namedtuple_class,
    is_classic_nat_class,
)
from ..._core.tree import is_named
from ..patch.lazy_globals import LAZY_GLOBALS, refuse_unloadable

__all__ = ["portable", "retype", "dry_pickle", "unsavable"]

_SCHEMAS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _schema_for(cls):
    schema = _SCHEMAS.get(cls)
    if schema is None:
        factory = NamedArrayTupleSchema if is_classic_nat_class(cls) else NamedTupleSchema
        schema = factory(cls.__name__, tuple(cls._fields))
        _SCHEMAS[cls] = schema
    return schema


def _findable(cls) -> bool:
    """Whether pickle finds ``cls`` by name in any process (else it goes by value)."""
    module_name, name = cls.__module__, cls.__qualname__
    return (module_name, name) not in LAZY_GLOBALS and \
        getattr(sys.modules.get(module_name), name, None) is cls


def portable(value, _memo=None):
    """``value`` with the classic named tuples pickle cannot find by name made schemas.

    Those of classes a module holds (rlpyt's ``AgentInputs``, your own) stay
    as they are, in dicts, lists and tuples. Containers that hold none of the
    others are returned as they are; arrays and other objects are never copied.
    """
    memo = {} if _memo is None else _memo
    key = id(value)
    if key in memo:
        return memo[key]
    kind = type(value)
    if kind is dict:
        items = {k: portable(v, memo) for k, v in value.items()}
        result = value if all(items[k] is value[k] for k in value) else items
    elif kind is list:
        values = [portable(v, memo) for v in value]
        result = value if all(a is b for a, b in zip(values, value, strict=True)) else values
    elif isinstance(value, tuple):
        values = [portable(v, memo) for v in value]
        same = all(a is b for a, b in zip(values, value, strict=True))
        if is_classic_namedtuple_class(kind) and not _findable(kind):
            result = _schema_for(kind)(*values)
        elif same:
            result = value
        elif is_named(value):
            result = kind(*values)
        else:
            result = kind(values)
    else:
        result = value
    memo[key] = result
    return result


def retype(value, like):
    """``value`` (a named tuple) rebuilt with the classes of ``like``, where fields match."""
    if not (is_named(value) and is_named(like)
            and tuple(value._fields) == tuple(like._fields)):
        return value
    return type(like)(*(retype(v, w) for v, w in zip(value, like, strict=True)))


class _ArraysLeftOut(pickle.Pickler):
    def reducer_override(self, obj):
        # What namedschema.save refuses: rlpyt classes no fresh process finds.
        if isinstance(obj, type):
            refuse_unloadable(obj)
        return NotImplemented

    def persistent_id(self, obj):
        module = type(obj).__module__ or ""
        if module == "numpy" or module.startswith("torch"):
            return id(obj)
        return None


def dry_pickle(value) -> None:
    """Pickle ``value`` with its arrays and tensors left out; raise what pickle raises."""
    _ArraysLeftOut(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(value)


def unsavable(state) -> str | None:
    """Why ``state`` (captured by the handlers) could not be checkpointed; None if it can."""
    try:
        dry_pickle(portable(state))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
