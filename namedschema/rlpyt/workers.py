"""State of parallel-sampler workers (``CpuSampler``, ``GpuSampler``): envs in other processes.

rlpyt's worker loop (``sampling_process``) keeps the envs, agent inputs and
in-progress trajectory infos in its own process and local variables. The
resume reaches them through the collector, the one object of that loop it
chooses: before the workers fork, the sampler's ``CollectorCls`` becomes a
subclass (same name and behaviour) whose ``collect_batch`` also

* applies the state a resume handed over before the fork, at its first call;
* on a *capture round* (a flag in shared memory, then one pass of the
  workers' barriers driven by the main process, between two iterations)
  sends its state to the main process through a queue and collects nothing.

A worker's state: its collector's arrays and envs (each env's attributes,
its ``RandomState`` included), agent inputs, trajectory infos, the
sampling agent's non-model state (epsilon, recurrent states) and the
worker's global RNGs. Envs that cannot be pickled start new episodes.
Workers are assumed to be forked (rlpyt's default on Linux).

WorkerChannel           the queue and flag shared with the workers
install                 give a sampler the resumable collector class
capture_workers         run a capture round, return every worker's state
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from typing import Any

from . import state as _state

__all__ = ["WorkerChannel", "install", "capture_workers"]

_AGENT_MODELS = "rlpyt.agents.base.BaseAgent"   # models are shared, saved by the main
_CAPTURE_TIMEOUT = 600.0


class WorkerChannel:
    """What the main process and its sampler workers share (made before the fork)."""

    def __init__(self):
        self.queue: Any = mp.Queue()
        self.capture = mp.RawValue("b", 0)
        self.restore_states: dict = {}     # rank -> state; inherited by fork


class _WorkerContext:
    def __init__(self, traj_info_cls):
        self.traj_info_cls = traj_info_cls
        self.fresh_envs: list = []

    def note_once(self, message):
        print(f"namedschema.rlpyt: {message}", file=sys.stderr)


def _worker_state(collector, agent_inputs, traj_infos):
    ctx = _WorkerContext(collector.TrajInfoCls)
    agent = getattr(collector, "agent", None)
    agent_state = None
    if agent is not None:
        agent_state = {k: v for k, v in _state.capture(agent, ctx).items()
                       if k != _AGENT_MODELS}
    return {"collector": _state.capture(collector, ctx), "agent_inputs": agent_inputs,
            "traj_infos": _state.traj_infos_state(traj_infos), "agent": agent_state,
            "rng": _state.rng_state()}


def _apply_worker_state(collector, saved, agent_inputs, traj_infos):
    ctx = _WorkerContext(collector.TrajInfoCls)
    envs_saved = next((v["envs"] for v in saved["collector"].values() if "envs" in v), None)
    if envs_saved is None or len(envs_saved) != len(collector.envs):
        ctx.note_once(f"sampler worker {collector.rank}: the checkpoint's worker had "
                      "other envs; its envs start new episodes")
        return agent_inputs, traj_infos
    _state.restore(collector, saved["collector"], ctx, f"worker {collector.rank}")
    agent = getattr(collector, "agent", None)
    if agent is not None and saved["agent"]:
        _state.restore(agent, saved["agent"], ctx, f"worker {collector.rank} agent",
                       partial=True)
    _state.set_rng_state(saved["rng"])
    agent_inputs = _state.fresh_copy(saved["agent_inputs"])
    traj_infos = _state.make_traj_infos(saved["traj_infos"], collector.TrajInfoCls)
    fresh = {id(env) for env in ctx.fresh_envs}
    for b, env in enumerate(collector.envs):
        if id(env) in fresh:
            agent_inputs[b] = 0
            agent_inputs.observation[b] = env.reset()
            traj_infos[b] = collector.TrajInfoCls()
            if agent is not None:
                agent.reset_one(idx=b)
    return agent_inputs, traj_infos


def resumable_collector_class(cls, channel):
    """``cls`` with a ``collect_batch`` that takes part in captures and restores."""

    def collect_batch(self, agent_inputs, traj_infos, itr):
        pending = channel.restore_states.pop(self.rank, None)
        if pending is not None:
            agent_inputs, traj_infos = _apply_worker_state(self, pending, agent_inputs,
                                                           traj_infos)
        if channel.capture.value:
            channel.queue.put((self.rank, _worker_state(self, agent_inputs, traj_infos)))
            return agent_inputs, traj_infos, []
        return cls.collect_batch(self, agent_inputs, traj_infos, itr)

    return type(cls.__name__, (cls,), {"collect_batch": collect_batch,
                                       "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__,
                                       "_namedschema_resumable": True})


def install(sampler, saved_workers=None) -> WorkerChannel:
    """Before the workers fork: the resumable collector class, and states to restore."""
    channel = WorkerChannel()
    if saved_workers:
        channel.restore_states = dict(enumerate(saved_workers))
    sampler.CollectorCls = resumable_collector_class(sampler.CollectorCls, channel)
    sampler._namedschema_channel = channel
    return channel


def capture_workers(sampler):
    """Every worker's state, between two iterations; None when the workers are gone."""
    channel = getattr(sampler, "_namedschema_channel", None)
    ctrl = getattr(sampler, "ctrl", None)
    workers = getattr(sampler, "workers", None)
    if channel is None or ctrl is None or not workers or ctrl.quit.value \
            or not all(w.is_alive() for w in workers):
        return None
    channel.capture.value = 1
    try:
        ctrl.barrier_in.wait()
        ctrl.barrier_out.wait()
    finally:
        channel.capture.value = 0
    states = dict(channel.queue.get(timeout=_CAPTURE_TIMEOUT) for _ in workers)
    return [states[rank] for rank in sorted(states)]


# -- the handler of rlpyt's parallel samplers (main process) -------------------------

def _prepare(sampler, saved):
    if not _state.is_async_sampler(sampler):
        install(sampler, None if saved is None else saved.get("workers"))


def _capture(sampler, ctx):
    if _state.is_async_sampler(sampler):
        return {}
    return {"workers": capture_workers(sampler)}


def _restore(sampler, saved, ctx):
    # The workers got their states before they forked (_prepare); say what they lack.
    if _state.is_async_sampler(sampler):
        return
    workers = saved.get("workers")
    if workers is None:
        ctx.note_once(f"{type(sampler).__name__}: the checkpoint holds no worker states "
                      "(it was written after the workers stopped): envs start new "
                      "episodes")
    elif len(workers) != getattr(sampler, "n_worker", len(workers)):
        ctx.note_once(f"{type(sampler).__name__}: the checkpoint's run had "
                      f"{len(workers)} sampler workers, this one "
                      f"{sampler.n_worker}: envs start new episodes")


def _check(sampler, ctx):
    if _state.is_async_sampler(sampler):
        return []   # Said by the async sampler's check.
    env = sampler.EnvCls(**sampler.env_kwargs)
    try:
        reasons = _state.check(env, ctx)
    finally:
        env.close()
    reasons = [f"{r} (in sampler workers)" for r in reasons]
    if getattr(sampler, "eval_n_envs", 0):
        reasons.append(f"{type(sampler).__name__}: evaluation envs live in the workers' "
                       "evaluation loop, out of reach: evaluations after a resume "
                       "differ from an uninterrupted run's")
    return reasons


_state.register_handler("rlpyt.samplers.parallel.base.ParallelSamplerBase", _capture,
                        _restore, _check, _prepare)
