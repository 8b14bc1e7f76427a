"""State of parallel-sampler workers (``CpuSampler``, ``GpuSampler``): envs in other processes.

rlpyt's worker loop (``sampling_process``) keeps the envs, agent inputs and
in-progress trajectory infos in its own process and local variables. The
resume reaches them through the collectors, the objects of that loop it
chooses: before the workers fork, the sampler's ``CollectorCls`` and
``eval_CollectorCls`` become subclasses (same names and behaviour); the
training collector's ``collect_batch`` also

* applies the state a resume handed over before the fork, at its first call;
* on a *round* (a flag in shared memory, then one pass of the workers'
  barriers driven by the main process, between two iterations) sends the
  worker's state (a capture round) or what cannot be saved of its envs (the
  check round at start) to the main process through a queue, and collects
  nothing.

A worker's state: its collector's arrays and envs (each env's attributes,
its ``RandomState`` included), agent inputs, trajectory infos, its
evaluation collector's envs, the sampling agent's non-model state (epsilon,
recurrent states) and the worker's global RNGs. Envs that cannot be pickled
start new episodes. Workers are assumed to be forked (rlpyt's default on
Linux). Nothing of this draws from an RNG of the run or changes what the
workers compute: a round only passes the barriers once more, between
iterations, where the workers do nothing but ``reset_if_needed`` (which is
idempotent). Workers end with their main process, and a worker's failure
raises in the main process (:mod:`._worker_guard`).

WorkerChannel           the queues and flag shared with the workers
install                 give a sampler the resumable collector classes
capture_workers         run a capture round, return every worker's state
check_workers           run the check round: why the workers' envs are not exact
skip_env_states         the workers' envs start anew (a resume with new env arguments)
finish                  after training: stop watching (and stop workers left waiting)
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import threading
from typing import Any

from .data_state import fresh_copy, make_traj_infos, rng_state, set_rng_state, traj_infos_state
from .registry import HandlerTable, ResumeContext
from .sampling_handlers import is_async_sampler
from .worker_guard import SamplerWorkerError, Watch, die_with_parent, report

__all__ = ["WorkerChannel", "install", "capture_workers", "check_workers", "finish",
           "skip_env_states", "SamplerWorkerError", "PARALLEL_SAMPLER",
           "parallel_sampler_capture", "parallel_sampler_restore", "parallel_sampler_check",
           "parallel_sampler_prepare"]

PARALLEL_SAMPLER = "rlpyt.samplers.parallel.base.ParallelSamplerBase"
_AGENT_MODELS = "rlpyt.agents.base.BaseAgent"   # models are shared, saved by the main
_CAPTURE, _CHECK = 1, 2
_POLL = 0.1

# In a worker process: its evaluation collector (rlpyt keeps it in a local variable).
_IN_WORKER: dict = {}


class WorkerChannel:
    """What the main process and its sampler workers share (made before the fork)."""

    def __init__(self, handlers: HandlerTable):
        self.handlers = handlers             # the main process's handler table (forked)
        self.queue: Any = mp.Queue()         # worker -> main: states, check results
        self.errors: Any = mp.Queue()        # worker -> main: failures
        self.round = mp.RawValue("b", 0)     # _CAPTURE or _CHECK while a round runs
        self.new_envs = mp.RawValue("b", 0)  # set: envs start anew (new env arguments)
        self.restore_states: dict = {}       # rank -> state; inherited by fork
        self.parent_pid = os.getpid()
        self.fork_thread_is_main = threading.current_thread() is threading.main_thread()
        self.watch: Watch | None = None


@contextlib.contextmanager
def _reported(channel, rank, during):
    """A worker's exception goes to the main process (then ends the worker as usual)."""
    try:
        yield
    except BaseException as exc:
        report(channel.errors, rank, during, exc)
        raise


def _worker_context(channel, collector, new_envs=False) -> ResumeContext:
    return ResumeContext(channel.handlers, traj_info_cls=collector.TrajInfoCls,
                         new_envs=new_envs)


def _worker_state(ctx, collector, agent_inputs, traj_infos):
    agent = getattr(collector, "agent", None)
    agent_state = None
    if agent is not None:
        agent_state = {k: v for k, v in ctx.capture(agent).items() if k != _AGENT_MODELS}
    evaluator = _IN_WORKER.get("eval_collector")
    return {"collector": ctx.capture(collector), "agent_inputs": agent_inputs,
            "traj_infos": traj_infos_state(traj_infos), "agent": agent_state,
            "eval_collector": None if evaluator is None else ctx.capture(evaluator),
            "rng": rng_state()}


