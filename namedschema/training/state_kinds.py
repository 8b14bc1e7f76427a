"""The one table of state kinds behind :class:`~namedschema.RunCheckpoint`.

Every object a run tracks is captured, checked and restored by one row of this
table: the first row whose ``matches`` accepts it. A row's ``name`` is written
into checkpoint files, so names are stable (a file names the kind each component
was saved as, and a restore refuses another). Supporting a new kind of object
(an SB3 replay buffer, a vector env) is one new row, here or from an
integration through :func:`register_kind`; nothing else in ``RunCheckpoint``
changes.

StateKind       one row: name, matches, capture, apply, and the optional check
KindContext     what a row's functions get besides the object: its name, the file, options
KINDS           the built-in rows, in matching order
kind_of         the row that captures an object (raises TypeError naming what is accepted)
kind_named      the row a file's kind name stands for
register_kind   add a row (integrations), before a built-in one or at the end

The rules every row keeps: ``capture`` draws from no generator and changes
nothing in the run; ``check`` raises :class:`~namedschema.errors.RunCheckpointError`
when a saved state cannot go into the object, and changes nothing, so a restore
checks every component before it writes any; ``apply`` puts a checked state in.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core.optional import torch_if_loaded
from ..errors import RunCheckpointError
from ..state import plain as _plain_state
from ..state.env import capture_env, restore_env
from . import sb3_buffers as _sb3_buffers
from .replay import ReplayBuffer

__all__ = ["StateKind", "KindContext", "KINDS", "kind_of", "kind_named", "register_kind"]


@dataclass
class KindContext:
    """What a row's functions get besides the object and its state.

    ``name`` is the component's registered name (for messages), ``path`` the
    checkpoint file; ``warn_once(key, message)`` says a thing once per
    checkpoint; ``restarted`` collects components that are restarted rather
    than resumed (name -> reason), which :class:`RunCheckpoint` exposes.
    """

    name: str
    path: str
    allow_pickle: bool = False
    warn_once: Callable[[str, str], None] = lambda key, message: None
    restarted: dict[str, str] = field(default_factory=dict)


Capture = Callable[[Any, KindContext], Any]
Apply = Callable[[Any, Any, KindContext], None]
Check = Callable[[Any, Any, KindContext], None]


@dataclass(frozen=True)
class StateKind:
    """One row: how one kind of object's state is captured, checked and restored."""

    name: str                        # written into files: never rename a row
    matches: Callable[[Any], bool]
    capture: Capture
    apply: Apply
    check: Check | None = None
    accepts: str = ""                # how the TypeError of an unknown object lists this row


# -- the rows ---------------------------------------------------------------------------

def _is_protocol(obj: Any) -> bool:
    return callable(getattr(obj, "capture_state", None)) and \
        callable(getattr(obj, "restore_state", None))


def _protocol_capture(obj: Any, ctx: KindContext) -> Any:
    return obj.capture_state()


def _protocol_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    obj.restore_state(_plain_state.from_data(state))


def _generator_capture(obj: Any, ctx: KindContext) -> Any:
    return _plain_state.to_data(obj.bit_generator.state, ctx.name)


def _generator_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    obj.bit_generator.state = _plain_state.from_data(state)


def _is_numpy_random_state(obj: Any) -> bool:
    return isinstance(obj, np.random.RandomState) or obj is np.random


