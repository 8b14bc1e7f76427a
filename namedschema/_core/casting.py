"""Whether a cast keeps values: the one rule for schema evolution and buffer writes.

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
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["changed_at", "cast_checked", "value_problem", "describe_change", "quiet_cast",
           "limits"]

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
    with np.errstate(all="ignore"):
        if kind in "fc":
            if src.dtype.kind in "iu":
                return ~np.isfinite(dst)
            bad = np.isfinite(src) & ~np.isfinite(dst)
            bad |= np.isnan(src) != np.isnan(dst)
            if src.dtype.kind == "c" and kind == "f":
                bad |= np.imag(src) != 0
            return bad
        if src.dtype.kind in "iu" and kind in "iu":  # by range: 128 -> int8 -> 128 wraps
            info = np.iinfo(dst.dtype)
            return (src < info.min) | (src > info.max)
        back = dst.astype(src.dtype)
        if src.dtype.kind in "fc":
            return ~(back == src) | ~np.isfinite(src)
        return back != src


def cast_checked(src: Any, dtype: Any) -> tuple[np.ndarray, tuple | None]:
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
    first = None
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


def changed_at(src: Any, dtype: Any) -> tuple | None:
    """The first index where casting ``src`` to ``dtype`` changes a value, or None."""
    src = np.asarray(src)
    if np.can_cast(src.dtype, dtype, "safe"):
        return None
    return cast_checked(src, dtype)[1]


def describe_change(src: Any, dtype: Any, index: tuple) -> str:
    """``"70000 at [1] becomes 4464"`` for the value at ``index``."""
    value = np.asarray(src)[index]
    with quiet_cast():
        new = np.asarray(value).astype(dtype)[()]
    where = f" at {list(index)}" if index else ""
    return f"{value!r}{where} becomes {new!r}"


@functools.lru_cache(maxsize=256)
def limits(dtype: np.dtype) -> tuple:
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
