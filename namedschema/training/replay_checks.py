"""What a replay buffer takes in: batches and saved states matched by field names, values that fit.

A buffer stores each field in the dtype of its example. What it is given (a
batch to ``extend``, a saved state to ``load_state_dict``) is matched to its
fields by **name** at every level, never by position, so a batch or a file
whose schema lists the same fields in another order lands in the right
columns, and one with other fields is refused (a saved state goes through the
rules of schema evolution first: :func:`namedschema.upgrade`). A batch's values
must survive the cast into the stored dtypes, by the rule ``buffer[i] = step``
follows (:mod:`namedschema._core.writes`): int64 ``70000`` into an int16 field,
``1e300`` into a float32 one are refused, naming schema, field and value.

batch_leaves     the arrays of a batch, in the storage's field order, matched by name
first_change     where casting an array into a dtype would change a value (or None)
refuse_change    the FieldValueError for such a value, naming schema, field, row and value
by_names         a step whose fields are the storage's in another order, reordered
saved_leaves     the arrays of a saved storage in the storage's field order (names, evolution)
leaf_paths       the field path of every array of a storage (for messages)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.tree import is_named
from .._core.writes import cast_checked, quiet_cast
from ..errors import (
    BufferShapeError,
    FieldError,
    FieldValueError,
    SchemaEvolutionError,
    StructureMismatchError,
)

__all__ = ["batch_leaves", "first_change", "refuse_change", "by_names", "saved_leaves",
           "leaf_paths"]

_CHUNK_ELEMENTS = 1 << 20   # a cast is checked this many elements at a time
_RANGE_PIECE = 1 << 16      # integers are range-checked in pieces that stay in cache


def _typename(x: Any) -> str:
    return getattr(x, "_typename", type(x).__name__)


def _describe_fields(x: Any) -> str:
    return f"{_typename(x)} ({', '.join(type(x)._fields)})"


def _names_differ(value: Any, like: Any) -> str:
    """How the fields of ``value`` differ from those of ``like`` (both named tuples)."""
    have, want = set(type(value)._fields), set(type(like)._fields)
    parts = []
    if want - have:
        parts.append("lacks " + ", ".join(sorted(want - have)))
    if have - want:
        parts.append("has " + ", ".join(sorted(have - want)) + " that the buffer lacks")
    return "; ".join(parts) or "repeats a field"


def _pairs(value: Any, like: Any) -> Any:
    """``(value's field, like's field, name)`` by name, or None if the names differ."""
    fields, want = type(value)._fields, type(like)._fields
    if fields == want:
        return zip(value, like, want, strict=True)
    if len(fields) != len(want) or set(fields) != set(want):
        return None
    return ((getattr(value, name), field, name) for name, field in zip(want, like,
                                                                          strict=True))


def batch_leaves(batch: Any, storage: Any, where: str) -> list[Any]:
    """The arrays of ``batch`` in the order of ``storage``'s arrays, matched by field name.

    The field names must be the storage's at every level (any order); a field
    that is None in the storage must be None in the batch. Raises
    StructureMismatchError naming both schemas otherwise.
    """
    out: list[Any] = []
    _collect(batch, storage, where, _typename(storage), out)
    return out


def _collect(value: Any, like: Any, where: str, path: str, out: list[Any]) -> None:
    if like is None:
        if value is not None:
            raise StructureMismatchError(f"{where}: {path}", "None (the buffer stores no "
                                         "such field)", type(value).__name__)
        return
    if not is_named(like):
        if value is None:
            raise StructureMismatchError(f"{where}: {path}", "an array", "None")
        out.append(value)
        return
    if not is_named(value):
        raise StructureMismatchError(f"{where}: {path}", f"a {_describe_fields(like)}",
                                     type(value).__name__)
    pairs = _pairs(value, like)
    if pairs is None:
        raise StructureMismatchError(
            f"{where}: {path}", f"the fields of {_describe_fields(like)}",
            _describe_fields(value), f"it {_names_differ(value, like)} (fields are matched "
            "by name, never by position)")
    for item, field, name in pairs:
        _collect(item, field, where, f"{path}.{name}", out)


def first_change(value: np.ndarray, dtype: np.dtype) -> tuple[Any, ...] | None:
    """The first index where casting ``value`` into ``dtype`` changes a value, or None.

    Integers into integers are checked by range (a minimum and a maximum, no
    copy); anything else by casting a bounded chunk at a time. A cast numpy
    calls safe changes nothing and is not looked at.
    """
    if np.can_cast(value.dtype, dtype, "safe") or value.size == 0:
        return None
    if value.dtype.kind in "iu" and dtype.kind in "iu":
        info = np.iinfo(dtype)
        if _within(value, info.min, info.max):
            return None
        return tuple(int(i) for i in np.argwhere((value < info.min) | (value > info.max))[0])
    rows = max(1, _CHUNK_ELEMENTS // max(1, value.size // max(1, value.shape[0])))
    for start in range(0, value.shape[0], rows):
        where = cast_checked(value[start:start + rows], dtype)[1]
        if where is not None:
            return (start + where[0],) + where[1:]
    return None


def _within(value: np.ndarray, low: int, high: int) -> bool:
    """Whether every integer of ``value`` is in ``[low, high]``: a maximum (and a minimum
    for signed values), over cache-sized pieces when the array is contiguous."""
    signed = value.dtype.kind == "i"
    flat = value.reshape(-1) if value.flags.c_contiguous else None
    pieces = [value] if flat is None else [flat[i:i + _RANGE_PIECE]
                                           for i in range(0, flat.size, _RANGE_PIECE)]
    return not any(piece.max() > high or (signed and piece.min() < low) for piece in pieces)


def refuse_change(storage: Any, path: tuple[str, ...], value: np.ndarray, dtype: np.dtype,
                  index: tuple[Any, ...], where: str) -> FieldError:
    """The error for a batch value the stored dtype cannot hold (nothing was written).

    Its ``loc`` is the row of the batch (with the element's index for fields
    of more than one dimension).
    """
    old = np.asarray(value[index])
    with quiet_cast():
        new = np.asarray(old).astype(dtype)
    article = "an" if dtype.name[:1] in "aeiou" else "a"
    reason = (f"{old.item()!r} becomes {new.item()!r}: {article} {dtype.name} field cannot hold it (the "
              f"batch given to {where})")
    return FieldValueError(_typename(storage), path, index[0] if len(index) == 1 else index,
                           reason, (), assigning=True)


def by_names(step: Any, storage: Any) -> Any:
    """``step`` with its fields in ``storage``'s order when it has the same names in
    another order (at any level); ``step`` itself when nothing needs reordering or the
    names differ (the write then refuses it)."""
    if not (is_named(step) and is_named(storage)):
        return step
    pairs = _pairs(step, storage)
    if pairs is None:
        return step
    items = [(by_names(item, field), item) for item, field, _ in pairs]
    if type(step)._fields == type(storage)._fields and all(a is b for a, b in items):
        return step
    return type(storage)(*(new for new, _ in items))


def leaf_paths(storage: Any) -> list[tuple[str, ...]]:
    """The field path of every array of ``storage`` (None fields skipped), in order."""
    out: list[Any] = []

    def walk(x: Any, path: tuple[str, ...]) -> None:
        for name, value in zip(type(x)._fields, x, strict=True):
            if is_named(value):
                walk(value, path + (name,))
            elif value is not None:
                out.append(path + (name,))
    walk(storage, ())
    return out


def _schema_classes(x: Any, out: dict[str, Any]) -> dict[str, Any]:
    if is_named(x):
        out.setdefault(_typename(x), type(x))
        for value in x:
            _schema_classes(value, out)
    return out


def saved_leaves(saved: Any, storage: Any, capacity: int, where: str) -> list[Any]:
    """The arrays of a saved ``storage`` in the order of this buffer's, matched by name.

    Fields with the same names (in any order, at every level) map directly.
    Otherwise the saved storage is first mapped onto the buffer's schemas by
    the rules of schema evolution (:func:`namedschema.upgrade`: a new field
    from its default, a removed one refused), which needs every saved field to
    hold ``capacity`` rows. The saved schema must have the buffer's typename
    (a renamed schema maps through ``load(..., schemas={old: new})``). Raises
    BufferShapeError, with the cause chained.
    """
    if is_named(saved) and _typename(saved) != _typename(storage):
        raise BufferShapeError(
            f"{where}: the saved storage is a {_describe_fields(saved)}, this buffer stores "
            f"{_describe_fields(storage)} (for a renamed schema, load the file with "
            f"schemas={{{_typename(saved)!r}: {_typename(storage)}}})")
    try:
        return batch_leaves(saved, storage, where)
    except StructureMismatchError as exc:
        if not is_named(saved):
            raise BufferShapeError(f"{where}: the saved storage is not a schema instance "
                                   f"({exc})") from exc
        mismatch = exc
    for leaf in _saved_arrays(saved):
        if np.ndim(leaf) < 1 or np.shape(leaf)[0] != capacity:
            raise BufferShapeError(f"{where}: the saved storage holds an array of shape "
                                   f"{np.shape(leaf)}, not {capacity} steps") from mismatch
    from ..evolution import upgrade
    try:
        upgraded = upgrade(saved, _schema_classes(storage, {}))
        return batch_leaves(upgraded, storage, where)
    except (SchemaEvolutionError, StructureMismatchError) as exc:
        raise BufferShapeError(f"{where}: the saved storage does not map onto this "
                               f"buffer's fields by name: {exc}") from exc


def _saved_arrays(x: Any) -> list[Any]:
    if is_named(x):
        return [a for value in x for a in _saved_arrays(value)]
    return [] if x is None else [x]
