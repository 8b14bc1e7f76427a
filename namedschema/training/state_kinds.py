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
nothing in the run; ``check`` raises :class:`~namedschema.errors.StateMismatchError`
(or any exception, which the restore turns into one) when a saved state cannot go
into the object (made by ``_fail(ctx, message)``, or with ``where=ctx.name`` when its
message names the component already: the restore then passes it on as it is, and adds
the name to one without), and changes nothing, so a restore checks every component before
it writes any; ``apply`` puts a checked state in. A file is untrusted input: a
check looks at types, sizes and bounds before it uses a value.

The optional ``settings`` give what the user chose in code for the object (an
optimizer's ``lr``, a ``TimeLimit``'s step limit, a replay's ``alpha``, and under
the name ``"class"`` the object's class), as flat plain data. ``RunCheckpoint``
takes them when the object is tracked (as built, before training changes
anything), stores them with the state, and on restore compares them with the
run's: a difference is refused, unless accepted (``accept_changes``), when
``keep_settings`` puts the run's values back after ``apply``. A changed
``"class"`` is always refused.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core.tree import torch_if_loaded
from ..checkpoint._storage import copy_from_map
from ..errors import StateMismatchError
from ..state import plain as _plain_state
from ..state import rng as _rng
from ..state.env import (
    capture_env,
    check_env,
    emulator_apply,
    emulator_capture,
    emulator_check,
    emulator_kind,
    env_settings,
    keep_env_settings,
    restore_env,
)
from . import sb3_buffers as _sb3_buffers
from . import sb3_vec_envs as _sb3_vec_envs
from .replay import PrioritizedReplayBuffer, ReplayBuffer

__all__ = ["StateKind", "KindContext", "KINDS", "kind_of", "kind_named", "register_kind",
           "CLASS_SETTING", "qualified_name", "names_its_component"]

CLASS_SETTING = "class"     # the settings key of an object's class: never accepted changed


@dataclass
class KindContext:
    """What a row's functions get besides the object and its state.

    ``name`` is the component's registered name (for messages), ``path`` the
    checkpoint file; ``warn_once(key, message)`` says a thing once per
    checkpoint; ``restarted`` collects components that are restarted rather
    than resumed (name -> reason), which :class:`~namedschema.RunCheckpoint` exposes;
    ``fail(message)``, when given, makes the exception a refusal raises.
    """

    name: str
    path: str
    allow_pickle: bool = False
    warn_once: Callable[[str, str], None] = lambda key, message: None
    restarted: dict[str, str] = field(default_factory=dict)
    # How the caller words a refusal (``namedschema.rlpyt.resumable``: StateMismatchError);
    # None: StateMismatchError naming the component and the file.
    fail: Callable[[str], Exception] | None = None


Capture = Callable[[Any, KindContext], Any]
Apply = Callable[[Any, Any, KindContext], None]
Check = Callable[[Any, Any, KindContext], None]
Settings = Callable[[Any, KindContext], dict[str, Any]]
KeepSettings = Callable[[Any, dict[str, Any], KindContext], None]


@dataclass(frozen=True)
class StateKind:
    """One row: how one kind of object's state is captured, checked and restored."""

    name: str                        # written into files: never rename a row
    matches: Callable[[Any], bool]
    capture: Capture
    apply: Apply
    check: Check | None = None
    accepts: str = ""                # how the TypeError of an unknown object lists this row
    settings: Settings | None = None           # what was chosen in code: name -> plain value
    keep_settings: KeepSettings | None = None  # put accepted settings back after apply
    # The parts of an object's saved state (dotted keys below it; "" the state itself)
    # whose large compressed arrays a restore hands to check and apply still compressed
    # (``checkpoint._compression.Deferred``): check reads only their shape and dtype, and
    # apply copies them with ``checkpoint._storage.copy_from_map``, which decompresses
    # straight into the object's own arrays. None: every array comes decompressed.
    copied: Callable[[Any], tuple[str, ...]] | None = None


def qualified_name(cls: type) -> str:
    """``module.QualName`` of a class, as settings store it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def names_its_component(exc: BaseException) -> bool:
    """Whether a refusal from a row's ``check`` already names its component (``where`` set):
    a restore passes it on as it is, and words any other with the component's name."""
    return isinstance(exc, StateMismatchError) and exc.where is not None


def _fail(ctx: KindContext, message: str) -> Exception:
    if ctx.fail is not None:
        return ctx.fail(message)
    return StateMismatchError(f"RunCheckpoint: {ctx.name!r} cannot be restored from "
                              f"{ctx.path!r}: {message} (nothing in the run changed)",
                              where=ctx.name)


def _setting(value: Any) -> Any:
    """``value`` as a plain setting (number, str, None, tuple of those), or ``_NO_SETTING``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic) and np.ndim(value) == 0:
        return _setting(value.item())
    if isinstance(value, (tuple, list)) and len(value) <= 64:
        items = [_setting(v) for v in value]
        if all(i is not _NO_SETTING and not isinstance(i, tuple | list) for i in items):
            return type(value)(items)
    return _NO_SETTING


_NO_SETTING = object()


# -- the rows ---------------------------------------------------------------------------

def _is_protocol(obj: Any) -> bool:
    return callable(getattr(obj, "capture_state", None)) and \
        callable(getattr(obj, "restore_state", None))


def _protocol_capture(obj: Any, ctx: KindContext) -> Any:
    return obj.capture_state()


def _protocol_check(obj: Any, state: Any, ctx: KindContext) -> None:
    check = getattr(obj, "check_state", None)    # optional: raise, change nothing
    if callable(check):
        check(_plain_state.from_data(state, copy=False))


def _protocol_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    obj.restore_state(_plain_state.from_data(state))


def _generator_capture(obj: Any, ctx: KindContext) -> Any:
    return _plain_state.to_data(_rng.generator_capture(obj), ctx.name)


def _generator_check(obj: Any, state: Any, ctx: KindContext) -> None:
    if not isinstance(state, dict) or \
            state.get("bit_generator") != type(obj.bit_generator).__name__:
        raise _fail(ctx, f"not a {type(obj.bit_generator).__name__} generator state")
    try:
        _rng.generator_set(obj, _plain_state.from_data(state), write=False)
    except ValueError as exc:
        raise _fail(ctx, str(exc)) from None


def _generator_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    _rng.generator_set(obj, _plain_state.from_data(state))


def _is_numpy_random_state(obj: Any) -> bool:
    return isinstance(obj, np.random.RandomState) or obj is np.random


def _numpy_random_state_capture(obj: Any, ctx: KindContext) -> Any:
    return _rng.numpy_capture(obj)


def _numpy_random_state_check(obj: Any, state: Any, ctx: KindContext) -> None:
    if isinstance(state, dict) and "kind" in state:
        raise TypeError("not a RandomState state (keys, pos, has_gauss, gauss)")
    _rng.numpy_check(state)


def _numpy_random_state_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    _rng.numpy_apply(obj, state)


def _is_python_random(obj: Any) -> bool:
    return isinstance(obj, random.Random) or obj is random


def _python_random_capture(obj: Any, ctx: KindContext) -> Any:
    return _rng.python_capture(obj)


def _python_random_check(obj: Any, state: Any, ctx: KindContext) -> None:
    if not isinstance(state, dict):
        raise TypeError("not a random.Random state (version, internal, gauss)")
    _rng.python_check(state)


def _python_random_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    _rng.python_apply(obj, state)


def _is_torch_generator(obj: Any) -> bool:
    torch = torch_if_loaded()
    return torch is not None and (isinstance(obj, torch.Generator) or obj is torch)


def _torch_generator_capture(obj: Any, ctx: KindContext) -> Any:
    return _rng.torch_capture(obj)


def _torch_generator_check(obj: Any, state: Any, ctx: KindContext) -> None:
    torch = torch_if_loaded()
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.ndim != 1:
        raise _fail(ctx, "a torch generator state must be a uint8 tensor")
    _rng.torch_check(obj, state)


def _torch_generator_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    _rng.torch_apply(obj, state)


def _emulator_capture(obj: Any, ctx: KindContext) -> Any:
    return emulator_capture(obj)


def _emulator_check(obj: Any, state: Any, ctx: KindContext) -> None:
    try:
        emulator_check(obj, state)
    except StateMismatchError as exc:
        raise _fail(ctx, str(exc)) from None


def _emulator_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    emulator_apply(obj, state, ctx.name)


def _has_state_dict(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and \
        callable(getattr(obj, "load_state_dict", None))


def _state_dict_capture(obj: Any, ctx: KindContext) -> Any:
    return _plain_state.to_data(obj.state_dict(), ctx.name, ctx.allow_pickle)


def _state_dict_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    # namedschema's replay buffers copy into their own arrays: no second copy.
    obj.load_state_dict(state if isinstance(obj, ReplayBuffer) else _plain_state.from_data(state))


def _state_dict_check(obj: Any, state: Any, ctx: KindContext) -> None:
    """Compare a saved state with the object's own ``state_dict()`` structure; write nothing."""
    torch = torch_if_loaded()
    if isinstance(obj, ReplayBuffer):
        try:
            obj.check_state_dict(state)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise _fail(ctx, str(exc)) from None
        return
    if torch is not None and isinstance(obj, torch.nn.Module):
        _check_module(obj, state, ctx, torch)
    elif torch is not None and isinstance(obj, torch.optim.Optimizer):
        _check_optimizer(obj, state, ctx, torch)
    elif torch is not None and isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
        _check_like(obj.state_dict(), _plain_state.from_data(state, copy=False), ctx.name,
                    ctx, 0)
    elif isinstance(obj.state_dict(), dict) and not isinstance(state, dict):
        raise _fail(ctx, f"the saved state is a {type(state).__name__}, not a dict")


def _check_module(obj: Any, state: Any, ctx: KindContext, torch: Any) -> None:
    own = obj.state_dict()
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise _fail(ctx, "the saved state is not a dict of tensors")
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        raise _fail(ctx, f"the saved module has other parameters (missing: {missing[:8]}, "
                         f"unexpected: {unexpected[:8]}; built differently?)")
    for key, mine in own.items():
        saved = state[key]
        if not isinstance(mine, torch.Tensor):
            continue                        # extra state: the module's own business
        if not isinstance(saved, torch.Tensor) or saved.shape != mine.shape or \
                saved.dtype != mine.dtype:
            what = f"{saved.dtype} {tuple(saved.shape)}" if isinstance(saved, torch.Tensor) \
                else f"a {type(saved).__name__}"
            raise _fail(ctx, f"{key} was saved as {what}, this run's is {mine.dtype} "
                             f"{tuple(mine.shape)}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, (bool, np.bool_))


def _check_like(mine: Any, saved: Any, path: str, ctx: KindContext, depth: int) -> None:
    """``saved`` has the structure of ``mine``: dict keys, sequence lengths, value kinds."""
    torch = torch_if_loaded()
    if depth > 16:
        raise _fail(ctx, f"{path} is nested too deep")
    if isinstance(mine, dict):
        if not isinstance(saved, dict) or set(saved) != set(mine):
            keys = sorted(map(str, saved))[:8] if isinstance(saved, dict) else \
                type(saved).__name__
            raise _fail(ctx, f"{path} was saved as {keys}, this run's has "
                             f"{sorted(map(str, mine))[:8]}")
        for key, value in mine.items():
            _check_like(value, saved[key], f"{path}.{key}", ctx, depth + 1)
    elif isinstance(mine, (list, tuple)):
        if not isinstance(saved, (list, tuple)) or len(saved) != len(mine):
            raise _fail(ctx, f"{path} was saved as {type(saved).__name__} of another length, "
                             f"this run's holds {len(mine)}")
        for i, (a, b) in enumerate(zip(mine, saved, strict=True)):
            _check_like(a, b, f"{path}[{i}]", ctx, depth + 1)
    elif isinstance(mine, (bool, np.bool_)):
        if not isinstance(saved, (bool, np.bool_)):
            raise _fail(ctx, f"{path} must be a bool, it was saved as {saved!r:.40}")
    elif _is_number(mine):
        if not _is_number(saved):
            raise _fail(ctx, f"{path} must be a number, it was saved as {saved!r:.40}")
    elif isinstance(mine, str):
        if not isinstance(saved, str):
            raise _fail(ctx, f"{path} must be a str, it was saved as {saved!r:.40}")
    elif torch is not None and isinstance(mine, torch.Tensor):
        if not isinstance(saved, torch.Tensor) or saved.shape != mine.shape or \
                saved.dtype != mine.dtype:
            raise _fail(ctx, f"{path} must be a {mine.dtype} tensor {tuple(mine.shape)}")
    elif mine is None and not (saved is None or _is_number(saved)
                               or isinstance(saved, (bool, str))):
        raise _fail(ctx, f"{path} was saved as a {type(saved).__name__}")


def _check_optimizer(obj: Any, state: Any, ctx: KindContext, torch: Any) -> None:
    state = _plain_state.from_data(state, copy=False) if isinstance(state, dict) else state
    if not isinstance(state, dict) or set(state) != {"state", "param_groups"} or \
            not isinstance(state["param_groups"], list) or not isinstance(state["state"], dict):
        raise _fail(ctx, "not an optimizer state (state, param_groups)")
    groups, saved_groups = obj.param_groups, state["param_groups"]
    if len(groups) != len(saved_groups):
        raise _fail(ctx, f"the saved optimizer has {len(saved_groups)} parameter groups, this "
                         f"run's {len(groups)}")
    params: dict[int, Any] = {}     # parameter id -> the parameter (a tensor)
    for i, (group, saved) in enumerate(zip(groups, saved_groups, strict=True)):
        mine = {k: v for k, v in group.items() if k != "params"}
        if not isinstance(saved, dict) or not isinstance(saved.get("params"), list):
            raise _fail(ctx, f"param_groups[{i}] is not a parameter group")
        _check_like(mine, {k: v for k, v in saved.items() if k != "params"},
                    f"param_groups[{i}]", ctx, 0)
        ids = saved["params"]
        if len(ids) != len(group["params"]):
            raise _fail(ctx, f"param_groups[{i}] was saved with {len(ids)} parameters, this "
                             f"run's has {len(group['params'])}")
        for pid, param in zip(ids, group["params"], strict=True):
            if isinstance(pid, bool) or not isinstance(pid, int) or pid in params:
                raise _fail(ctx, f"param_groups[{i}] names parameter {pid!r:.40}")
            params[pid] = param
    check_shapes = type(obj).__name__ != "LBFGS"    # LBFGS keeps flat vectors
    for pid, entry in state["state"].items():
        if pid not in params or not isinstance(entry, dict):
            raise _fail(ctx, f"the saved state of parameter {pid!r:.40} matches no parameter")
        param = params[pid]
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                if check_shapes and value.ndim > 0 and (
                        value.shape != param.shape or value.dtype != param.dtype):
                    raise _fail(ctx, f"state[{pid}].{key} is {value.dtype} "
                                     f"{tuple(value.shape)}, its parameter {param.dtype} "
                                     f"{tuple(param.shape)}")
            elif not (_is_number(value) or value is None or isinstance(value, (bool, list))):
                raise _fail(ctx, f"state[{pid}].{key} was saved as a {type(value).__name__}")
    _check_optimizer_load(obj, state, ctx, torch)


def _check_optimizer_load(obj: Any, state: dict[str, Any], ctx: KindContext, torch: Any) -> None:
    """Load ``state`` into a scratch optimizer of ``obj``'s class and groups over meta
    tensors (no memory, nothing of ``obj`` touched): what its ``load_state_dict`` would
    refuse half-way through a restore (a per-parameter ``step`` missing or None) is
    refused before anything changes."""
    try:
        scratch = type(obj)([{**g, "params": [torch.empty_like(p, device="meta")
                                              for p in g["params"]]}
                             for g in obj.param_groups])
    except Exception:     # noqa: BLE001 a constructor that needs more: the checks above stand
        return
    try:
        scratch.load_state_dict(state)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError,
            RuntimeError) as exc:
        raise _fail(ctx, f"this run's {type(obj).__name__} refuses the saved state "
                         f"({type(exc).__name__}: {exc})") from None


def _state_dict_settings(obj: Any, ctx: KindContext) -> dict[str, Any]:
    out: dict[str, Any] = {CLASS_SETTING: qualified_name(type(obj))}
    torch = torch_if_loaded()
    if isinstance(obj, PrioritizedReplayBuffer):
        out.update(alpha=float(obj.alpha), beta=float(obj.beta))
    elif torch is not None and isinstance(obj, torch.optim.Optimizer):
        many = len(obj.param_groups) > 1
        for i, group in enumerate(obj.param_groups):
            for key, value in group.items():
                plain = _setting(value)
                if key != "params" and plain is not _NO_SETTING:
                    out[f"param_groups[{i}].{key}" if many else key] = plain
    elif torch is not None and isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
        for key, value in obj.state_dict().items():
            plain = _setting(value)
            if plain is not _NO_SETTING and key != "optimizer":
                out[key] = plain
    return out


def _state_dict_keep(obj: Any, values: dict[str, Any], ctx: KindContext) -> None:
    torch = torch_if_loaded()
    if torch is not None and isinstance(obj, torch.optim.Optimizer):
        many = len(obj.param_groups) > 1
        for i, group in enumerate(obj.param_groups):
            for key in list(group):
                name = f"param_groups[{i}].{key}" if many else key
                if key != "params" and name in values:
                    group[key] = values[name]
        return
    for key, value in values.items():     # a replay's alpha/beta, a scheduler's settings
        if key != CLASS_SETTING:
            setattr(obj, key, list(value) if isinstance(getattr(obj, key, None), list)
                    else value)


def _is_env(obj: Any) -> bool:
    return callable(getattr(obj, "step", None)) and callable(getattr(obj, "reset", None))


def _env_capture(obj: Any, ctx: KindContext) -> Any:
    state, reason = capture_env(obj, ctx.name)
    if state is None:
        ctx.warn_once(ctx.name, f"env {ctx.name!r} cannot be captured exactly ({reason}); a "
                      "resumed run restarts it with new episodes")
        return {"restarted": reason}
    return {"captured": state}


def _env_check(obj: Any, state: Any, ctx: KindContext) -> None:
    if not isinstance(state, dict) or len(state) != 1 or \
            not ("restarted" in state or "captured" in state):
        raise _fail(ctx, "not an env state (captured or restarted)")
    if "captured" in state:
        check_env(obj, state["captured"], ctx.name)
    elif not isinstance(state["restarted"], str):
        raise _fail(ctx, "the reason an env was restarted must be a str")


def _env_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    if "restarted" in state:
        ctx.restarted[ctx.name] = state["restarted"]
        ctx.warn_once(ctx.name, f"env {ctx.name!r} was not captured ({state['restarted']}); "
                      "it is not restored: reset it")
        return
    restore_env(obj, state["captured"], ctx.name)


def _env_settings(obj: Any, ctx: KindContext) -> dict[str, Any]:
    return env_settings(obj, ctx.name)


def _env_keep(obj: Any, values: dict[str, Any], ctx: KindContext) -> None:
    keep_env_settings(obj, values, ctx.name)


def _dict_capture(obj: Any, ctx: KindContext) -> Any:
    return _plain_state.to_data(obj, ctx.name, ctx.allow_pickle)


def _dict_check(obj: Any, state: Any, ctx: KindContext) -> None:
    if not isinstance(_plain_state.from_data(state, copy=False), dict):
        raise _fail(ctx, f"a dict was saved as a {type(state).__name__}")


def _dict_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    obj.clear()
    obj.update(_plain_state.from_data(state))


def _array_capture(obj: Any, ctx: KindContext) -> Any:
    return obj   # stored as it is (no copy)


def _array_check(obj: Any, state: Any, ctx: KindContext) -> None:
    if np.shape(state) != obj.shape or getattr(state, "dtype", None) != obj.dtype:
        raise StateMismatchError(
            f"RunCheckpoint: {ctx.name!r} was saved as an array of "
            f"{getattr(state, 'dtype', type(state).__name__)} {np.shape(state)}, this run's is "
            f"{obj.dtype} {obj.shape}", where=ctx.name)


def _array_apply(obj: Any, state: Any, ctx: KindContext) -> None:
    copy_from_map(obj, state)


KINDS: tuple[StateKind, ...] = (
    StateKind("protocol", _is_protocol, _protocol_capture, _protocol_apply, _protocol_check,
              accepts="capture_state()/restore_state(state)"),
    StateKind("generator", lambda obj: isinstance(obj, np.random.Generator),
              _generator_capture, _generator_apply, _generator_check,
              accepts="numpy Generators"),
    StateKind("numpy_random_state", _is_numpy_random_state, _numpy_random_state_capture,
              _numpy_random_state_apply, _numpy_random_state_check,
              accepts="numpy RandomState"),
    StateKind("python_random", _is_python_random, _python_random_capture,
              _python_random_apply, _python_random_check, accepts="random.Random"),
    StateKind("torch_generator", _is_torch_generator, _torch_generator_capture,
              _torch_generator_apply, _torch_generator_check, accepts="torch Generators"),
    StateKind("emulator", lambda obj: emulator_kind(obj) is not None, _emulator_capture,
              _emulator_apply, _emulator_check,
              accepts="Atari emulators (ale-py's ALEInterface, atari_py's)"),
    StateKind("sb3_replay_buffer", _sb3_buffers.is_sb3_replay_buffer, _sb3_buffers.capture,
              _sb3_buffers.apply, _sb3_buffers.check,
              accepts="Stable-Baselines3 ReplayBuffer/DictReplayBuffer",
              copied=lambda obj: ("arrays",)),
    StateKind("state_dict", _has_state_dict, _state_dict_capture, _state_dict_apply,
              _state_dict_check,
              accepts="state_dict()/load_state_dict() (torch modules, optimizers, "
                      "schedulers, namedschema replay buffers)",
              settings=_state_dict_settings, keep_settings=_state_dict_keep,
              copied=lambda obj: ("storage",) if isinstance(obj, ReplayBuffer) else ()),
    StateKind("sb3_vec_env", _sb3_vec_envs.is_sb3_vec_env, _sb3_vec_envs.capture,
              _sb3_vec_envs.apply, _sb3_vec_envs.check,
              accepts="Stable-Baselines3 VecEnvs (SubprocVecEnv included)"),
    StateKind("env", _is_env, _env_capture, _env_apply, _env_check, accepts="gymnasium envs",
              settings=_env_settings, keep_settings=_env_keep),
    StateKind("dict", lambda obj: type(obj) is dict, _dict_capture, _dict_apply, _dict_check,
              accepts="dicts (counters)"),
    StateKind("array", lambda obj: isinstance(obj, np.ndarray), _array_capture, _array_apply,
              _array_check, accepts="numpy arrays", copied=lambda obj: ("",)),
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
