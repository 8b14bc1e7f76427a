"""Capture and restore the training state of rlpyt components, one handler per class.

A component's state is ``{handler key: captured dict}`` for every class in its
method resolution order that has a handler, so mixins compose: a
``DqnAgent`` is handled by ``BaseAgent`` (its torch modules) and by
``EpsilonGreedyAgentMixin`` (epsilon), an ``R2d1Agent`` also by
``RecurrentAgentMixin`` (its recurrent states). Supporting a new rlpyt class
is one :func:`register_handler` call.

Captured state is data wherever it can be (arrays, tensors, numbers, lists,
dicts), so a checkpoint stores it raw; restoring writes arrays *into* the
objects a freshly built run made (``np.copyto``), which keeps views as views
and shared memory shared. Only objects that are not data (an environment's
own attributes, say) are pickled by the checkpoint.

register_handler   add or replace the handler of one class
capture            the state of one component (a dict)
restore            put a captured state back into a freshly built component
check              why a component cannot be resumed exactly (list of strings)
prepare            what a resume must do to a component before rlpyt's startup
data_state / restore_data_state   generic attribute-wise state, for handlers
rng_state / set_rng_state         the global RNGs (Python, numpy, torch)
"""

from __future__ import annotations

import collections
import copy
import pickle
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["register_handler", "capture", "restore", "check", "prepare", "data_state",
           "fresh_copy", "is_async_sampler", "traj_infos_state", "make_traj_infos",
           "restore_data_state", "rng_state", "set_rng_state", "Handler",
           "StateMismatchError"]


class StateMismatchError(ValueError):
    """A checkpoint's state does not fit the freshly built component (config changed)."""


@dataclass(frozen=True)
class Handler:
    """How to capture and restore the state one class adds.

    ``capture(obj, ctx) -> dict``, ``restore(obj, state, ctx)``, the
    optional ``check(obj, ctx) -> list of str`` (reasons the state cannot be
    restored exactly, said before training starts) and the optional
    ``prepare(obj, saved)``, run before rlpyt's startup (before sampler
    workers fork, so they inherit what it does) with this handler's state
    from the checkpoint, or None when the run starts from scratch. ``ctx`` is the resume
    context (see ``namedschema.rlpyt.resume``): it carries the sampler's
    ``TrajInfoCls`` and collects notes.
    """

    capture: Callable[[Any, Any], dict]
    restore: Callable[[Any, dict, Any], None]
    check: Callable[[Any, Any], list] | None = None
    prepare: Callable[[Any, Any], None] | None = None


_HANDLERS: dict[str, Handler] = {}


def _key(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_handler(cls, capture, restore, check=None, prepare=None) -> None:
    """Handle the state that class ``cls`` (a class or ``"module.QualName"``) adds.

    Handlers of every class in a component's MRO run, base classes first, so
    a handler covers only what its own class adds.
    """
    key = cls if isinstance(cls, str) else _key(cls)
    _HANDLERS[key] = Handler(capture, restore, check, prepare)


def handlers_for(obj) -> list[tuple[str, Handler]]:
    """The handlers that apply to ``obj``, base classes first."""
    found = []
    for cls in reversed(type(obj).__mro__):
        handler = _HANDLERS.get(_key(cls))
        if handler is not None:
            found.append((_key(cls), handler))
    return found


def capture(obj, ctx) -> dict:
    """The state of ``obj``: ``{handler key: state}`` (empty if no handler applies)."""
    return {key: handler.capture(obj, ctx) for key, handler in handlers_for(obj)}


def restore(obj, state: dict, ctx, what: str, partial: bool = False) -> None:
    """Restore ``state`` (from :func:`capture`) into ``obj``, a freshly built component.

    With ``partial``, handlers without state in ``state`` are left out.
    """
    handlers = dict(handlers_for(obj))
    if partial:
        handlers = {k: h for k, h in handlers.items() if k in state}
    missing = sorted(set(state) - set(handlers))
    if missing:
        raise StateMismatchError(
            f"{what}: the checkpoint holds state of {missing}, which the freshly built "
            f"{type(obj).__name__} does not have (was the run built differently?)")
    for key, handler in handlers.items():
        if key not in state:
            raise StateMismatchError(
                f"{what}: the checkpoint has no state for {key} (was the run built "
                f"with a different {type(obj).__name__}?)")
        handler.restore(obj, state[key], ctx)


def prepare(obj, state: dict | None) -> None:
    """Run the ``prepare`` hooks of ``obj``'s handlers, before rlpyt's startup.

    ``state`` is what the checkpoint holds for ``obj`` (from :func:`capture`),
    or None when the run starts from scratch.
    """
    for key, handler in handlers_for(obj):
        if handler.prepare is not None:
            handler.prepare(obj, None if state is None else state.get(key))


def check(obj, ctx) -> list[str]:
    """Reasons why ``obj`` cannot be resumed exactly; empty when it can."""
    reasons = []
    if not handlers_for(obj):
        reasons.append(f"{_key(type(obj))}: no state handler; its state is not saved "
                       "(register one with namedschema.rlpyt.register_handler)")
    for _, handler in handlers_for(obj):
        if handler.check is not None:
            reasons.extend(handler.check(obj, ctx))
    return reasons


# -- generic data state ------------------------------------------------------------

_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)


