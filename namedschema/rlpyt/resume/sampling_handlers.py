"""State handlers of rlpyt's experience side: environments, collectors, samplers
(serial; async ones are only checked) and runners (counters, trajectory infos,
timers). The table of :mod:`.handlers` says which class each one handles.
"""

from __future__ import annotations

import collections
import copy
import pickle

from .data_state import (
    copy_into,
    data_state,
    fresh_copy,
    make_traj_infos,
    restore_data_state,
    traj_infos_state,
)
from .portable import retype
from .registry import ResumeContext, StateMismatchError, handler_key

__all__ = ["ENV", "ASYNC_SAMPLER", "env_capture", "env_restore", "env_check",
           "collector_capture", "collector_restore", "collector_check",
           "eval_collector_capture", "serial_sampler_capture", "serial_sampler_restore",
           "serial_sampler_check", "async_sampler_check", "nothing_to_capture",
           "nothing_to_restore", "minibatch_capture", "minibatch_restore", "async_capture",
           "is_async_sampler"]


# -- envs, collectors, samplers ----------------------------------------------------

ENV = "rlpyt.envs.base.Env"
ASYNC_SAMPLER = "rlpyt.samplers.async_.base.AsyncSamplerMixin"


def _picklable(value) -> bool:
    try:
        pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    return True


def _env_attributes(env, ctx: ResumeContext):
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


def env_check(env, ctx: ResumeContext):
    attrs, _, why = _env_attributes(env, ctx)
    if attrs is None:
        return [f"env {type(env).__name__}: its attributes cannot be pickled "
                f"({why}); on resume it starts a new episode (register a handler "
                "for its class: namedschema.rlpyt.register_handler)"]
    return []


def env_capture(env, ctx: ResumeContext):
    attrs, left, _ = _env_attributes(env, ctx)
    if attrs is None:
        return {"picklable": False}
    return {"picklable": True, "attributes": attrs, "left": left, "order": list(vars(env))}


def env_restore(env, state, ctx: ResumeContext):
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


def collector_capture(collector, ctx: ResumeContext):
    return {"data": data_state(collector, skip=("samples_np", "agent")),
            "envs": [ctx.capture(env) for env in collector.envs]}


def collector_restore(collector, state, ctx: ResumeContext):
    restore_data_state(collector, state["data"], "collector")
    if len(state["envs"]) != len(collector.envs):
        raise StateMismatchError(f"collector: checkpoint has {len(state['envs'])} envs, "
                                 f"the built sampler {len(collector.envs)}")
    for i, (env, env_state) in enumerate(zip(collector.envs, state["envs"], strict=True)):
        ctx.restore(env, env_state, f"collector.envs[{i}]")


def collector_check(collector, ctx: ResumeContext):
    reasons = []
    for env in collector.envs:
        reasons.extend(ctx.check(env))
    return sorted(set(reasons))


def serial_sampler_capture(sampler, ctx: ResumeContext):
    state = {"agent_inputs": sampler.agent_inputs,
             "traj_infos": traj_infos_state(sampler.traj_infos),
             "samples_np": sampler.samples_np,
             "collector": ctx.capture(sampler.collector)}
    if getattr(sampler, "eval_collector", None) is not None:
        state["eval_collector"] = ctx.capture(sampler.eval_collector)
    return state


def serial_sampler_restore(sampler, state, ctx: ResumeContext):
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


def _new_episodes(sampler, ctx: ResumeContext):
    """Envs whose state could not be saved start a new episode (said at start)."""
    collector = sampler.collector
    fresh = {id(env) for env in ctx.fresh_envs}
    for b, env in enumerate(collector.envs):
        if id(env) in fresh:
            sampler.agent_inputs[b] = 0
            sampler.agent_inputs.observation[b] = env.reset()
            sampler.traj_infos[b] = sampler.TrajInfoCls()
            sampler.agent.reset_one(idx=b)


def serial_sampler_check(sampler, ctx: ResumeContext):
    reasons = ctx.check(sampler.collector)
    if getattr(sampler, "eval_collector", None) is not None:
        reasons += [r + " (evaluation env)" for r in ctx.check(sampler.eval_collector)]
    return reasons


def eval_collector_capture(collector, ctx: ResumeContext):
    return {"data": data_state(collector, skip=("agent",)),
            "envs": [ctx.capture(env) for env in collector.envs]}


def async_sampler_check(sampler, ctx: ResumeContext):
    return [f"{type(sampler).__name__}: the sampler runs in its own process, whose state "
            "(envs, trajectories in progress, batches not yet copied into the replay "
            "buffer) is not saved: after a resume every env starts a new episode; the "
            "learner state (agent, optimizers, replay buffer, counters, main-process "
            "RNGs) is restored exactly"]


def is_async_sampler(sampler: object) -> bool:
    """Whether ``sampler`` is one of rlpyt's async samplers (its own process)."""
    return any(handler_key(c) == ASYNC_SAMPLER for c in type(sampler).__mro__)


def nothing_to_capture(obj, ctx: ResumeContext):
    return {}


def nothing_to_restore(obj, state, ctx: ResumeContext):
    pass


# -- runners -----------------------------------------------------------------------

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


def minibatch_capture(runner, ctx: ResumeContext, names=_MINIBATCH_NAMES) -> dict:
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


def minibatch_restore(runner, state, ctx: ResumeContext):
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


def async_capture(runner, ctx: ResumeContext) -> dict:
    """:func:`minibatch_capture` for rlpyt's async runners (their own counters)."""
    return minibatch_capture(runner, ctx, _ASYNC_NAMES)
