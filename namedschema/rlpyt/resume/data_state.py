"""Generic, attribute-wise state of rlpyt objects and trajectory infos.

Captured state is data wherever it can be (arrays, tensors, numbers, array
tuples), so a checkpoint stores it raw; restoring writes arrays *into* the
objects a freshly built run made (``np.copyto``), which keeps views as views
and shared memory shared. The handlers of rlpyt's classes are built from these.
The global RNGs' ``rng_state`` / ``set_rng_state`` live in ``namedschema.state.rng``
(not rlpyt specific) and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any, TypeVar

import numpy as np

from ..._core.optional import import_torch, is_tensor
from ..._core.tree import is_named
from ...checkpoint.mapped import copy_from_map
from ...state.rng import rng_state, set_rng_state
from .registry import StateMismatchError

__all__ = ["data_state", "restore_data_state", "copy_into", "fresh_copy",
           "traj_infos_state", "make_traj_infos", "rng_state", "set_rng_state"]

_Info = TypeVar("_Info", bound=MutableMapping[str, Any])   # rlpyt's TrajInfo, an AttrDict

_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)


def _is_shared_value(value) -> bool:
    # multiprocessing RawValue (a ctypes scalar) or Value (a Synchronized wrapper).
    from multiprocessing.sharedctypes import Synchronized
    return isinstance(value, Synchronized) or \
        (hasattr(type(value), "_type_") and hasattr(value, "value"))


def _is_replay_part(value) -> bool:
    # Objects a replay buffer is made of (its SumTree): their state is recursed into.
    module = getattr(type(value), "__module__", "") or ""
    return module.startswith("rlpyt.replays.") and hasattr(value, "__dict__") \
        and not isinstance(value, type)


def _data_value(value):
    """``(kind, data)`` for a storable attribute value, or None to skip it."""
    if isinstance(value, np.ndarray) or is_tensor(value):
        return ("array", value)
    if isinstance(value, _SCALARS):
        return ("value", value)
    if is_named(value):
        return ("tuple", value)
    if _is_shared_value(value):
        return ("shared", value.value)
    if _is_replay_part(value):
        return ("object", data_state(value))
    return None


def data_state(obj: Any, names: Iterable[str] | None = None,
               skip: Iterable[str] = ()) -> dict[str, Any]:
    """Attribute-wise state: arrays, tensors, scalars, array tuples, shared values.

    Nested parts of replay buffers (a ``SumTree``) are recursed into. Attributes of
    other kinds (locks, functions, classes) are not state and are left out.
    """
    out = {}
    items = vars(obj).items() if names is None else \
        ((n, getattr(obj, n)) for n in names if hasattr(obj, n))
    for name, value in items:
        if name in skip:
            continue
        item = _data_value(value)
        if item is not None:
            out[name] = [item[0], item[1]]
    return out


def copy_into(target, value, where):
    """Write ``value`` into the existing array/tensor/array tuple ``target``."""
    if is_named(target):
        if not is_named(value) or tuple(target._fields) != tuple(value._fields):
            raise StateMismatchError(f"{where}: fields differ: checkpoint "
                                     f"{getattr(value, '_fields', type(value).__name__)}, "
                                     f"built {tuple(target._fields)}")
        for field, t, v in zip(target._fields, target, value, strict=True):
            copy_into(t, v, f"{where}.{field}")
        return
    if target is None or isinstance(target, _SCALARS):
        if not (value is None or isinstance(value, _SCALARS)):
            raise StateMismatchError(f"{where}: the built run has {target!r} where "
                                     f"the checkpoint has {type(value).__name__}")
        return
    if is_tensor(target):
        torch = import_torch()
        src = value if is_tensor(value) else torch.as_tensor(np.asarray(value))
        if tuple(src.shape) != tuple(target.shape) or src.dtype != target.dtype:
            raise StateMismatchError(
                f"{where}: checkpoint has {src.dtype} {tuple(src.shape)}, the built run "
                f"{target.dtype} {tuple(target.shape)}")
        with torch.no_grad():
            target.copy_(src)
        return
    src = value.numpy() if is_tensor(value) else np.asarray(value)
    if src.shape != target.shape or src.dtype != target.dtype:
        raise StateMismatchError(
            f"{where}: checkpoint has {src.dtype} {src.shape}, the built run "
            f"{target.dtype} {target.shape} (was it built with other sizes?)")
    # In pieces, releasing a mapped checkpoint's pages behind them: a resume
    # holds the buffer once, not once in memory and once as mapped file.
    copy_from_map(target, src)


def restore_data_state(obj: Any, state: dict[str, Any], where: str,
                       _written: Any = None) -> None:
    """Put a :func:`data_state` back: arrays in place, scalars assigned.

    An array that views memory already written in this call, from a saved
    array that viewed the same saved memory, is not copied twice (the frame
    buffer's ``samples_new_frames``, the sum tree's ``priorities``).
    """
    written = [] if _written is None else _written
    # Arrays that own their memory first, so that their views can be skipped.
    items = sorted(state.items(), key=lambda item: _is_view(getattr(obj, item[0], None)))
    for name, (kind, data) in items:
        path = f"{where}.{name}"
        current = getattr(obj, name, None)
        if kind == "value":
            setattr(obj, name, data)
        elif kind == "shared":
            if current is None or not _is_shared_value(current):
                raise StateMismatchError(f"{path}: expected a shared value in the built run")
            current.value = data
        elif kind == "object":
            if current is None or not hasattr(current, "__dict__"):
                raise StateMismatchError(f"{path}: the built run has no object here")
            restore_data_state(current, data, path, written)
        elif kind in ("array", "tuple"):
            if current is None or isinstance(current, _SCALARS):
                # Made lazily (first sample_batch, say): take the checkpoint's.
                setattr(obj, name, fresh_copy(data))
            elif not _already_written(current, data, written):
                copy_into(current, data, path)
                if isinstance(current, np.ndarray):
                    written.append((current, data))
        else:
            raise StateMismatchError(f"{path}: unknown state kind {kind!r}")


def _is_view(value) -> bool:
    return isinstance(value, np.ndarray) and value.base is not None


def _already_written(target, source, written) -> bool:
    if not (isinstance(target, np.ndarray) and isinstance(source, np.ndarray)):
        return False
    if target.shape != source.shape or target.dtype != source.dtype:
        return False
    for t, s in written:
        if np.may_share_memory(target, t) and np.may_share_memory(source, s):
            # Both sides view the same offsets only if the layout matches.
            offset_t = _offset(target, t)
            offset_s = _offset(source, s)
            if offset_t is not None and offset_t == offset_s \
                    and target.strides == source.strides:
                return True
    return False


def _offset(view, base):
    try:
        return (view.__array_interface__["data"][0] - base.__array_interface__["data"][0])
    except (AttributeError, KeyError, TypeError):
        return None


def fresh_copy(value: Any) -> Any:
    """A copy of an array, tensor or array tuple (others are returned as they are)."""
    if is_named(value):
        return type(value)(*(fresh_copy(v) for v in value))
    if is_tensor(value):
        return value.clone()
    if isinstance(value, np.ndarray):
        out = np.empty_like(value)
        copy_from_map(out, value)   # as copy_into: the mapped pages are released
        return out
    return value


# -- trajectory infos (AttrDicts) are stored as plain dicts -------------------------

def traj_infos_state(infos: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Trajectory infos (rlpyt ``AttrDict``s) as plain dicts, for a checkpoint."""
    return [dict(info) for info in infos]


def make_traj_infos(states: Iterable[Mapping[str, Any]], cls: Callable[[], _Info]
                    ) -> list[_Info]:
    """Trajectory infos of class ``cls`` again, from :func:`traj_infos_state`."""
    out = []
    for state in states:
        info = cls()
        info.clear()
        for key, value in state.items():
            info[key] = value
        out.append(info)
    return out