def _torch():
    import torch
    return torch


def _is_tensor(value) -> bool:
    torch = _torch_if_loaded()
    return torch is not None and isinstance(value, torch.Tensor)


def _torch_if_loaded():
    import sys
    return sys.modules.get("torch")


def _is_shared_value(value) -> bool:
    # multiprocessing RawValue (a ctypes scalar) or Value (a Synchronized wrapper).
    from multiprocessing.sharedctypes import Synchronized
    return isinstance(value, Synchronized) or \
        (hasattr(type(value), "_type_") and hasattr(value, "value"))


def _is_array_tuple(value) -> bool:
    # rlpyt namedarraytuples (classic classes or namedschema schemas).
    return isinstance(value, tuple) and hasattr(value, "_fields")


def _is_replay_part(value) -> bool:
    # Objects a replay buffer is made of (its SumTree): their state is recursed into.
    module = getattr(type(value), "__module__", "") or ""
    return module.startswith("rlpyt.replays.") and hasattr(value, "__dict__") \
        and not isinstance(value, type)


def _data_value(value):
    """``(kind, data)`` for a storable attribute value, or None to skip it."""
    if isinstance(value, np.ndarray) or _is_tensor(value):
        return ("array", value)
    if isinstance(value, _SCALARS):
        return ("value", value)
    if _is_array_tuple(value):
        return ("tuple", value)
    if _is_shared_value(value):
        return ("shared", value.value)
    if _is_replay_part(value):
        return ("object", data_state(value))
    return None


def data_state(obj, names=None, skip=()) -> dict:
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


def _copy_into(target, value, where):
    """Write ``value`` into the existing array/tensor/array tuple ``target``."""
    if _is_array_tuple(target):
        if not _is_array_tuple(value) or tuple(target._fields) != tuple(value._fields):
            raise StateMismatchError(f"{where}: fields differ: checkpoint "
                                     f"{getattr(value, '_fields', type(value).__name__)}, "
                                     f"built {tuple(target._fields)}")
        for field, t, v in zip(target._fields, target, value, strict=True):
            _copy_into(t, v, f"{where}.{field}")
        return
    if target is None or isinstance(target, _SCALARS):
        if not (value is None or isinstance(value, _SCALARS)):
            raise StateMismatchError(f"{where}: the built run has {target!r} where "
                                     f"the checkpoint has {type(value).__name__}")
        return
    if _is_tensor(target):
        torch = _torch()
        src = value if _is_tensor(value) else torch.as_tensor(np.asarray(value))
        if tuple(src.shape) != tuple(target.shape) or src.dtype != target.dtype:
            raise StateMismatchError(
                f"{where}: checkpoint has {src.dtype} {tuple(src.shape)}, the built run "
                f"{target.dtype} {tuple(target.shape)}")
        with torch.no_grad():
            target.copy_(src)
        return
    src = value.numpy() if _is_tensor(value) else np.asarray(value)
    if src.shape != target.shape or src.dtype != target.dtype:
        raise StateMismatchError(
            f"{where}: checkpoint has {src.dtype} {src.shape}, the built run "
            f"{target.dtype} {target.shape} (was it built with other sizes?)")
    np.copyto(target, src, casting="no")


