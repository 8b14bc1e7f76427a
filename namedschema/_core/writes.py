"""What a write into a named array tuple may change: casts that keep values, checks.

Needs numpy: loaded by name at the first write that needs a check once numpy is
in the process (``schema``, at its end); it imports nothing of the
core but the standard-library module ``optional``, so no cycle goes through it.

Casts that keep values
----------------------

Whether a cast keeps values: the one rule for schema evolution and buffer writes.

A cast that numpy's rules allow may still change a value: ``int64 -> int16``
under ``same_kind`` wraps ``70000`` to ``4464``, ``float64 -> float32`` turns
``1e300`` into ``inf``, ``0.7`` written into an int field becomes ``0``. Here a
cast *keeps* a value when it comes back equal (integers, bools), or, for a
float or complex destination, when it stays finite where it was finite, NaN
where it was NaN, and has no imaginary part dropped: rounding to the new
precision is a float cast's meaning, overflow and wrap-around are not.

changed_at       the first index where casting an array changes a value, or None
cast_checked     the cast array and that index (the cast done once, chunk by chunk)
value_problem    why writing one value into a dtype would change it, or None
describe_change  "70000 becomes 4464" for a message
quiet_cast       a context without numpy's cast warnings (overflow, ComplexWarning)
limits           (lowest, highest) value of an integer or float dtype

Write checks
------------

What ``x[loc] = value`` may write into a named array tuple, checked before any field is.

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

check_write     raise the FieldError a write would need, before anything is written
write_checker   ``check_write``, bound to the core's scalar rules and named-tuple test

The scalar rules (``instance.SCALAR_RULES``: type of a Python number, field
dtypes... -> lowest, highest, whole) say which broadcasts of a number need no
full check; ``check_write`` fills them, the generated ``__setitem__`` reads
them. The core (``instance``, ``schema``) imports the standard library alone:
``schema`` loads this module at the first write that
needs a check once numpy is in the process, and hands it the rules and
``schema.is_named`` through :func:`write_checker`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..errors import field_error_class

__all__ = ["cast_checked", "changed_at", "check_write", "describe_change", "limits",
           "quiet_cast", "value_problem", "write_checker"]


# --------------------------------------------------------------------------
# Casts that keep values
# --------------------------------------------------------------------------

_CHUNK_ELEMENTS = 1 << 20   # checked a chunk at a time: bounded extra memory


@contextlib.contextmanager
def quiet_cast() -> Iterator[None]:
    """No numpy warnings for a cast whose changes are checked (or were asked for)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        yield