def _worker_check(ctx, collector):
    reasons = [f"{r} (in sampler workers)" for r in ctx.check(collector)]
    evaluator = _IN_WORKER.get("eval_collector")
    if evaluator is not None:
        reasons += [f"{r} (evaluation env in sampler workers)" for r in ctx.check(evaluator)]
    return reasons


def _apply_worker_state(ctx, collector, saved, agent_inputs, traj_infos):
    envs_saved = next((v["envs"] for v in saved["collector"].values() if "envs" in v), None)
    if envs_saved is None or len(envs_saved) != len(collector.envs):
        ctx.note_once(f"sampler worker {collector.rank}: the checkpoint's worker had "
                      "other envs; its envs start new episodes")
        return agent_inputs, traj_infos
    ctx.restore(collector, saved["collector"], f"worker {collector.rank}")
    agent = getattr(collector, "agent", None)
    if agent is not None and saved["agent"]:
        ctx.restore(agent, saved["agent"], f"worker {collector.rank} agent", partial=True)
    evaluator = _IN_WORKER.get("eval_collector")
    if evaluator is not None and saved.get("eval_collector") is not None:
        ctx.restore(evaluator, saved["eval_collector"],
                    f"worker {collector.rank} evaluation collector")
    set_rng_state(saved["rng"])
    agent_inputs = fresh_copy(saved["agent_inputs"])
    traj_infos = make_traj_infos(saved["traj_infos"], collector.TrajInfoCls)
    fresh = {id(env) for env in ctx.fresh_envs}
    for b, env in enumerate(collector.envs):
        if id(env) not in fresh:
            continue    # (fresh evaluation envs: every evaluation resets them anyway)
        traj_infos[b] = collector.TrajInfoCls()
        if agent_inputs is None:
            # Action-server collectors (GpuSampler): the inputs are the step buffer.
            step = collector.step_buffer_np
            step.observation[b] = env.reset()
            step.action[b] = 0
            step.reward[b] = 0
            step.done[b] = False
        else:
            agent_inputs[b] = 0
            agent_inputs.observation[b] = env.reset()
        if agent is not None:
            agent.reset_one(idx=b)
    return agent_inputs, traj_infos


def resumable_collector_class(cls, channel):
    """``cls`` with a ``collect_batch`` that takes part in rounds and restores."""

    def __init__(self, *args, **kwargs):
        die_with_parent(channel.parent_pid, channel.fork_thread_is_main)
        with _reported(channel, kwargs.get("rank", "?"), "its start"):
            cls.__init__(self, *args, **kwargs)

    def collect_batch(self, agent_inputs, traj_infos, itr):
        pending = channel.restore_states.pop(self.rank, None)
        if pending is not None:
            with _reported(channel, self.rank, "the resume (restoring its state)"):
                ctx = _worker_context(channel, self, bool(channel.new_envs.value))
                agent_inputs, traj_infos = _apply_worker_state(
                    ctx, self, pending, agent_inputs, traj_infos)
        mode = channel.round.value
        if mode == _CAPTURE:
            with _reported(channel, self.rank, "a capture round"):
                channel.queue.put((self.rank, _worker_state(
                    _worker_context(channel, self), self, agent_inputs, traj_infos)))
            return agent_inputs, traj_infos, []
        if mode == _CHECK:
            with _reported(channel, self.rank, "the check at start"):
                channel.queue.put((self.rank, _worker_check(_worker_context(channel, self),
                                                            self)))
            return agent_inputs, traj_infos, []
        with _reported(channel, self.rank, "sampling"):
            return cls.collect_batch(self, agent_inputs, traj_infos, itr)

    def reset_if_needed(self, agent_inputs):
        with _reported(channel, self.rank, "an env reset"):
            return cls.reset_if_needed(self, agent_inputs)

    return type(cls.__name__, (cls,), {"__init__": __init__,
                                       "collect_batch": collect_batch,
                                       "reset_if_needed": reset_if_needed,
                                       "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__,
                                       "_namedschema_resumable": True})


def resumable_eval_collector_class(cls, channel):
    """``cls`` that the worker's state reaches, and whose failures are reported."""

    def __init__(self, *args, **kwargs):
        with _reported(channel, kwargs.get("rank", "?"), "its start"):
            cls.__init__(self, *args, **kwargs)
        _IN_WORKER["eval_collector"] = self

    def collect_evaluation(self, itr):
        with _reported(channel, self.rank, "evaluation"):
            return cls.collect_evaluation(self, itr)

    return type(cls.__name__, (cls,), {"__init__": __init__,
                                       "collect_evaluation": collect_evaluation,
                                       "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__,
                                       "_namedschema_resumable": True})