def restore_data_state(obj, state: dict, where: str, _written=None) -> None:
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
                setattr(obj, name, _fresh_copy(data))
            elif not _already_written(current, data, written):
                _copy_into(current, data, path)
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


def fresh_copy(value):
    """A copy of an array, tensor or array tuple (others are returned as they are)."""
    return _fresh_copy(value)


def _fresh_copy(value):
    if _is_array_tuple(value):
        return type(value)(*(_fresh_copy(v) for v in value))
    if _is_tensor(value):
        return value.clone()
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    return value


# -- trajectory infos (AttrDicts) are stored as plain dicts -------------------------

def traj_infos_state(infos) -> list:
    return [dict(info) for info in infos]


def make_traj_infos(states, cls) -> list:
    out = []
    for state in states:
        info = cls()
        info.clear()
        for key, value in state.items():
            info[key] = value
        out.append(info)
    return out


# -- global RNGs -------------------------------------------------------------------

def rng_state() -> dict:
    """States of Python's ``random``, numpy's global generator and torch's (CPU, CUDA)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": {"kind": kind, "keys": keys, "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)}}
    torch = _torch_if_loaded()
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["torch_cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` captured."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], np.asarray(n["keys"], dtype=np.uint32), n["pos"],
                         n["has_gauss"], n["gauss"]))
    if "torch" in state:
        torch = _torch()
        torch.set_rng_state(_cpu_byte_tensor(torch, state["torch"]))
        if "torch_cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([_cpu_byte_tensor(torch, s)
                                          for s in state["torch_cuda"]])


def _cpu_byte_tensor(torch, value):
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.uint8).clone()
    return torch.as_tensor(np.asarray(value, dtype=np.uint8)).clone()


# -- handlers of rlpyt's classes ---------------------------------------------------

def _modules(obj) -> dict:
    """The torch modules among ``obj``'s attributes (an alias of one is listed once)."""
    torch = _torch_if_loaded()
    if torch is None:
        return {}
    seen, out = set(), {}
    for name, value in vars(obj).items():
        if isinstance(value, torch.nn.Module) and id(value) not in seen:
            seen.add(id(value))
            out[name] = value
    return out


def _agent_capture(agent, ctx):
    return {"modules": {name: m.state_dict() for name, m in _modules(agent).items()},
            "mode": agent._mode}


def _agent_restore(agent, state, ctx):
    modules = _modules(agent)
    if sorted(modules) != sorted(state["modules"]):
        raise StateMismatchError(
            f"agent: the checkpoint has models {sorted(state['modules'])}, the built "
            f"agent {sorted(modules)}")
    for name, sd in state["modules"].items():
        # In place: shared-memory models stay shared with sampler workers.
        modules[name].load_state_dict(sd)
    agent._mode = state["mode"]


_EPS_NAMES = ("eps_sample", "eps_init", "eps_final", "eps_itr_min", "eps_itr_max",
              "_eps_itr_min_max")


def _eps_capture(agent, ctx):
    state = data_state(agent, _EPS_NAMES)
    dist = getattr(agent, "distribution", None)
    if dist is not None and hasattr(dist, "_epsilon"):
        state["distribution_epsilon"] = ["value", dist._epsilon] \
            if not _is_tensor(dist._epsilon) else ["array", dist._epsilon]
    return state


def _eps_restore(agent, state, ctx):
    state = dict(state)
    dist_eps = state.pop("distribution_epsilon", None)
    for name in ("eps_sample", "eps_init", "eps_final"):
        # Tensors (vector epsilon) are replaced, not written into: rlpyt
        # rebinds these attributes itself, so nothing else holds them.
        if name in state:
            kind, data = state.pop(name)
            setattr(agent, name, _fresh_copy(data))
    restore_data_state(agent, state, "agent")
    if dist_eps is not None and getattr(agent, "distribution", None) is not None:
        agent.distribution._epsilon = _fresh_copy(dist_eps[1])


