"""A Stable-Baselines3 algorithm's own state as a row of RunCheckpoint's table.

ROW                the ``sb3_algorithm`` state kind (registered on import)
expect             what the next restore of a model must agree on (its run's length,
                   the hyperparameters it accepts as changed)
deferred           the parts ``learn()`` resets, to put back after its ``_setup_learn``
noise_state        an action noise's state, as data

The algorithm's networks, optimizers, replay buffer and env are tracked as
components of their own (state dicts, the SB3 buffer and vector-env rows); this
row holds the rest: the counters (``num_timesteps``, ``_n_updates``,
``_episode_num``, DQN's ``_n_calls``), the progress and exploration rate, the
last observation and episode starts, the episode statistics, torch variables
that are not in a state dict (SAC's ``log_ent_coef``, restored in place, so
its optimizer keeps it), and the action noise. Everything else in the model is
configuration, stored as text: a restore into a model built with other
hyperparameters is refused, naming them, unless they are accepted
(``accept_changes``; what SB3 derives from one, ``lr_schedule`` from
``learning_rate``, is accepted with it). An accepted one takes effect: the
model keeps the value it was built with. Those that shape the saved state
(``NEVER``: ``buffer_size``, ``n_envs``...) are always refused. An attribute this row does not know is configuration
too; one that is not plain (a user's object) is named in a warning.
"""

from __future__ import annotations

import re
import types
import weakref
from collections import deque
from typing import Any

import numpy as np

from .._core.tree import import_torch
from ..errors import StateMismatchError
from ..state import plain as _plain_state
from ..training.state_kinds import KindContext, StateKind, register_kind

__all__ = ["ROW", "expect", "deferred", "noise_state", "set_noise_state", "is_algorithm",
           "accepted", "DERIVED", "NEVER"]

STATE = ("num_timesteps", "_total_timesteps", "_num_timesteps_at_start", "_episode_num",
         "_current_progress_remaining", "_n_updates", "_n_calls", "exploration_rate",
         "_last_obs", "_last_episode_starts", "_last_original_obs")
_BUFFERS = ("ep_info_buffer", "ep_success_buffer")
# Parts tracked as components of their own, or never state (times, logger, device).
_PARTS = frozenset({
    "policy", "actor", "critic", "critic_target", "q_net", "q_net_target", "env",
    "_vec_normalize_env", "replay_buffer", "rollout_buffer", "observation_space",
    "action_space", "batch_norm_stats", "batch_norm_stats_target", "action_noise",
    "_logger", "start_time", "_custom_logger", "verbose", "tensorboard_log", "device",
    "ent_coef_optimizer", "log_ent_coef", "ent_coef_tensor",
})
_PLAIN = (bool, int, float, str, type(None), tuple, list, dict, type)
# Settings SB3 derives from hyperparameters in its constructor: accepted with their
# source (PPO's clip_range schedules replace their own attribute: accepted by its name).
DERIVED = {"lr_schedule": ("learning_rate",),
           "exploration_schedule": ("exploration_initial_eps", "exploration_final_eps",
                                    "exploration_fraction")}
# Settings that shape the saved state (the buffer's arrays, the policy's modules, the env
# count): a checkpoint cannot hold a run built with others, so they are never accepted.
NEVER = frozenset({"buffer_size", "n_envs", "policy_class", "replay_buffer_class",
                   "replay_buffer_kwargs", "optimize_memory_usage"})

_expected: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_deferred: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def is_algorithm(obj: Any) -> bool:
    """Whether ``obj`` is a Stable-Baselines3 algorithm (DQN, SAC, PPO...)."""
    return any(c.__name__ == "BaseAlgorithm" and
               c.__module__ == "stable_baselines3.common.base_class" for c in type(obj).__mro__)


def _sb3_class(obj: Any) -> str:
    """The algorithm's class name (SB3's own, under any subclass a user made)."""
    return type(obj).__qualname__