def install(sampler, saved_workers, handlers: HandlerTable) -> WorkerChannel:
    """Before the workers fork: the resumable collector classes, and states to restore.

    The workers capture, check and restore with ``handlers`` (the resume's table).
    """
    channel = WorkerChannel(handlers)
    if saved_workers:
        channel.restore_states = dict(enumerate(saved_workers))
    sampler.CollectorCls = resumable_collector_class(sampler.CollectorCls, channel)
    if getattr(sampler, "eval_CollectorCls", None) is not None:
        sampler.eval_CollectorCls = resumable_eval_collector_class(sampler.eval_CollectorCls,
                                                                   channel)
    sampler._namedschema_channel = channel
    return channel


def skip_env_states(sampler) -> None:
    """The workers' envs start anew instead of taking their saved states (the run was
    resumed with new env arguments); before the workers' first round."""
    channel = getattr(sampler, "_namedschema_channel", None)
    if channel is not None:
        channel.new_envs.value = 1


def _workers_running(sampler) -> bool:
    ctrl = getattr(sampler, "ctrl", None)
    return getattr(sampler, "_namedschema_channel", None) is not None and ctrl is not None \
        and bool(getattr(sampler, "workers", None)) and not ctrl.quit.value


def _watch(sampler) -> Watch:
    channel = sampler._namedschema_channel
    if channel.watch is None:
        ctrl = sampler.ctrl
        channel.watch = Watch(sampler, channel.errors, lambda: bool(ctrl.quit.value),
                              "sampling")
    return channel.watch


def _round(sampler, mode, doing):
    """One pass of the workers' barriers in which each sends one reply; by rank."""
    channel, ctrl = sampler._namedschema_channel, sampler.ctrl
    watch = _watch(sampler)
    watch.check()
    watch.doing(doing)
    channel.round.value = mode
    try:
        ctrl.barrier_in.wait()
        ctrl.barrier_out.wait()
    except threading.BrokenBarrierError:
        watch.check()
        raise
    finally:
        channel.round.value = 0
    replies: dict = {}
    while len(replies) < len(sampler.workers):
        try:
            rank, reply = channel.queue.get(timeout=_POLL)
        except queue.Empty:
            watch.check()
            continue
        replies[rank] = reply
    watch.doing("sampling")
    return [replies[rank] for rank in sorted(replies)]


def capture_workers(sampler):
    """Every worker's state, between two iterations; None when the workers are gone."""
    if not _workers_running(sampler):
        return None
    return _round(sampler, _CAPTURE, "a capture round")


def check_workers(sampler) -> list:
    """What cannot be restored exactly of the workers' envs (a round; draws nothing)."""
    if not _workers_running(sampler):
        return []
    return sorted({reason for reply in _round(sampler, _CHECK, "the check at start")
                   for reason in reply})


def finish(sampler, failed: bool) -> SamplerWorkerError | None:
    """After training: stop watching; if training ``failed``, end the workers.

    rlpyt's workers are not daemons and wait in barriers: after an exception
    in the main process they would keep the interpreter from exiting. Returns
    the failure of a worker, if one failed.
    """
    channel = getattr(sampler, "_namedschema_channel", None)
    if channel is None or channel.watch is None:
        return None
    watch, channel.watch = channel.watch, None
    watch.close()
    if failed and getattr(sampler, "workers", None):
        watch.abandon()
    return watch.failure


# -- the handler of rlpyt's parallel samplers (main process) -------------------------

def parallel_sampler_prepare(sampler, saved, ctx: ResumeContext) -> None:
    """Before the workers fork: make the sampler's workers resumable (with their states)."""
    if not is_async_sampler(sampler):
        install(sampler, None if saved is None else saved.get("workers"), ctx.handlers)


def parallel_sampler_capture(sampler, ctx: ResumeContext) -> dict:
    if is_async_sampler(sampler):
        return {}
    return {"workers": capture_workers(sampler)}


def parallel_sampler_restore(sampler, saved, ctx: ResumeContext) -> None:
    # The workers got their states before they forked (prepare); say what they lack.
    if is_async_sampler(sampler):
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


def parallel_sampler_check(sampler, ctx: ResumeContext) -> list[str]:
    # The workers check their own envs: a throwaway env built here would draw
    # from the run's RNGs (rlpyt's AtariEnv resets, with np.random, when built).
    if is_async_sampler(sampler):
        return []   # Said by the async sampler's check.
    return check_workers(sampler)
