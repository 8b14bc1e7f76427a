"""Stable-Baselines3's replay buffers as a state kind: their arrays and counters, as data.

is_sb3_replay_buffer   whether an object is SB3's ``ReplayBuffer`` / ``DictReplayBuffer``
capture                the buffer's arrays (not copied) and ``pos`` / ``full``
check                  whether a captured state fits a freshly built buffer (changes nothing)
apply                  copy a checked state into the buffer's own arrays

SB3's ``ReplayBuffer`` (and ``DictReplayBuffer``, whose observations are a dict
of arrays) is what SB3's off-policy algorithms and CleanRL's scripts store
transitions in. Its state is a few arrays (``observations``,
``next_observations`` unless ``optimize_memory_usage``, ``actions``,
``rewards``, ``dones``, ``timeouts``) and two counters (``pos``, ``full``);
everything else is its construction (sizes, spaces, device). The arrays are
stored as they are, so a checkpoint holds them as plain arrays (no pickle, and
incremental saves rewrite only the rows written since the last save), and
restoring copies them into the arrays the fresh buffer already has: no second
buffer in memory. A buffer built differently (another ``buffer_size``,
``n_envs``, ``optimize_memory_usage``, ``handle_timeout_termination``, array
shapes or dtypes, or dict keys) is refused by :func:`check`, before anything of
the run is changed.

A subclass's own attributes that are data (arrays, numbers) are captured too;
any others are named in a warning, once, as not captured. Buffers are matched
by the names in their class's MRO, so this module never imports
stable_baselines3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..checkpoint._storage import copy_from_map
from ..errors import StateMismatchError

if TYPE_CHECKING:
    from .state_kinds import KindContext

__all__ = ["is_sb3_replay_buffer", "capture", "check", "apply"]

_MODULE = "stable_baselines3.common.buffers"
ARRAYS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
COUNTERS = ("pos", "full")
CONFIG = ("n_envs", "buffer_size", "optimize_memory_usage", "handle_timeout_termination")
# What the constructor derives from its arguments and never changes afterwards.
_DERIVED = frozenset({"observation_space", "action_space", "obs_shape", "action_dim", "device"})
_KNOWN = frozenset(ARRAYS) | frozenset(COUNTERS) | frozenset(CONFIG) | _DERIVED
_SCALARS = (bool, int, float, np.generic)


def is_sb3_replay_buffer(obj: Any) -> bool:
    """Whether ``obj`` is SB3's ReplayBuffer or a subclass (DictReplayBuffer included)."""
    return any(c.__name__ == "ReplayBuffer" and c.__module__ == _MODULE
               for c in type(obj).__mro__)


def _extras(obj: Any) -> tuple[dict[str, Any], list[str]]:
    """A subclass's own attributes: those that are data, and the names of the others."""
    data, other = {}, []
    for name, value in vars(obj).items():
        if name in _KNOWN:
            continue
        if isinstance(value, np.ndarray) and not value.dtype.hasobject or \
                isinstance(value, _SCALARS):
            data[name] = value
        else:
            other.append(name)
    return data, other


def capture(obj: Any, ctx: KindContext) -> dict[str, Any]:
    """The buffer's state: its arrays as they are (no copy), counters and construction."""
    arrays = {name: getattr(obj, name) for name in ARRAYS if name in vars(obj)}
    extras, other = _extras(obj)
    if other:
        ctx.warn_once(f"{ctx.name}:sb3_buffer", (
            f"{ctx.name!r} ({type(obj).__qualname__}): attributes {other} are not data and "
            "are not captured; a resumed run keeps the fresh buffer's"))
    return {"class": type(obj).__qualname__,
            "config": {name: getattr(obj, name) for name in CONFIG},
            "pos": int(obj.pos), "full": bool(obj.full), "arrays": arrays, "extras": extras}


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in value.items()) + "}"
    return f"{getattr(value, 'dtype', type(value).__name__)} {np.shape(value)}"


def _fits(saved: Any, built: Any) -> bool:
    if isinstance(built, dict):
        return isinstance(saved, dict) and set(saved) == set(built) and \
            all(_fits(saved[k], built[k]) for k in built)
    return isinstance(built, np.ndarray) and not isinstance(saved, dict) and \
        np.shape(saved) == built.shape and getattr(saved, "dtype", None) == built.dtype


def check(obj: Any, state: Any, ctx: KindContext) -> None:
    """Raise StateMismatchError when ``state`` cannot go into ``obj``; change nothing."""
    where = f"RunCheckpoint: {ctx.name!r} ({type(obj).__qualname__})"
    if state.get("class") != type(obj).__qualname__:
        raise StateMismatchError(f"{where} was saved from a {state.get('class')}", where=ctx.name)
    for name in CONFIG:
        saved, built = state["config"].get(name), getattr(obj, name)
        if saved != built:
            raise StateMismatchError(f"{where} was saved with {name}={saved!r}, this "
                                     f"buffer has {name}={built!r}", where=ctx.name)
    built_arrays = {name: getattr(obj, name) for name in ARRAYS if name in vars(obj)}
    if set(state["arrays"]) != set(built_arrays):
        raise StateMismatchError(f"{where} was saved with arrays {sorted(state['arrays'])}, "
                                 f"this buffer has {sorted(built_arrays)}", where=ctx.name)
    for name, built in built_arrays.items():
        if not _fits(state["arrays"][name], built):
            raise StateMismatchError(
                f"{where}: {name} was saved as {_describe(state['arrays'][name])}, this "
                f"buffer's is {_describe(built)}", where=ctx.name)
    pos, size = int(state["pos"]), int(obj.buffer_size)
    if not 0 <= pos < size:
        raise StateMismatchError(f"{where}: pos {pos} is outside the buffer's {size} rows", where=ctx.name)
    extras, _other = _extras(obj)
    if set(state["extras"]) != set(extras):
        raise StateMismatchError(f"{where} was saved with attributes {sorted(state['extras'])}, "
                                 f"this buffer has {sorted(extras)}", where=ctx.name)
    for name, built in extras.items():
        if isinstance(built, np.ndarray) and not _fits(state["extras"][name], built):
            raise StateMismatchError(f"{where}: {name} was saved as "
                                     f"{_describe(state['extras'][name])}, this buffer's is "
                                     f"{_describe(built)}", where=ctx.name)


def _copy_into(built: Any, saved: Any) -> None:
    # copy_from_map: a mapped or compressed saved array is read straight into the buffer's
    if isinstance(built, dict):
        for key, array in built.items():
            copy_from_map(array, saved[key])
    else:
        copy_from_map(built, saved)


def apply(obj: Any, state: Any, ctx: KindContext) -> None:
    """Copy a checked state into the buffer's own arrays and set its counters."""
    for name, saved in state["arrays"].items():
        _copy_into(getattr(obj, name), saved)
    for name, saved in state["extras"].items():
        built = getattr(obj, name)
        if isinstance(built, np.ndarray):
            _copy_into(built, saved)
        else:
            setattr(obj, name, type(built)(saved) if isinstance(built, (bool, int, float))
                    else saved)
    obj.pos, obj.full = int(state["pos"]), bool(state["full"])