def expect(model: Any, total_timesteps: int | None, accept: tuple[str, ...] | bool) -> None:
    """Set what the next restore of ``model`` checks: the run's length and accepted changes."""
    _expected[model] = (total_timesteps, accept)


def deferred(model: Any) -> dict[str, Any]:
    """Pop what the last restore could not put in yet (``learn()`` resets it)."""
    return _deferred.pop(model, {})


def torch_variables(model: Any) -> list[str]:
    """Names of the model's torch tensors that are not in a state dict (``log_ent_coef``)."""
    return [name for name in model._get_torch_save_params()[1] if "." not in name]


def _config_text(value: Any) -> str:
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def _config(model: Any, warn: Any) -> dict[str, str]:
    parts = _PARTS | set(torch_variables(model)) | set(STATE) | set(_BUFFERS)
    out, odd = {}, []
    for name, value in vars(model).items():
        if name in parts or name.startswith("_namedschema") or \
                isinstance(value, types.MethodType):
            continue
        if not isinstance(value, _PLAIN) and type(value).__module__.split(".")[0] != \
                "stable_baselines3":
            odd.append(name)
        out[name] = _config_text(value)
    if odd:
        warn(f"{_sb3_class(model)}: attributes {odd} are not captured (only compared as "
             "text between runs); if they change while learning, a resumed run diverges")
    return out


def noise_state(noise: Any) -> Any:
    """An action noise's state (its arrays and numbers, nested noises included)."""
    if noise is None:
        return None
    attrs: dict[str, Any] = {}
    for name, value in vars(noise).items():
        if isinstance(value, (np.ndarray, bool, int, float, np.generic)):
            attrs[name] = value
        elif isinstance(value, list) and all(hasattr(v, "__dict__") for v in value):
            attrs[name] = [noise_state(v) for v in value]
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            attrs[name] = noise_state(value)
    return {"class": type(noise).__qualname__, "attrs": attrs}


def set_noise_state(noise: Any, state: Any, where: str) -> None:
    """Put :func:`noise_state` back into a noise of the same class."""
    if state is None or noise is None:
        if (state is None) != (noise is None):
            raise StateMismatchError(f"{where}: the action noise was "
                                     f"{'absent' if state is None else state['class']}, "
                                     f"this model's is {type(noise).__qualname__}")
        return
    if type(noise).__qualname__ != state["class"]:
        raise StateMismatchError(f"{where}: the action noise was a {state['class']}, this "
                                 f"model's is a {type(noise).__qualname__}")
    for name, saved in state["attrs"].items():
        current = getattr(noise, name)
        if isinstance(saved, list):
            for item, item_state in zip(current, saved, strict=True):
                set_noise_state(item, item_state, where)
        elif isinstance(saved, dict) and "class" in saved:
            set_noise_state(current, saved, where)
        elif isinstance(current, np.ndarray):
            setattr(noise, name, np.array(saved, copy=True))
        else:
            setattr(noise, name, saved.item() if isinstance(saved, np.generic) and
                    not isinstance(current, np.generic) else saved)


def _capture(model: Any, ctx: KindContext) -> dict[str, Any]:
    state = {name: _plain_state.to_data(getattr(model, name), name)
             for name in STATE if hasattr(model, name)}
    buffers = {}
    for name in _BUFFERS:
        value = getattr(model, name)
        buffers[name] = None if value is None else \
            {"maxlen": value.maxlen, "items": _plain_state.to_data(list(value), name)}
    variables = {name: getattr(model, name).detach() for name in torch_variables(model)}
    return {"class": _sb3_class(model), "state": state, "buffers": buffers,
            "variables": variables, "action_noise": noise_state(model.action_noise),
            "config": _config(model, lambda m: ctx.warn_once(f"{ctx.name}:config", m))}


