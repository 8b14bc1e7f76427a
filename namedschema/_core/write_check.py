"""What ``x[loc] = value`` may write into a named array tuple, checked before any field is.

numpy's assignment casts unsafely: an int64 ``300`` written into a uint8 field
wraps to ``44``, ``0.7`` into an int field becomes ``0``. A schema buffer
declares its dtypes by its arrays, so a write may cast at most by numpy's
``same_kind`` rule, and only when every value is kept (``_casting``): an
int64 300 into uint8 or an int64 array into a bool field is refused. Python
numbers carry no dtype and are checked by value (``0`` and ``1`` fit a bool
field, ``3.0`` fits an int field, ``0.7`` does not). A named tuple of other
fields (a ``Point`` written into a ``Transition``) is refused as such, instead
of being broadcast into every field.

All fields are checked before the first is written, so a refused write
leaves the instance untouched. The generated ``__setitem__`` calls this only
when some value's dtype is not the very dtype of its field: writes of
matching dtypes pay for one identity test per field.

check_write   raise the FieldError a write would need, before anything is written
SCALAR_RULES  (type of a Python number, field dtypes...) -> (lowest, highest, whole):
              a broadcast of such a number within the bounds (and whole, if asked)
              needs no full check; filled by check_write, read by generated code

The core (``_instance``) imports the standard library alone; it loads this
module at the first write that needs a check once numpy is in the process,
and this module installs ``check_write`` there (``install_write_check``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import field_error_class
from .casting import changed_at, describe_change, limits, value_problem
from .instance import SCALAR_RULES, install_write_check
from .optional import torch_if_loaded
from .tree import is_named

__all__ = ["check_write", "SCALAR_RULES"]

_NUMBERS = (bool, int, float, complex)
_MAX_RULES = 4096


def _scalar_rule(nat: Any, value: Any) -> None:
    """Remember the bounds within which ``value``'s type broadcasts into ``nat`` unchecked."""
    if type(value) not in (bool, int, float) or len(SCALAR_RULES) >= _MAX_RULES:
        return
    dtypes = []
    for field in nat:
        dtype = getattr(field, "dtype", None)
        if not isinstance(dtype, np.dtype) or dtype.kind not in "biufc":
            return  # None, nested or tensor fields: always the full check
        dtypes.append(dtype)
    low, high, whole = -math.inf, math.inf, False
    for dtype in dtypes:
        lo, hi = (0, 1) if dtype.kind == "b" else limits(dtype)
        low, high = max(low, lo), min(high, hi)
        whole = whole or dtype.kind in "biu"
    SCALAR_RULES[(type(value), *dtypes)] = (low, high, whole)


def _np_dtype(x: Any) -> np.dtype | None:
    """The numpy dtype of an array, numpy scalar or tensor (None if it has none)."""
    dtype = getattr(x, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype
    torch = torch_if_loaded()
    if torch is not None and isinstance(dtype, torch.dtype):
        try:
            return np.dtype(str(dtype).removeprefix("torch."))
        except TypeError:
            return None  # bfloat16 and other types numpy lacks: torch decides
    return None


def _a(word: str) -> str:
    return ("an " if word[:1] in "aeio" else "a ") + word


def _named_fields(value: Any) -> tuple | None:
    """The fields of a named tuple (they must match to write field by field), else None."""
    return tuple(type(value)._fields) if is_named(value) else None


def _leaf(field: Any, value: Any) -> tuple[type, str] | None:
    """Why ``value`` may not be written into the array (or tensor) ``field``, or None."""
    dst = _np_dtype(field)
    if dst is None or dst.hasobject:
        return None  # not an array we know: its own assignment decides
    if value is None:
        return TypeError, f"None cannot be written into {_a(dst.name)} field"
    if type(value) in _NUMBERS:
        problem = value_problem(value, dst)
        return None if problem is None else \
            (ValueError, f"{problem}: {_a(dst.name)} field cannot hold it")
    if _named_fields(value) is not None:
        return TypeError, (f"a {type(value).__name__} ({', '.join(value._fields)}) is a named "
                           f"tuple, not a value for {_a(dst.name)} field")
    src = _np_dtype(value)
    array = value
    if src is None:
        try:
            array = np.asarray(value)
        except Exception:  # the write itself will report it
            return None
        src = array.dtype
    if src == dst or src.hasobject or src.kind not in "biufc":
        return None
    if not np.can_cast(src, dst, "same_kind"):
        return TypeError, (f"{_a(src.name)} value cannot be written into {_a(dst.name)} "
                           f"field (writes cast at most by numpy's same_kind rule; convert "
                           "it first if that is what you mean)")
    if np.can_cast(src, dst, "safe"):
        return None
    if src is not _np_dtype(array):  # a tensor: its values through numpy
        array = array.detach().cpu().numpy() if hasattr(array, "detach") else np.asarray(array)
    where = changed_at(array, dst)
    if where is None:
        return None
    return ValueError, (f"{describe_change(array, dst, where)}: {_a(dst.name)} field "
                        "cannot hold it")


def _pairs(nat: Any, value: Any, path: tuple) -> tuple | None:
    for name, field, item in zip(nat._fields, nat, value, strict=True):
        problem = _pair(field, item, path + (name,))
        if problem is not None:
            return problem
    return None


def _pair(field: Any, value: Any, path: tuple) -> tuple | None:
    if field is None:
        if value is None:
            return None
        return path, TypeError, (f"the field is None, so it cannot take a "
                                 f"{type(value).__name__} value")
    fields = _named_fields(field)
    if fields is not None:
        if _named_fields(value) == fields:
            return _pairs(field, value, path)
        return _broadcast(field, value, path)
    problem = _leaf(field, value)
    return None if problem is None else (path, *problem)


def _broadcast(nat: Any, value: Any, path: tuple) -> tuple | None:
    fields = _named_fields(value)
    if fields is not None and fields != nat._fields:
        return path, TypeError, (
            f"a {type(value).__name__} ({', '.join(fields)}) cannot be written into a "
            f"{getattr(nat, '_typename', type(nat).__name__)} ({', '.join(nat._fields)}): "
            "a different schema")
    for name, field in zip(nat._fields, nat, strict=True):
        if field is None:
            continue
        if isinstance(field, tuple) and _named_fields(field) is not None:
            problem = _broadcast(field, value, path + (name,))
        else:
            leaf = _leaf(field, value)
            problem = None if leaf is None else (path + (name,), *leaf)
        if problem is not None:
            return problem
    return None


def check_write(nat: Any, loc: Any, value: Any, same_fields: bool) -> None:
    """Raise the FieldError that ``nat[loc] = value`` needs, before any field is written.

    ``same_fields``: ``value`` has ``nat``'s fields and is written field by
    field; otherwise it is broadcast into every field.
    """
    try:
        problem = _pairs(nat, value, ()) if same_fields else _broadcast(nat, value, ())
    except RecursionError:
        # Nested too deeply to check here: the write itself fails the same way
        # (as a FieldError naming the path) before it reaches a leaf.
        return
    if problem is None:
        if not same_fields:
            _scalar_rule(nat, value)
        return
    path, kind, reason = problem
    error = field_error_class(kind())(nat._typename, path, loc, reason, (), assigning=True)
    error.source_id = id(nat)
    raise error


install_write_check(check_write)