def _changed(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Boolean mask: where ``dst`` (the cast of ``src``) does not keep the value."""
    if src.dtype.kind == "b":
        return np.zeros(src.shape, bool)
    kind = dst.dtype.kind
    bad: np.ndarray  # (numpy's operators on arrays of unknown dtype are typed Any)
    with np.errstate(all="ignore"):
        if kind in "fc":
            if src.dtype.kind in "iu":
                bad = ~np.isfinite(dst)
                return bad
            bad = np.isfinite(src) & ~np.isfinite(dst)
            bad |= np.isnan(src) != np.isnan(dst)
            if src.dtype.kind == "c" and kind == "f":
                bad |= np.imag(src) != 0
            return bad
        if src.dtype.kind in "iu" and kind in "iu":  # by range: 128 -> int8 -> 128 wraps
            info = np.iinfo(dst.dtype)
            bad = (src < info.min) | (src > info.max)
            return bad
        back = dst.astype(src.dtype)
        bad = ~(back == src) | ~np.isfinite(src) if src.dtype.kind in "fc" else back != src
        return bad


def cast_checked(src: Any, dtype: Any) -> tuple[np.ndarray, tuple[int, ...] | None]:
    """``(src cast to dtype, index of the first changed value or None)``."""
    src = np.asarray(src)
    dtype = np.dtype(dtype)
    out = np.empty(src.shape, dtype)
    if src.ndim == 0 or src.size <= _CHUNK_ELEMENTS:
        with quiet_cast():
            out[...] = src
        bad = _changed(src, out)
        return out, (tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else None)
    row = max(1, src.size // max(src.shape[0], 1))
    step = max(1, _CHUNK_ELEMENTS // row)
    first: tuple[int, ...] | None = None
    for start in range(0, src.shape[0], step):
        part = src[start:start + step]
        with quiet_cast():
            out[start:start + step] = part
        if first is None:
            bad = _changed(part, out[start:start + step])
            if bad.any():
                where = np.argwhere(bad)[0]
                first = (start + int(where[0]),) + tuple(int(i) for i in where[1:])
    return out, first


def changed_at(src: Any, dtype: Any) -> tuple[int, ...] | None:
    """The first index where casting ``src`` to ``dtype`` changes a value, or None."""
    src = np.asarray(src)
    if np.can_cast(src.dtype, dtype, "safe"):
        return None
    return cast_checked(src, dtype)[1]


def describe_change(src: Any, dtype: Any, index: tuple[int, ...]) -> str:
    """``"70000 at [1] becomes 4464"`` for the value at ``index``."""
    value = np.asarray(src)[index]
    with quiet_cast():
        new = np.asarray(value).astype(dtype)[()]
    where = f" at {list(index)}" if index else ""
    return f"{value!r}{where} becomes {new!r}"


@functools.lru_cache(maxsize=256)
def limits(dtype: np.dtype) -> tuple[float, float]:
    """``(lowest, highest)`` value of an integer dtype; ``(-max, max)`` of a float one."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    top = float(np.finfo(dtype).max)
    return -top, top


def value_problem(value: Any, dtype: np.dtype) -> str | None:
    """Why writing the Python number ``value`` into ``dtype`` would change it, or None.

    Python numbers carry no dtype, so they are checked by value: an int must
    be held exactly (range, and 0/1 for bool), a float written into an
    integer or bool field must be a whole number in range, and one written
    into a float field must not overflow; a complex needs a complex field.
    """
    kind = dtype.kind
    if isinstance(value, bool):
        return None
    if isinstance(value, complex):
        if kind != "c":
            return f"{value} is complex"
        return value_problem(value.real, dtype) or value_problem(value.imag, dtype)
    if isinstance(value, int):
        if kind == "b":
            return None if value in (0, 1) else f"{value} is not 0 or 1"
        if kind in "iu":
            low, high = limits(dtype)
            return None if low <= value <= high else \
                f"{value} is out of range [{low}, {high}]"
        if kind in "fc":
            return None if abs(value) <= limits(dtype)[1] else f"{value} overflows"
        return None
    if isinstance(value, float):
        if kind in "iub":
            if not math.isfinite(value) or value != int(value):
                return f"{value} is not a whole number"
            return value_problem(int(value), dtype)
        if kind in "fc" and math.isfinite(value) and abs(value) > limits(dtype)[1]:
            return f"{value} overflows to inf"
    return None


# --------------------------------------------------------------------------
# Write checks
# --------------------------------------------------------------------------

_NUMBERS = (bool, int, float, complex)
_MAX_RULES = 4096


def _never_named(value: Any) -> bool:
    return False


class _Core:
    """What the core hands over when it loads this module (:func:`write_checker`)."""

    rules: dict[tuple[object, ...], tuple[float, float, bool]] = {}
    is_named: Callable[[Any], bool] = _never_named


def write_checker(rules: dict[tuple[object, ...], tuple[float, float, bool]],
                  is_named: Callable[[Any], bool]) -> Callable[[Any, Any, Any, bool], None]:
    """:func:`check_write`, filling ``rules`` (the generated code's) and telling named
    tuples apart with ``is_named`` (``schema.is_named``: this module imports no schema)."""
    _Core.rules = rules
    _Core.is_named = is_named
    return check_write


def _scalar_rule(nat: Any, value: Any) -> None:
    """Remember the bounds within which ``value``'s type broadcasts into ``nat`` unchecked."""
    if type(value) not in (bool, int, float) or len(_Core.rules) >= _MAX_RULES:
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
    _Core.rules[(type(value), *dtypes)] = (low, high, whole)


def _np_dtype(x: Any) -> np.dtype | None:
    """The numpy dtype of an array, numpy scalar or tensor (None if it has none)."""
    dtype = getattr(x, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype
    # never imports torch; not tree.torch_if_loaded: tree imports schema, which loads us
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        try:
            return np.dtype(str(dtype).removeprefix("torch."))
        except TypeError:
            return None  # bfloat16 and other types numpy lacks: torch decides
    return None


#: (path of the refused field, exception class to raise, reason): what a refused write reports
Problem = tuple[tuple[str, ...], type[Exception], str]


def _a(word: str) -> str:
    return ("an " if word[:1] in "aeio" else "a ") + word


def _named_fields(value: Any) -> tuple[str, ...] | None:
    """The fields of a named tuple (they must match to write field by field), else None."""
    return tuple(type(value)._fields) if _Core.is_named(value) else None


def _leaf(field: Any, value: Any) -> tuple[type[Exception], str] | None:
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


def _pairs(nat: Any, value: Any, path: tuple[str, ...]) -> Problem | None:
    for name, field, item in zip(nat._fields, nat, value, strict=True):
        problem = _pair(field, item, path + (name,))
        if problem is not None:
            return problem
    return None


def _pair(field: Any, value: Any, path: tuple[str, ...]) -> Problem | None:
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


def _broadcast(nat: Any, value: Any, path: tuple[str, ...]) -> Problem | None:
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