def accepted(name: str, accept: tuple[str, ...] | bool) -> bool:
    """Whether a changed setting ``name`` is accepted (a derived one with its source)."""
    if name in NEVER or accept is False:
        return False
    return accept is True or name in accept or \
        any(source in accept for source in DERIVED.get(name, ()))


def _sources(name: str, changed: dict[str, Any]) -> tuple[str, ...]:
    """What the user accepts for ``name``: itself, or the changed hyperparameters it is
    derived from (all of them when none of them changed: a user's schedule function)."""
    sources = DERIVED.get(name)
    if sources is None:
        return (name,)
    return tuple(s for s in sources if s in changed) or sources


def _check(model: Any, saved: Any, ctx: KindContext) -> None:
    where = f"RunCheckpoint: {ctx.name!r}"
    if saved["class"] != _sb3_class(model):
        raise StateMismatchError(f"{where} was saved from a {saved['class']}, this model is a "
                                 f"{_sb3_class(model)}", where=ctx.name)
    total, accept = _expected.get(model, (None, ()))
    changed = {}
    if total is not None and saved["state"].get("_total_timesteps") not in (None, total):
        changed["total_timesteps"] = (saved["state"]["_total_timesteps"], total)
    config = _config(model, lambda m: None)
    for name in sorted(set(config) | set(saved["config"])):
        if config.get(name) != saved["config"].get(name):
            changed[name] = (saved["config"].get(name), config.get(name))
    never = {k: v for k, v in changed.items() if k in NEVER}
    if never:
        listed = "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in never.items())
        raise StateMismatchError(
            f"{where}: the run in {ctx.path!r} was made with other settings ({listed}); "
            f"{sorted(never)} shape the saved state (buffer, modules, envs), so they cannot "
            "be changed on resume, not even with accept_changes. Build the model as it was, "
            "or start a new run (another path)", where=ctx.name)
    refused = {k: v for k, v in changed.items() if not accepted(k, accept)}
    if refused:
        listed = "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in refused.items())
        names = sorted({source for k in refused for source in _sources(k, changed)})
        raise StateMismatchError(
            f"{where}: the run in {ctx.path!r} was made with other settings ({listed}); "
            f"resuming it would not continue that run. Build the model as it was, or accept "
            f"the change (it then takes effect): resumable(..., accept_changes={names!r}) "
            "(or accept_changes=True)", where=ctx.name)
    if changed:
        listed = "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in changed.items())
        ctx.warn_once(f"{ctx.name}:accepted", f"{_sb3_class(model)}: resuming with this "
                      f"run's settings (accepted, they take effect): {listed}")
    for name, value in saved["variables"].items():
        current = getattr(model, name)
        if tuple(value.shape) != tuple(current.shape) or value.dtype != current.dtype:
            raise StateMismatchError(f"{where}: {name} was saved as {value.dtype} "
                                     f"{tuple(value.shape)}, this model's is {current.dtype} "
                                     f"{tuple(current.shape)}", where=ctx.name)


def _apply(model: Any, saved: Any, ctx: KindContext) -> None:
    torch = import_torch()
    for name, value in saved["state"].items():
        setattr(model, name, _plain_state.from_data(value))
    for name, value in saved["buffers"].items():
        setattr(model, name, None if value is None else deque(
            _plain_state.from_data(value["items"]), maxlen=value["maxlen"]))
    with torch.no_grad():
        for name, value in saved["variables"].items():
            getattr(model, name).copy_(value)   # in place: its optimizer holds this tensor
    # learn() resets these in _setup_learn (the noise, the start count): set them after it.
    _deferred[model] = {"action_noise": saved["action_noise"],
                        "_num_timesteps_at_start": saved["state"].get("_num_timesteps_at_start")}


ROW = StateKind("sb3_algorithm", is_algorithm, _capture, _apply, _check,
                accepts="Stable-Baselines3 algorithms (their counters; with namedschema.sb3)")
register_kind(ROW)