class _EpsilonAfterSchedule:
    """``agent.sample_mode`` that keeps epsilon right after the schedule ended.

    rlpyt sets ``eps_sample`` only while ``itr <= eps_itr_max``; a process that
    starts later (a resumed one, and its sampler workers) would keep
    ``eps_init`` forever. Past the schedule this sets what rlpyt computed at
    its end (the same expression with progress 1), so an uninterrupted run is
    unchanged bit for bit. An instance attribute, inherited by forked workers.
    """

    def __init__(self, agent, original):
        self.agent = agent
        self.original = original

    def __call__(self, itr):
        self.original(itr)
        agent = self.agent
        if itr > agent._eps_itr_min_max[1]:
            prog = 1
            agent.eps_sample = prog * agent.eps_final + (1 - prog) * agent.eps_init
            agent.distribution.set_epsilon(agent.eps_sample)


def _eps_prepare(agent, saved):
    if saved is not None and not isinstance(vars(agent).get("sample_mode"), _EpsilonAfterSchedule):
        agent.sample_mode = _EpsilonAfterSchedule(agent, agent.sample_mode)


def _rnn_capture(names):
    def capture_(agent, ctx):
        return {name: _plain(getattr(agent, name)) for name in names}
    return capture_


def _rnn_restore(names):
    def restore_(agent, state, ctx):
        for name in names:
            setattr(agent, name, _fresh_copy_deep(state[name]))
    return restore_


def _plain(value):
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _fresh_copy_deep(value):
    if isinstance(value, list):
        return [_fresh_copy_deep(v) for v in value]
    return _fresh_copy(value)


def _algo_capture(algo, ctx):
    torch = _torch_if_loaded()
    state: dict = {"counters": data_state(algo, skip=("replay_buffer",))}
    if torch is not None:
        optim = {}
        for name, value in vars(algo).items():
            if isinstance(value, torch.optim.Optimizer) or _is_lr_scheduler(torch, value):
                optim[name] = value.state_dict()
        state["optimizers"] = optim
    buffer = getattr(algo, "replay_buffer", None)
    if buffer is not None:
        state["replay_buffer"] = capture(buffer, ctx)
    return state


def _is_lr_scheduler(torch, value) -> bool:
    return isinstance(value, torch.optim.lr_scheduler.LRScheduler)


def _algo_restore(algo, state, ctx):
    for name, sd in state.get("optimizers", {}).items():
        target = getattr(algo, name, None)
        if target is None:
            raise StateMismatchError(f"algo.{name}: the built algorithm has no {name}")
        # Copied: torch keeps the loaded tensors of an optimizer's state as given.
        target.load_state_dict(copy.deepcopy(sd))
    restore_data_state(algo, state["counters"], "algo")
    if "replay_buffer" in state:
        buffer = getattr(algo, "replay_buffer", None)
        if buffer is None:
            raise StateMismatchError("algo.replay_buffer: the built algorithm has none")
        restore(buffer, state["replay_buffer"], ctx, "algo.replay_buffer")


def _replay_capture(buffer, ctx):
    return data_state(buffer)


def _replay_restore(buffer, state, ctx):
    restore_data_state(buffer, state, "replay_buffer")


