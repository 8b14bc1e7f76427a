"""Every state handler of rlpyt's classes, and the table that lists them.

A component's state is captured by the handlers of every class in its MRO
that :data:`BUILTIN` (or a user, through ``register_handler``) lists, base
classes first; the order here is only the order of reading. Supporting a new
rlpyt class is one row. Keys are ``"module.QualName"``, so nothing here
imports rlpyt.

These are the rows and hooks rlpyt forces on us: its components are composite
objects (an agent with mixins, an algorithm holding optimizers and a replay
buffer, a sampler holding collectors and envs, in this process or in worker
processes). What they hold that is not rlpyt's own (torch modules, optimizers,
learning-rate schedulers, Atari emulators) goes through its row of the one
table of state kinds (``namedschema.training.state_kinds``), with
``ctx.capture_kind`` / ``ctx.restore_kind``; the global generators through
``namedschema.state.rng``.

BUILTIN   the rows: ``(class key, Handler)``
"""

from __future__ import annotations

import collections
import copy
import pickle
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..._core.tree import is_tensor, torch_if_loaded
from ...state.env import emulator_kind
from . import workers
from .table import (
    ASYNC_SAMPLER,
    CaptureFunction,
    CheckFunction,
    Handler,
    PrepareFunction,
    RestoreFunction,
    ResumeContext,
    StateMismatchError,
    copy_into,
    data_state,
    fresh_copy,
    is_async_sampler,
    make_traj_infos,
    restore_data_state,
    retype,
    traj_infos_state,
)

__all__ = ["BUILTIN", "ENV", "ATARI_ENV", "PARALLEL_SAMPLER"]

_AGENTS = "rlpyt.agents."
_SAMPLERS = "rlpyt.samplers."

# The handlers' objects (rlpyt's agents, algorithms, envs, samplers, runners) are
# untyped: rlpyt has no type information, so they are Any below.


# -- learner side: agents (models, epsilon, recurrent state), algorithms, replay buffers ----

# -- agents ------------------------------------------------------------------------

def _modules(obj: object) -> dict[str, Any]:
    """The torch modules among ``obj``'s attributes (an alias of one is listed once)."""
    torch = torch_if_loaded()
    if torch is None:
        return {}
    seen: set[int] = set()
    out: dict[str, Any] = {}
    for name, value in vars(obj).items():
        if isinstance(value, torch.nn.Module) and id(value) not in seen:
            seen.add(id(value))
            out[name] = value
    return out


def agent_capture(agent: Any, ctx: ResumeContext) -> dict[str, Any]:
    return {"modules": {name: ctx.capture_kind(m, f"agent.{name}")
                        for name, m in _modules(agent).items()},
            "mode": agent._mode}