def _numpy_random_state_capture(obj: Any, ctx: KindContext) -> Any:
    _kind, keys, pos, has_gauss, gauss = obj.get_state()
    return {"keys": keys, "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)}


def _numpy_random_state_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    obj.set_state(("MT19937", np.array(state["keys"], np.uint32), state["pos"],
                   state["has_gauss"], state["gauss"]))


def _is_python_random(obj: Any) -> bool:
    return isinstance(obj, random.Random) or obj is random


def _python_random_capture(obj: Any, ctx: KindContext) -> Any:
    version, internal, gauss = obj.getstate()
    return {"version": version, "internal": np.array(internal, np.uint64), "gauss": gauss}


def _python_random_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    obj.setstate((state["version"], tuple(int(x) for x in state["internal"]), state["gauss"]))


def _is_torch_generator(obj: Any) -> bool:
    torch = torch_if_loaded()
    return torch is not None and (isinstance(obj, torch.Generator) or obj is torch)


def _torch_generator_capture(obj: Any, ctx: KindContext) -> Any:
    torch = torch_if_loaded()
    return (torch.get_rng_state() if obj is torch else obj.get_state()).clone()


def _torch_generator_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    torch = torch_if_loaded()
    (torch.set_rng_state if obj is torch else obj.set_state)(state.clone())


def _has_state_dict(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and \
        callable(getattr(obj, "load_state_dict", None))


def _state_dict_capture(obj: Any, ctx: KindContext) -> Any:
    return _plain_state.to_data(obj.state_dict(), ctx.name, ctx.allow_pickle)


def _state_dict_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    # namedschema's replay buffers copy into their own arrays: no second copy.
    obj.load_state_dict(state if isinstance(obj, ReplayBuffer) else _plain_state.from_data(state))


def _is_env(obj: Any) -> bool:
    return callable(getattr(obj, "step", None)) and callable(getattr(obj, "reset", None))


def _env_capture(obj: Any, ctx: KindContext) -> Any:
    state, reason = capture_env(obj, ctx.name)
    if state is None:
        ctx.warn_once(ctx.name, f"env {ctx.name!r} cannot be captured exactly ({reason}); a "
                      "resumed run restarts it with new episodes")
        return {"restarted": reason}
    return {"captured": state}


def _env_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    if "restarted" in state:
        ctx.restarted[ctx.name] = state["restarted"]
        ctx.warn_once(ctx.name, f"env {ctx.name!r} was not captured ({state['restarted']}); "
                      "it is not restored: reset it")
        return
    restore_env(obj, state["captured"], ctx.name)


def _dict_capture(obj: Any, ctx: KindContext) -> Any:
    return _plain_state.to_data(obj, ctx.name, ctx.allow_pickle)


def _dict_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    obj.clear()
    obj.update(_plain_state.from_data(state))


def _array_capture(obj: Any, ctx: KindContext) -> Any:
    return obj   # stored as it is (no copy)


def _array_check(obj: Any, state: Any, ctx: KindContext) -> None:
    if np.shape(state) != obj.shape or getattr(state, "dtype", None) != obj.dtype:
        raise RunCheckpointError(
            f"RunCheckpoint: {ctx.name!r} was saved as an array of "
            f"{getattr(state, 'dtype', type(state).__name__)} {np.shape(state)}, this run's is "
            f"{obj.dtype} {obj.shape}")


def _array_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    np.copyto(obj, state, casting="no")


KINDS: tuple[StateKind, ...] = (
    StateKind("protocol", _is_protocol, _protocol_capture, _protocol_apply,
              accepts="capture_state()/restore_state(state)"),
    StateKind("generator", lambda obj: isinstance(obj, np.random.Generator),
              _generator_capture, _generator_apply, accepts="numpy Generators"),
    StateKind("numpy_random_state", _is_numpy_random_state, _numpy_random_state_capture,
              _numpy_random_state_apply, accepts="numpy RandomState"),
    StateKind("python_random", _is_python_random, _python_random_capture,
              _python_random_apply, accepts="random.Random"),
    StateKind("torch_generator", _is_torch_generator, _torch_generator_capture,
              _torch_generator_apply, accepts="torch Generators"),
    StateKind("sb3_replay_buffer", _sb3_buffers.is_sb3_replay_buffer, _sb3_buffers.capture,
              _sb3_buffers.apply, _sb3_buffers.check,
              accepts="Stable-Baselines3 ReplayBuffer/DictReplayBuffer"),
    StateKind("state_dict", _has_state_dict, _state_dict_capture, _state_dict_apply,
              accepts="state_dict()/load_state_dict() (torch modules, optimizers, "
                      "schedulers, namedschema replay buffers)"),
    StateKind("env", _is_env, _env_capture, _env_apply, accepts="gymnasium envs"),
    StateKind("dict", lambda obj: type(obj) is dict, _dict_capture, _dict_apply,
              accepts="dicts (counters)"),
    StateKind("array", lambda obj: isinstance(obj, np.ndarray), _array_capture, _array_apply,
              _array_check, accepts="numpy arrays"),
)

_lock = threading.Lock()
_rows: list[StateKind] = list(KINDS)    # KINDS plus registered rows, in matching order


def register_kind(kind: StateKind, *, before: str | None = None) -> None:
    """Add a row, tried before the built-in row named ``before`` (default: after all).

    An integration registers its rows once, at import; registering a row of a
    name already in the table again is a no-op when it is the same row.
    """
    with _lock:
        for row in _rows:
            if row.name == kind.name:
                if row is kind:
                    return
                raise ValueError(f"register_kind: a state kind named {kind.name!r} exists")
        if before is None:
            _rows.append(kind)
            return
        names = [row.name for row in _rows]
        if before not in names:
            raise ValueError(f"register_kind: no state kind named {before!r}; kinds are "
                             f"{names}")
        _rows.insert(names.index(before), kind)


def kind_of(obj: Any) -> StateKind:
    """The first row that captures ``obj``; TypeError naming what can be tracked."""
    with _lock:
        rows = tuple(_rows)
    for row in rows:
        if row.matches(obj):
            return row
    accepted = ", ".join(row.accepts for row in rows if row.accepts)
    raise TypeError(f"RunCheckpoint.track: cannot capture a {type(obj).__qualname__}: track "
                    f"objects with {accepted}")


def kind_named(name: str) -> StateKind | None:
    """The row called ``name`` (a file's kind), or None."""
    with _lock:
        return next((row for row in _rows if row.name == name), None)