def _env_check(env, ctx):
    try:
        pickle.dumps(vars(env), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        return [f"env {type(env).__name__}: its attributes cannot be pickled "
                f"({type(exc).__name__}: {exc}); on resume it starts a new episode"]
    return []


def _env_capture(env, ctx):
    try:
        pickle.dumps(vars(env), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return {"picklable": False}
    return {"picklable": True, "attributes": dict(vars(env))}


def _env_restore(env, state, ctx):
    if not state["picklable"]:
        ctx.fresh_envs.append(env)
        return
    # Into the existing object: whoever holds the env keeps holding it.
    # Deep copies: nothing of the env stays backed by the loaded checkpoint.
    vars(env).clear()
    vars(env).update(copy.deepcopy(state["attributes"]))


def _collector_capture(collector, ctx):
    return {"data": data_state(collector, skip=("samples_np", "agent")),
            "envs": [capture(env, ctx) for env in collector.envs]}


def _collector_restore(collector, state, ctx):
    restore_data_state(collector, state["data"], "collector")
    if len(state["envs"]) != len(collector.envs):
        raise StateMismatchError(f"collector: checkpoint has {len(state['envs'])} envs, "
                                 f"the built sampler {len(collector.envs)}")
    for i, (env, env_state) in enumerate(zip(collector.envs, state["envs"], strict=True)):
        restore(env, env_state, ctx, f"collector.envs[{i}]")


def _collector_check(collector, ctx):
    reasons = []
    for env in collector.envs:
        reasons.extend(check(env, ctx))
    return sorted(set(reasons))


def _serial_sampler_capture(sampler, ctx):
    state = {"agent_inputs": sampler.agent_inputs,
             "traj_infos": traj_infos_state(sampler.traj_infos),
             "samples_np": sampler.samples_np,
             "collector": capture(sampler.collector, ctx)}
    if getattr(sampler, "eval_collector", None) is not None:
        state["eval_collector"] = capture(sampler.eval_collector, ctx)
    return state


def _serial_sampler_restore(sampler, state, ctx):
    # Replaced, not written into: the collector makes new AgentInputs (with
    # the agent's action dtype) every batch, so nothing else holds them.
    sampler.agent_inputs = _fresh_copy(state["agent_inputs"])
    _copy_into(sampler.samples_np, state["samples_np"], "sampler.samples_np")
    sampler.traj_infos = make_traj_infos(state["traj_infos"], sampler.TrajInfoCls)
    restore(sampler.collector, state["collector"], ctx, "sampler.collector")
    if "eval_collector" in state:
        restore(sampler.eval_collector, state["eval_collector"], ctx,
                "sampler.eval_collector")
    if ctx.fresh_envs:
        _new_episodes(sampler, ctx)


def _new_episodes(sampler, ctx):
    """Envs whose state could not be saved start a new episode (said at start)."""
    collector = sampler.collector
    fresh = {id(env) for env in ctx.fresh_envs}
    for b, env in enumerate(collector.envs):
        if id(env) in fresh:
            sampler.agent_inputs[b] = 0
            sampler.agent_inputs.observation[b] = env.reset()
            sampler.traj_infos[b] = sampler.TrajInfoCls()
            sampler.agent.reset_one(idx=b)


def _serial_sampler_check(sampler, ctx):
    reasons = check(sampler.collector, ctx)
    if getattr(sampler, "eval_collector", None) is not None:
        reasons += [r + " (evaluation env)" for r in check(sampler.eval_collector, ctx)]
    return reasons


def _eval_collector_capture(collector, ctx):
    return {"data": data_state(collector, skip=("agent",)),
            "envs": [capture(env, ctx) for env in collector.envs]}


def _async_sampler_check(sampler, ctx):
    return [f"{type(sampler).__name__}: the sampler runs in its own process, whose state "
            "(envs, trajectories in progress, batches not yet copied into the replay "
            "buffer) is not saved: after a resume every env starts a new episode; the "
            "learner state (agent, optimizers, replay buffer, counters, main-process "
            "RNGs) is restored exactly"]


def is_async_sampler(sampler) -> bool:
    """Whether ``sampler`` is one of rlpyt's async samplers (its own process)."""
    return any(_key(c) == "rlpyt.samplers.async_.base.AsyncSamplerMixin"
               for c in type(sampler).__mro__)


def _nothing_to_capture(obj, ctx):
    return {}


def _nothing_to_restore(obj, state, ctx):
    pass


def _runner_times(runner):
    import time
    now = time.time()
    return {"since_start": now - getattr(runner, "_start_time", now),
            "since_last": now - getattr(runner, "_last_time", now)}


def _set_runner_times(runner, times):
    import time
    now = time.time()
    runner._start_time = now - times["since_start"]
    runner._last_time = now - times["since_last"]


_MINIBATCH_NAMES = ("_opt_infos", "_cum_time", "_cum_completed_trajs",
                    "_last_update_counter", "_new_completed_trajs", "_cum_eval_time",
                    "seed")
_ASYNC_NAMES = ("_opt_infos", "_cum_completed_trajs", "_new_completed_trajs",
                "_last_itr", "_last_sampler_itr", "_last_update_counter",
                "_last_eval_time", "seed")


def _minibatch_capture(runner, ctx, names=_MINIBATCH_NAMES):
    state = {name: getattr(runner, name) for name in names if hasattr(runner, name)}
    state["_opt_infos"] = {k: list(v) for k, v in runner._opt_infos.items()}
    traj = getattr(runner, "_traj_infos", None)
    if traj is not None:
        state["_traj_infos"] = {"infos": traj_infos_state(traj),
                                "maxlen": getattr(traj, "maxlen", None),
                                "deque": isinstance(traj, collections.deque)}
    state["times"] = _runner_times(runner)
    return state


def _minibatch_restore(runner, state, ctx):
    state = dict(state)
    _set_runner_times(runner, state.pop("times"))
    traj = state.pop("_traj_infos", None)
    if traj is not None:
        infos = make_traj_infos(traj["infos"], ctx.traj_info_cls)
        runner._traj_infos = collections.deque(infos, maxlen=traj["maxlen"]) \
            if traj["deque"] else infos
    state["_opt_infos"] = {k: list(v) for k, v in state["_opt_infos"].items()}
    for name, value in state.items():
        setattr(runner, name, value)
    if not hasattr(runner, "pbar") and hasattr(runner, "log_interval_itrs"):
        # MinibatchRlEval makes it in the log_diagnostics of the first
        # evaluation, which a resumed run skips.
        from rlpyt.utils.prog_bar import ProgBarCounter
        runner.pbar = ProgBarCounter(runner.log_interval_itrs)


def _install_defaults():
    agents, algos, samplers = "rlpyt.agents.", "rlpyt.algos.", "rlpyt.samplers."
    register_handler(agents + "base.BaseAgent", _agent_capture, _agent_restore)
    register_handler(agents + "dqn.epsilon_greedy.EpsilonGreedyAgentMixin",
                     _eps_capture, _eps_restore, prepare=_eps_prepare)
    rnn = ("_prev_rnn_state", "_sample_rnn_state")
    register_handler(agents + "base.RecurrentAgentMixin", _rnn_capture(rnn),
                     _rnn_restore(rnn))
    alt = ("_alt", "_prev_rnn_state", "_prev_rnn_state_pair", "_sample_rnn_state_pair")
    register_handler(agents + "base.AlternatingRecurrentAgentMixin", _rnn_capture(alt),
                     _rnn_restore(alt))
    register_handler(algos + "base.RlAlgorithm", _algo_capture, _algo_restore)
    register_handler("rlpyt.replays.base.BaseReplayBuffer", _replay_capture,
                     _replay_restore)
    register_handler("rlpyt.envs.base.Env", _env_capture, _env_restore, _env_check)
    register_handler(samplers + "collectors.BaseCollector", _collector_capture,
                     _collector_restore, _collector_check)
    register_handler(samplers + "collectors.BaseEvalCollector", _eval_collector_capture,
                     _collector_restore, _collector_check)
    register_handler(samplers + "serial.sampler.SerialSampler", _serial_sampler_capture,
                     _serial_sampler_restore, _serial_sampler_check)
    register_handler("rlpyt.runners.minibatch_rl.MinibatchRlBase", _minibatch_capture,
                     _minibatch_restore)
    register_handler("rlpyt.runners.async_rl.AsyncRlBase",
                     lambda runner, ctx: _minibatch_capture(runner, ctx, _ASYNC_NAMES),
                     _minibatch_restore)
    register_handler(samplers + "async_.base.AsyncSamplerMixin", _nothing_to_capture,
                     _nothing_to_restore, _async_sampler_check)


_install_defaults()
