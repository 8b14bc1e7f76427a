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
raises in the main process (below).

WorkerChannel           the queues and flag shared with the workers
install                 give a sampler the resumable collector classes
capture_workers         run a capture round, return every worker's state
check_workers           run the check round: why the workers' envs are not exact
skip_env_states         the workers' envs start anew (a resume with new env arguments)
finish                  after training: stop watching (and stop workers left waiting)

Failures of parallel-sampler workers are never a hang, never an orphan.
rlpyt's main process waits for its sampler workers in barriers and
semaphores that have no timeout: a worker that dies leaves the main process
waiting forever, and a main process that dies leaves its workers blocked (or
running) forever. For runs made resumable, this module makes both ends see
the other's death:

* in each worker, :func:`die_with_parent` asks Linux to SIGKILL the worker when
  the thread that forked it ends (``PR_SET_PDEATHSIG``; that thread is the one
  that runs rlpyt's ``startup`` and ``train``), or, elsewhere and when the
  fork came from another thread than the main one, watches the parent from a
  daemon thread;
* a worker's exception in the code namedschema wraps (resume, capture,
  ``collect_batch``, ``reset_if_needed``, evaluation) is sent, with its
  traceback, through an error queue (:func:`report`) before it ends the worker;
* in the main process, a :class:`Watch` thread waits on the workers' sentinels
  (which never reaps them) and the error queue; when a worker ends while
  the run still needs it, it stops the other workers, breaks rlpyt's
  barriers, and interrupts the main thread wherever it waits with a
  :class:`WorkerError` that names the worker and the cause (a signal
  whose handler raises it; nothing else of the run's changes).

WorkerError         a sampler worker failed (raised in the main process)
die_with_parent     in a worker: end when the main process ends
report              in a worker: send the failure to the main process
Watch               in the main process: watch the workers
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from multiprocessing.connection import wait as wait_for_ready
from types import FrameType
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict, cast

from ...errors import SamplerWorkerError, WorkerError
from ...state.rng import rng_state, set_rng_state
from .table import HandlerTable, ResumeContext, fresh_copy, make_traj_infos, traj_infos_state

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

__all__ = ["WorkerChannel", "install", "capture_workers", "check_workers", "finish",
           "skip_env_states", "WorkerError", "SamplerWorkerError", "PARALLEL_SAMPLER", "die_with_parent",
           "report", "Watch"]

PARALLEL_SAMPLER = "rlpyt.samplers.parallel.base.ParallelSamplerBase"
_AGENT_MODELS = "rlpyt.agents.base.BaseAgent"   # models are shared, saved by the main
_CAPTURE, _CHECK = 1, 2
_POLL = 0.1

# In a worker process: its evaluation collector (rlpyt keeps it in a local variable).
_IN_WORKER: dict[str, Any] = {}

# rlpyt's samplers, collectors, agents and their classes are untyped (rlpyt has no
# type information): Any below.


class _WorkerState(TypedDict):
    """A worker's state, as a capture round sends it and a resume hands it back."""

    collector: dict[str, Any]
    agent_inputs: Any
    traj_infos: list[dict[str, Any]]
    agent: dict[str, Any] | None
    eval_collector: NotRequired[dict[str, Any] | None]
    rng: dict[str, Any]


# A worker's failure, as report() sends it: (rank, pid, during, cause, traceback).
_Failure = tuple[int | str, int, str, str, str]


class _Worker(Protocol):
    """A started sampler worker (a ``multiprocessing.Process``)."""

    @property
    def pid(self) -> int: ...

    @property
    def sentinel(self) -> int: ...


class WorkerChannel:
    """What the main process and its sampler workers share (made before the fork)."""

    def __init__(self, handlers: HandlerTable) -> None:
        self.handlers = handlers             # the main process's handler table (forked)
        # worker -> main: (rank, state or check result)
        self.queue: Queue[tuple[int, Any]] = mp.Queue()
        self.errors: Queue[_Failure] = mp.Queue()        # worker -> main: failures
        self.round = mp.RawValue("b", 0)     # _CAPTURE or _CHECK while a round runs
        self.new_envs = mp.RawValue("b", 0)  # set: envs start anew (new env arguments)
        self.restore_states: dict[int, _WorkerState] = {}  # rank -> state; inherited by fork
        self.parent_pid = os.getpid()
        self.fork_thread_is_main = threading.current_thread() is threading.main_thread()
        self.watch: Watch | None = None


@contextlib.contextmanager
def _reported(channel: WorkerChannel, rank: int | str, during: str) -> Iterator[None]:
    """A worker's exception goes to the main process (then ends the worker as usual)."""
    try:
        yield
    except BaseException as exc:
        report(channel.errors, rank, during, exc)
        raise


def _worker_context(channel: WorkerChannel, collector: Any, new_envs: bool = False
                    ) -> ResumeContext:
    return ResumeContext(channel.handlers, traj_info_cls=collector.TrajInfoCls,
                         new_envs=new_envs)


def _worker_state(ctx: ResumeContext, collector: Any, agent_inputs: Any,
                  traj_infos: Iterable[Mapping[str, Any]]) -> _WorkerState:
    agent = getattr(collector, "agent", None)
    agent_state = None
    if agent is not None:
        agent_state = {k: v for k, v in ctx.capture(agent).items() if k != _AGENT_MODELS}
    evaluator = _IN_WORKER.get("eval_collector")
    return {"collector": ctx.capture(collector), "agent_inputs": agent_inputs,
            "traj_infos": traj_infos_state(traj_infos), "agent": agent_state,
            "eval_collector": None if evaluator is None else ctx.capture(evaluator),
            "rng": rng_state()}


def _worker_check(ctx: ResumeContext, collector: Any) -> list[str]:
    reasons = [f"{r} (in sampler workers)" for r in ctx.check(collector)]
    evaluator = _IN_WORKER.get("eval_collector")
    if evaluator is not None:
        reasons += [f"{r} (evaluation env in sampler workers)" for r in ctx.check(evaluator)]
    return reasons


def _apply_worker_state(ctx: ResumeContext, collector: Any, saved: _WorkerState,
                        agent_inputs: Any, traj_infos: list[Any]) -> tuple[Any, list[Any]]:
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
    evaluator_saved = saved.get("eval_collector")
    if evaluator is not None and evaluator_saved is not None:
        ctx.restore(evaluator, evaluator_saved,
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


def resumable_collector_class(cls: type[Any], channel: WorkerChannel) -> type[Any]:
    """``cls`` with a ``collect_batch`` that takes part in rounds and restores."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        die_with_parent(channel.parent_pid, channel.fork_thread_is_main)
        with _reported(channel, kwargs.get("rank", "?"), "its start"):
            cls.__init__(self, *args, **kwargs)

    def collect_batch(self: Any, agent_inputs: Any, traj_infos: list[Any], itr: int) -> Any:
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

    def reset_if_needed(self: Any, agent_inputs: Any) -> Any:
        with _reported(channel, self.rank, "an env reset"):
            return cls.reset_if_needed(self, agent_inputs)

    return type(cls.__name__, (cls,), {"__init__": __init__,
                                       "collect_batch": collect_batch,
                                       "reset_if_needed": reset_if_needed,
                                       "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__,
                                       "_namedschema_resumable": True})


def resumable_eval_collector_class(cls: type[Any], channel: WorkerChannel) -> type[Any]:
    """``cls`` that the worker's state reaches, and whose failures are reported."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        with _reported(channel, kwargs.get("rank", "?"), "its start"):
            cls.__init__(self, *args, **kwargs)
        _IN_WORKER["eval_collector"] = self

    def collect_evaluation(self: Any, itr: int) -> Any:
        with _reported(channel, self.rank, "evaluation"):
            return cls.collect_evaluation(self, itr)

    return type(cls.__name__, (cls,), {"__init__": __init__,
                                       "collect_evaluation": collect_evaluation,
                                       "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__,
                                       "_namedschema_resumable": True})


def install(sampler: Any, saved_workers: Iterable[_WorkerState] | None,
            handlers: HandlerTable) -> WorkerChannel:
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


def skip_env_states(sampler: object) -> None:
    """The workers' envs start anew instead of taking their saved states (the run was
    resumed with new env arguments); before the workers' first round."""
    channel = getattr(sampler, "_namedschema_channel", None)
    if channel is not None:
        channel.new_envs.value = 1


def _workers_running(sampler: object) -> bool:
    ctrl = getattr(sampler, "ctrl", None)
    return getattr(sampler, "_namedschema_channel", None) is not None and ctrl is not None \
        and bool(getattr(sampler, "workers", None)) and not ctrl.quit.value


def _watch(sampler: Any) -> Watch:
    channel: WorkerChannel = sampler._namedschema_channel
    if channel.watch is None:
        ctrl = sampler.ctrl
        channel.watch = Watch(sampler, channel.errors, lambda: bool(ctrl.quit.value),
                              "sampling")
    return channel.watch


def _round(sampler: Any, mode: int, doing: str) -> list[Any]:
    """One pass of the workers' barriers in which each sends one reply; by rank."""
    channel: WorkerChannel = sampler._namedschema_channel
    ctrl = sampler.ctrl
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
    replies: dict[int, Any] = {}
    while len(replies) < len(sampler.workers):
        try:
            rank, reply = channel.queue.get(timeout=_POLL)
        except queue.Empty:
            watch.check()
            continue
        replies[rank] = reply
    watch.doing("sampling")
    return [replies[rank] for rank in sorted(replies)]


def capture_workers(sampler: object) -> list[_WorkerState] | None:
    """Every worker's state, between two iterations; None when the workers are gone."""
    if not _workers_running(sampler):
        return None
    return _round(sampler, _CAPTURE, "a capture round")


def check_workers(sampler: object) -> list[str]:
    """What cannot be restored exactly of the workers' envs (a round; draws nothing)."""
    if not _workers_running(sampler):
        return []
    return sorted({reason for reply in _round(sampler, _CHECK, "the check at start")
                   for reason in reply})


def finish(sampler: object, failed: bool) -> WorkerError | None:
    """After training: stop watching; if training ``failed``, end the workers.

    rlpyt's workers are not daemons and wait in barriers: after an exception
    in the main process they would keep the interpreter from exiting. Returns
    the failure of a worker, if one failed.
    """
    channel: WorkerChannel | None = getattr(sampler, "_namedschema_channel", None)
    if channel is None or channel.watch is None:
        return None
    watch, channel.watch = channel.watch, None
    watch.close()
    if failed and getattr(sampler, "workers", None):
        watch.abandon()
    return watch.failure


# == failures: never a hang, never an orphan ==========================================

_PR_SET_PDEATHSIG = 1
_POLL = 0.1            # seconds between two looks at the error queue
_GRACE = 1.0           # seconds a failed worker's message may take to arrive
_STOP_OTHERS = 2.0     # seconds the other workers get to end on SIGTERM


# -- in the workers --------------------------------------------------------------------

def die_with_parent(parent_pid: int, fork_thread_is_main: bool) -> None:
    """End this worker (forked by ``parent_pid``) when its main process ends."""
    if sys.platform.startswith("linux") and fork_thread_is_main:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
        except (OSError, AttributeError):
            _watch_parent(parent_pid)
    else:
        _watch_parent(parent_pid)
    if os.getppid() != parent_pid:      # The parent ended before the request.
        os._exit(1)


def _watch_parent(parent_pid: int) -> None:
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, name="namedschema-parent-watch", daemon=True).start()


def report(errors: Queue[_Failure], rank: int | str, during: str, exc: BaseException) -> None:
    """Send a worker's failure (with its traceback) to the main process."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        errors.put((rank, os.getpid(), during, f"{type(exc).__name__}: {exc}", text))
        errors.close()
        errors.join_thread()   # Delivered before this process ends.
    except Exception:  # the worker is failing already; its stderr has it
        pass


# -- in the main process ---------------------------------------------------------------

def _exit_status(pid: int) -> str:
    """How process ``pid`` ended, without reaping it (rlpyt joins it later)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (OSError, AttributeError):
        return "it ended"
    if info is None:
        return "it ended"
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        try:
            name = signal.Signals(info.si_status).name
        except ValueError:
            name = str(info.si_status)
        return f"it was killed by {name}"
    return f"it exited with status {info.si_status}"


class Watch:
    """Watches a parallel sampler's workers from a daemon thread of the main process.

    ``stopping()`` says when the workers may end (rlpyt's shutdown sets its
    ``quit`` flag); ``failure`` holds the error once a worker failed, and every
    later :meth:`check` raises it.
    """

    def __init__(self, sampler: Any, errors: Queue[_Failure], stopping: Callable[[], bool],
                 what: str) -> None:
        self._sampler = sampler
        self._errors = errors
        self._stopping = stopping
        self._what = what                  # what the run is doing: "sampling"
        self.failure: WorkerError | None = None
        self._done = threading.Event()
        self._signal: int | None = None
        # signal.signal's previous handler: a function, SIG_DFL/SIG_IGN, or None
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None
        self._main: int = threading.main_thread().ident or 0
        if threading.current_thread() is threading.main_thread():
            self._install_signal()
        self._thread = threading.Thread(target=self._run, name="namedschema-worker-watch",
                                        daemon=True)
        self._thread.start()

    def doing(self, what: str) -> None:
        """Say what the workers are doing now (named in a failure's message)."""
        self._what = what

    # -- the interrupt of the main thread ----------------------------------------

    def _install_signal(self) -> None:
        sig = getattr(signal, "SIGRTMAX", None)
        if sig is None:
            return
        sig = sig - 3
        if signal.getsignal(sig) not in (signal.SIG_DFL, None):
            return   # Someone uses it: breaking the barriers must do.
        self._previous = signal.signal(sig, self._on_signal)
        self._signal = sig

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.failure is not None:
            raise self.failure

    def close(self) -> None:
        """Stop watching; in the main thread, give the signal back (no failure pending)."""
        self._done.set()
        if self._signal is not None and threading.current_thread() is threading.main_thread():
            signal.signal(self._signal, self._previous)
            self._signal = None

    def check(self) -> None:
        """Raise the failure, if a worker failed."""
        if self.failure is not None:
            raise self.failure

    # -- the thread ---------------------------------------------------------------

    def _run(self) -> None:
        workers = list(self._sampler.workers)
        sentinels = {w.sentinel: w for w in workers}
        while not self._done.is_set():
            ready = wait_for_ready(list(sentinels), timeout=_POLL)
            message = self._message(0.0)
            if self._done.is_set() or (self._stopping() and message is None):
                return
            if message is None and not ready:
                continue
            if message is None:
                message = self._message(_GRACE)
            worker = sentinels.get(ready[0]) if ready else None
            self._fail(workers, worker, message)
            return

    def _message(self, timeout: float) -> _Failure | None:
        try:
            return self._errors.get(timeout=timeout) if timeout else \
                self._errors.get_nowait()
        except Exception:  # queue.Empty, or a closed queue
            return None

    def _fail(self, workers: list[_Worker], worker: _Worker | None,
              message: _Failure | None) -> None:
        ranks = {w.pid: i for i, w in enumerate(workers)}
        if message is not None:
            rank, pid, during, cause, text = message
            error = WorkerError(
                f"sampler worker {rank} (pid {pid}) failed during {during}: {cause}\n"
                f"the worker's traceback:\n{text}")
        else:
            # Without a message, _run found this worker's sentinel ready: never None.
            pid = cast(_Worker, worker).pid
            error = WorkerError(
                f"sampler worker {ranks.get(pid, '?')} (pid {pid}) ended during "
                f"{self._what}: {_exit_status(pid)} (its own output may say more)")
        self.failure = error
        if self._signal is not None:
            try:
                signal.pthread_kill(self._main, self._signal)
            except (OSError, ProcessLookupError):
                pass
        # In its own thread: the main thread may hold a barrier's lock, waiting for
        # the dead worker in rlpyt's barrier (the signal above gets it out).
        threading.Thread(target=_break, args=(self._sampler,), daemon=True,
                         name="namedschema-break-barriers").start()
        _stop(workers)

    def abandon(self) -> None:
        """End the workers: the run failed in the main process, nobody will need them."""
        _break(self._sampler)
        _stop(list(self._sampler.workers))


def _stop(workers: Iterable[_Worker]) -> None:
    """End the workers still running: without their peer they would wait forever."""
    alive = [w for w in workers if _running(w.pid)]
    for w in alive:
        try:
            os.kill(w.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + _STOP_OTHERS
    for w in alive:
        wait_for_ready([w.sentinel], timeout=max(0.0, deadline - time.monotonic()))
        if _running(w.pid):
            try:
                os.kill(w.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _running(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def _break(sampler: object) -> None:
    """Break rlpyt's barriers: whoever waits in them (or will) raises at once."""
    ctrl = getattr(sampler, "ctrl", None)
    for name in ("barrier_in", "barrier_out"):
        barrier = getattr(ctrl, name, None) if ctrl is not None else None
        if barrier is not None:
            try:
                barrier.abort()
            except Exception:  # a barrier already broken
                pass
