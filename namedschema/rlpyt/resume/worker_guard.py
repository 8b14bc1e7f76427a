"""Failures of parallel-sampler workers: never a hang, never an orphan.

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
  :class:`SamplerWorkerError` that names the worker and the cause (a signal
  whose handler raises it; nothing else of the run's changes).

SamplerWorkerError  a sampler worker failed (raised in the main process)
die_with_parent     in a worker: end when the main process ends
report              in a worker: send the failure to the main process
Watch               in the main process: watch the workers
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait as wait_for_ready

from ...errors import SamplerWorkerError

__all__ = ["SamplerWorkerError", "die_with_parent", "report", "Watch"]

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


def _watch_parent(parent_pid):
    def watch():
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, name="namedschema-parent-watch", daemon=True).start()


def report(errors, rank: int, during: str, exc: BaseException) -> None:
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

    def __init__(self, sampler, errors, stopping, what):
        self._sampler = sampler
        self._errors = errors
        self._stopping = stopping
        self._what = what                  # what the run is doing: "sampling"
        self.failure: SamplerWorkerError | None = None
        self._done = threading.Event()
        self._signal = None
        self._previous = None
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

    def _install_signal(self):
        sig = getattr(signal, "SIGRTMAX", None)
        if sig is None:
            return
        sig = sig - 3
        if signal.getsignal(sig) not in (signal.SIG_DFL, None):
            return   # Someone uses it: breaking the barriers must do.
        self._previous = signal.signal(sig, self._on_signal)
        self._signal = sig

    def _on_signal(self, signum, frame):
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

    def _run(self):
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

    def _message(self, timeout):
        try:
            return self._errors.get(timeout=timeout) if timeout else \
                self._errors.get_nowait()
        except Exception:  # queue.Empty, or a closed queue
            return None

    def _fail(self, workers, worker, message):
        ranks = {w.pid: i for i, w in enumerate(workers)}
        if message is not None:
            rank, pid, during, cause, text = message
            error = SamplerWorkerError(
                f"sampler worker {rank} (pid {pid}) failed during {during}: {cause}\n"
                f"the worker's traceback:\n{text}")
        else:
            pid = worker.pid
            error = SamplerWorkerError(
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


def _stop(workers):
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


def _running(pid) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def _break(sampler):
    """Break rlpyt's barriers: whoever waits in them (or will) raises at once."""
    ctrl = getattr(sampler, "ctrl", None)
    for name in ("barrier_in", "barrier_out"):
        barrier = getattr(ctrl, name, None) if ctrl is not None else None
        if barrier is not None:
            try:
                barrier.abort()
            except Exception:  # a barrier already broken
                pass