def agent_restore(agent: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
    modules = _modules(agent)
    if sorted(modules) != sorted(state["modules"]):
        raise StateMismatchError(
            f"agent: the checkpoint has models {sorted(state['modules'])}, the built "
            f"agent {sorted(modules)}")
    for name, sd in state["modules"].items():
        # In place (load_state_dict): shared-memory models stay shared with sampler workers.
        ctx.restore_kind(modules[name], sd, f"agent.{name}")
    agent._mode = state["mode"]


_EPS_NAMES = ("eps_sample", "eps_init", "eps_final", "eps_itr_min", "eps_itr_max",
              "_eps_itr_min_max")


def eps_capture(agent: Any, ctx: ResumeContext) -> dict[str, Any]:
    state = data_state(agent, _EPS_NAMES)
    dist = getattr(agent, "distribution", None)
    if dist is not None and hasattr(dist, "_epsilon"):
        state["distribution_epsilon"] = ["value", dist._epsilon] \
            if not is_tensor(dist._epsilon) else ["array", dist._epsilon]
    return state


def eps_restore(agent: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
    state = dict(state)
    dist_eps = state.pop("distribution_epsilon", None)
    for name in ("eps_sample", "eps_init", "eps_final"):
        # Tensors (vector epsilon) are replaced, not written into: rlpyt
        # rebinds these attributes itself, so nothing else holds them.
        if name in state:
            kind, data = state.pop(name)
            setattr(agent, name, fresh_copy(data))
    restore_data_state(agent, state, "agent")
    if dist_eps is not None and getattr(agent, "distribution", None) is not None:
        agent.distribution._epsilon = fresh_copy(dist_eps[1])


class _EpsilonAfterSchedule:
    """``agent.sample_mode`` that keeps epsilon right after the schedule ended.

    rlpyt sets ``eps_sample`` only while ``itr <= eps_itr_max``; a process that
    starts later (a resumed one, and its sampler workers) would keep
    ``eps_init`` forever. Past the schedule this sets what rlpyt computed at
    its end (the same expression with progress 1), so an uninterrupted run is
    unchanged bit for bit. An instance attribute, inherited by forked workers.
    """

    def __init__(self, agent: Any, original: Callable[[int], object]) -> None:
        self.agent = agent
        self.original = original

    def __call__(self, itr: int) -> None:
        self.original(itr)
        agent = self.agent
        if itr > agent._eps_itr_min_max[1]:
            prog = 1
            agent.eps_sample = prog * agent.eps_final + (1 - prog) * agent.eps_init
            agent.distribution.set_epsilon(agent.eps_sample)


def eps_prepare(agent: Any, saved: dict[str, Any] | None, ctx: ResumeContext) -> None:
    if saved is not None and not isinstance(vars(agent).get("sample_mode"), _EpsilonAfterSchedule):
        agent.sample_mode = _EpsilonAfterSchedule(agent, agent.sample_mode)


# The recurrent-state attributes of rlpyt's recurrent agent mixins.
RNN_STATE = ("_prev_rnn_state", "_sample_rnn_state")
ALTERNATING_RNN_STATE = ("_alt", "_prev_rnn_state", "_prev_rnn_state_pair",
                         "_sample_rnn_state_pair")


def rnn_capture(names: Iterable[str]) -> CaptureFunction:
    """A capture of the attributes ``names`` (recurrent states: arrays or lists of them)."""
    def capture_(agent: Any, ctx: ResumeContext) -> dict[str, Any]:
        return {name: _plain(getattr(agent, name)) for name in names}
    return capture_


def rnn_restore(names: Iterable[str]) -> RestoreFunction:
    """The restore of :func:`rnn_capture`'s state."""
    def restore_(agent: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
        for name in names:
            setattr(agent, name, _fresh_copy_deep(state[name]))
    return restore_


def _plain(value: object) -> object:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _fresh_copy_deep(value: Any) -> Any:
    if isinstance(value, list):
        return [_fresh_copy_deep(v) for v in value]
    return fresh_copy(value)


# -- algorithms and replay buffers -------------------------------------------------

def algo_capture(algo: Any, ctx: ResumeContext) -> dict[str, Any]:
    torch = torch_if_loaded()
    state: dict[str, Any] = {"counters": data_state(algo, skip=("replay_buffer",))}
    if torch is not None:
        optim = {}
        for name, value in vars(algo).items():
            if isinstance(value, torch.optim.Optimizer) or _is_lr_scheduler(torch, value):
                optim[name] = ctx.capture_kind(value, f"algo.{name}")
        state["optimizers"] = optim
    buffer = getattr(algo, "replay_buffer", None)
    if buffer is not None:
        state["replay_buffer"] = ctx.capture(buffer)
    return state


def _is_lr_scheduler(torch: Any, value: object) -> bool:
    return isinstance(value, torch.optim.lr_scheduler.LRScheduler)


def algo_restore(algo: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
    for name, sd in state.get("optimizers", {}).items():
        target = getattr(algo, name, None)
        if target is None:
            raise StateMismatchError(f"algo.{name}: the built algorithm has no {name}")
        # (The row copies: torch keeps the loaded tensors of an optimizer's state as given.)
        ctx.restore_kind(target, sd, f"algo.{name}")
    restore_data_state(algo, state["counters"], "algo")
    if "replay_buffer" in state:
        buffer = getattr(algo, "replay_buffer", None)
        if buffer is None:
            raise StateMismatchError("algo.replay_buffer: the built algorithm has none")
        ctx.restore(buffer, state["replay_buffer"], "algo.replay_buffer")


def replay_capture(buffer: Any, ctx: ResumeContext) -> dict[str, Any]:
    return data_state(buffer)


def replay_restore(buffer: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
    restore_data_state(buffer, state, "replay_buffer")


# -- experience side: envs, collectors, samplers, runners ---------------------------------

ENV = "rlpyt.envs.base.Env"


def _picklable(value: object) -> bool:
    try:
        pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    return True


def _env_attributes(env: Any, ctx: ResumeContext
                    ) -> tuple[dict[str, Any] | None, list[str], str | None]:
    """``(attributes to pickle, names left to subclass handlers, why not picklable)``.

    Attributes that handlers of subclasses take care of (their ``attributes``)
    are left out. If the rest cannot be pickled and a subclass has a handler
    that did not say which attributes it takes care of, the attributes that
    fail are left to it; otherwise the env cannot be saved.
    """
    owned = ctx.handlers.owned_attributes(env, ENV)
    attrs = {k: v for k, v in vars(env).items() if k not in owned}
    try:
        pickle.dumps(attrs, protocol=pickle.HIGHEST_PROTOCOL)
        return attrs, sorted(owned), None
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
    if not any(not h.attributes for _, h in ctx.handlers.handlers_below(env, ENV)):
        return None, sorted(owned), why
    left = {k for k, v in attrs.items() if not _picklable(v)}
    return ({k: v for k, v in attrs.items() if k not in left}, sorted(owned | left), None)


def env_check(env: Any, ctx: ResumeContext) -> list[str]:
    attrs, _, why = _env_attributes(env, ctx)
    if attrs is None:
        return [f"env {type(env).__name__}: its attributes cannot be pickled "
                f"({why}); on resume it starts a new episode (register a handler "
                "for its class: namedschema.rlpyt.register_handler)"]
    return []


def env_capture(env: Any, ctx: ResumeContext) -> dict[str, Any]:
    attrs, left, _ = _env_attributes(env, ctx)
    if attrs is None:
        return {"picklable": False}
    return {"picklable": True, "attributes": attrs, "left": left, "order": list(vars(env))}


def env_restore(env: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
    if not state["picklable"] or ctx.new_envs:
        ctx.fresh_envs.append(env)
        return
    # Into the existing object: whoever holds the env keeps holding it.
    # Deep copies: nothing of the env stays backed by the loaded checkpoint.
    # What subclass handlers restore stays as the freshly built env has it.
    # The attributes in the saved order, as the env had them.
    kept = {name: vars(env)[name] for name in state["left"] if name in vars(env)}
    saved = copy.deepcopy(state["attributes"])
    order = list(state["order"]) + [n for n in kept if n not in state["order"]]
    attributes = {n: saved[n] if n in saved else kept[n] for n in order
                  if n in saved or n in kept}
    vars(env).clear()
    vars(env).update(attributes)


def collector_capture(collector: Any, ctx: ResumeContext) -> dict[str, Any]:
    return {"data": data_state(collector, skip=("samples_np", "agent")),
            "envs": [ctx.capture(env) for env in collector.envs]}


def collector_restore(collector: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
    restore_data_state(collector, state["data"], "collector")
    if len(state["envs"]) != len(collector.envs):
        raise StateMismatchError(f"collector: checkpoint has {len(state['envs'])} envs, "
                                 f"the built sampler {len(collector.envs)}")
    for i, (env, env_state) in enumerate(zip(collector.envs, state["envs"], strict=True)):
        ctx.restore(env, env_state, f"collector.envs[{i}]")


def collector_check(collector: Any, ctx: ResumeContext) -> list[str]:
    reasons = []
    for env in collector.envs:
        reasons.extend(ctx.check(env))
    return sorted(set(reasons))


def serial_sampler_capture(sampler: Any, ctx: ResumeContext) -> dict[str, Any]:
    state = {"agent_inputs": sampler.agent_inputs,
             "traj_infos": traj_infos_state(sampler.traj_infos),
             "samples_np": sampler.samples_np,
             "collector": ctx.capture(sampler.collector)}
    if getattr(sampler, "eval_collector", None) is not None:
        state["eval_collector"] = ctx.capture(sampler.eval_collector)
    return state


def serial_sampler_restore(sampler: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
    # Replaced, not written into: the collector makes new AgentInputs (with
    # the agent's action dtype) every batch, so nothing else holds them.
    # With rlpyt's own classes (the checkpoint holds schemas: see _portable).
    sampler.agent_inputs = retype(fresh_copy(state["agent_inputs"]), sampler.agent_inputs)
    copy_into(sampler.samples_np, state["samples_np"], "sampler.samples_np")
    sampler.traj_infos = make_traj_infos(state["traj_infos"], sampler.TrajInfoCls)
    ctx.restore(sampler.collector, state["collector"], "sampler.collector")
    if "eval_collector" in state:
        ctx.restore(sampler.eval_collector, state["eval_collector"], "sampler.eval_collector")
    if ctx.fresh_envs:
        _new_episodes(sampler, ctx)


def _new_episodes(sampler: Any, ctx: ResumeContext) -> None:
    """Envs whose state could not be saved start a new episode (said at start)."""
    collector = sampler.collector
    fresh = {id(env) for env in ctx.fresh_envs}
    for b, env in enumerate(collector.envs):
        if id(env) in fresh:
            sampler.agent_inputs[b] = 0
            sampler.agent_inputs.observation[b] = env.reset()
            sampler.traj_infos[b] = sampler.TrajInfoCls()
            sampler.agent.reset_one(idx=b)


def serial_sampler_check(sampler: Any, ctx: ResumeContext) -> list[str]:
    reasons = ctx.check(sampler.collector)
    if getattr(sampler, "eval_collector", None) is not None:
        reasons += [r + " (evaluation env)" for r in ctx.check(sampler.eval_collector)]
    return reasons


def eval_collector_capture(collector: Any, ctx: ResumeContext) -> dict[str, Any]:
    return {"data": data_state(collector, skip=("agent",)),
            "envs": [ctx.capture(env) for env in collector.envs]}


def async_sampler_check(sampler: Any, ctx: ResumeContext) -> list[str]:
    return [f"{type(sampler).__name__}: the sampler runs in its own process, whose state "
            "(envs, trajectories in progress, batches not yet copied into the replay "
            "buffer) is not saved: after a resume every env starts a new episode; the "
            "learner state (agent, optimizers, replay buffer, counters, main-process "
            "RNGs) is restored exactly"]


def nothing_to_capture(obj: Any, ctx: ResumeContext) -> dict[str, Any]:
    return {}


def nothing_to_restore(obj: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
    pass


# -- runners -----------------------------------------------------------------------

def _runner_times(runner: object) -> dict[str, float]:
    import time
    now = time.time()
    return {"since_start": now - getattr(runner, "_start_time", now),
            "since_last": now - getattr(runner, "_last_time", now)}


def _set_runner_times(runner: Any, times: Mapping[str, float]) -> None:
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


def minibatch_capture(runner: Any, ctx: ResumeContext,
                      names: Iterable[str] = _MINIBATCH_NAMES) -> dict[str, Any]:
    """The counters, trajectory infos and timers of rlpyt's minibatch runners."""
    state = {name: getattr(runner, name) for name in names if hasattr(runner, name)}
    state["_opt_infos"] = {k: list(v) for k, v in runner._opt_infos.items()}
    traj = getattr(runner, "_traj_infos", None)
    if traj is not None:
        state["_traj_infos"] = {"infos": traj_infos_state(traj),
                                "maxlen": getattr(traj, "maxlen", None),
                                "deque": isinstance(traj, collections.deque)}
    state["times"] = _runner_times(runner)
    return state


def minibatch_restore(runner: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
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


def async_capture(runner: Any, ctx: ResumeContext) -> dict[str, Any]:
    """:func:`minibatch_capture` for rlpyt's async runners (their own counters)."""
    return minibatch_capture(runner, ctx, _ASYNC_NAMES)

# -- Atari's emulator ---------------------------------------------------------------
#
# rlpyt's ``AtariEnv``: its own attributes (frame stack, max-pool and raw frames,
# lives, step counter) are plain data that the ``Env`` handler pickles; its ``ale`` is
# an emulator (ale-py's, or atari_py's ctypes one, whose pointer must never be
# pickled), captured with its own RNG by the state-kind table's ``emulator`` row. An
# emulator of another kind is said at start; such an env starts a new episode on resume.

ATARI_ENV = "rlpyt.envs.atari.atari_env.AtariEnv"


def atari_check(env: Any, ctx: ResumeContext) -> list[str]:
    ale = getattr(env, "ale", None)
    if emulator_kind(ale) is None:
        return [f"env {type(env).__name__}: its emulator ({type(ale).__qualname__}) is "
                "neither ale-py's nor atari_py's ALEInterface, so its state cannot be "
                "saved; on resume the env starts a new episode"]
    return []


def atari_capture(env: Any, ctx: ResumeContext) -> dict[str, Any]:
    if emulator_kind(env.ale) is None:
        return {"ale": {"kind": None}}
    return {"ale": ctx.capture_kind(env.ale, "env.ale")}


def atari_restore(env: Any, state: dict[str, Any], ctx: ResumeContext) -> None:
    if ctx.new_envs:
        return                  # accepted new env arguments: the env starts afresh
    if state["ale"]["kind"] is None:
        ctx.fresh_envs.append(env)
        return
    if emulator_kind(env.ale) is None:
        raise StateMismatchError(f"env.ale: the checkpoint holds a {state['ale']['kind']} "
                                 f"emulator state, the built env has a "
                                 f"{type(env.ale).__qualname__} (not supported)")
    ctx.restore_kind(env.ale, state["ale"], "env.ale")


# -- parallel samplers: their workers' envs, in other processes (workers) --------------

PARALLEL_SAMPLER = workers.PARALLEL_SAMPLER

def parallel_sampler_prepare(sampler: Any, saved: dict[str, Any] | None, ctx: ResumeContext) -> None:
    """Before the workers fork: make the sampler's workers resumable (with their states)."""
    if not is_async_sampler(sampler):
        workers.install(sampler, None if saved is None else saved.get("workers"), ctx.handlers)


def parallel_sampler_capture(sampler: Any, ctx: ResumeContext) -> dict[str, Any]:
    if is_async_sampler(sampler):
        return {}
    return {"workers": workers.capture_workers(sampler)}


def parallel_sampler_restore(sampler: Any, saved: dict[str, Any], ctx: ResumeContext) -> None:
    # The workers got their states before they forked (prepare); say what they lack.
    if is_async_sampler(sampler):
        return
    saved_workers = saved.get("workers")
    if saved_workers is None:
        ctx.note_once(f"{type(sampler).__name__}: the checkpoint holds no worker states "
                      "(it was written after the workers stopped): envs start new "
                      "episodes")
    elif len(saved_workers) != getattr(sampler, "n_worker", len(saved_workers)):
        ctx.note_once(f"{type(sampler).__name__}: the checkpoint's run had "
                      f"{len(saved_workers)} sampler workers, this one "
                      f"{sampler.n_worker}: envs start new episodes")


def parallel_sampler_check(sampler: Any, ctx: ResumeContext) -> list[str]:
    # The workers check their own envs: a throwaway env built here would draw
    # from the run's RNGs (rlpyt's AtariEnv resets, with np.random, when built).
    if is_async_sampler(sampler):
        return []   # Said by the async sampler's check.
    return workers.check_workers(sampler)


# -- the table ------------------------------------------------------------------------

def _row(key: str, capture: CaptureFunction, restore: RestoreFunction,
         check: CheckFunction | None = None, prepare: PrepareFunction | None = None,
         attributes: tuple[str, ...] = ()) -> tuple[str, Handler]:
    # rlpyt's handlers copy into existing memory: restore gets the checkpoint's arrays.
    return key, Handler(capture, restore, check, prepare, attributes, writable=False)


BUILTIN: tuple[tuple[str, Handler], ...] = (
    # -- learner side: agents, algorithms, replay buffers
    _row(_AGENTS + "base.BaseAgent", agent_capture, agent_restore),
    _row(_AGENTS + "dqn.epsilon_greedy.EpsilonGreedyAgentMixin", eps_capture,
         eps_restore, prepare=eps_prepare),
    _row(_AGENTS + "base.RecurrentAgentMixin", rnn_capture(RNN_STATE),
         rnn_restore(RNN_STATE)),
    _row(_AGENTS + "base.AlternatingRecurrentAgentMixin",
         rnn_capture(ALTERNATING_RNN_STATE),
         rnn_restore(ALTERNATING_RNN_STATE)),
    _row("rlpyt.algos.base.RlAlgorithm", algo_capture, algo_restore),
    _row("rlpyt.replays.base.BaseReplayBuffer", replay_capture,
         replay_restore),
    # -- experience side: envs, collectors, samplers, runners
    _row(ENV, env_capture, env_restore, env_check),
    _row(_SAMPLERS + "collectors.BaseCollector", collector_capture,
         collector_restore, collector_check),
    _row(_SAMPLERS + "collectors.BaseEvalCollector", eval_collector_capture,
         collector_restore, collector_check),
    _row(_SAMPLERS + "serial.sampler.SerialSampler", serial_sampler_capture,
         serial_sampler_restore, serial_sampler_check),
    _row("rlpyt.runners.minibatch_rl.MinibatchRlBase", minibatch_capture,
         minibatch_restore),
    _row("rlpyt.runners.async_rl.AsyncRlBase", async_capture,
         minibatch_restore),
    _row(ASYNC_SAMPLER, nothing_to_capture, nothing_to_restore,
         async_sampler_check),
    # -- Atari's emulator (through the state-kind table's emulator row)
    _row(ATARI_ENV, atari_capture, atari_restore, atari_check,
         attributes=("ale",)),
    # -- parallel samplers: their workers' envs, in other processes (workers)
    _row(PARALLEL_SAMPLER, parallel_sampler_capture,
         parallel_sampler_restore, parallel_sampler_check,
         parallel_sampler_prepare),
)
