"""The snapshot child of a background save: forked from one long-lived thread, reporting by pipe.

The child sees the caller's memory as it was at the fork (copy-on-write),
runs the save's job (file I/O and CRC-32s only) and writes a pickled report
(``("ok", value)`` or ``("error", exception, traceback text)``) to a pipe
before it exits. It dies with the process (``PR_SET_PDEATHSIG``) and ignores
Ctrl-C (the caller decides whether to stop).

fork      fork a child that runs a job; its pid and the read end of its pipe
reap      wait for the child to end; its exit status and its report's bytes
"""

from __future__ import annotations

import ctypes
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from .. import _process

__all__ = ["fork", "reap", "CHILD_FAILED"]

_PR_SET_PDEATHSIG = 1
CHILD_FAILED = 70           # exit status of a child that could not report
_MAX_REPORT = 48 * 1024     # a report fits in a pipe's buffer (64 KiB on Linux)
_MAX_TEXT = 16 * 1024       # of a traceback, the last this many characters


class _Forker:
    """One long-lived thread makes every snapshot child.

    ``PR_SET_PDEATHSIG`` fires when the thread that forked a child ends, not
    the process: forking from a thread that lives as long as the process
    keeps the child alive exactly as long as the process.
    """

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def fork(self, job: Callable[[], Any]) -> tuple[int, int]:
        """Fork a child that runs ``job`` and reports through a pipe; (pid, read end)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="namedschema-snapshot")
                self._thread.start()
        box: list = []
        ready = threading.Event()
        self._requests.put((job, box, ready))
        ready.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def _serve(self) -> None:
        while True:
            job, box, ready = self._requests.get()
            try:
                box.append(_fork_child(job))
            except BaseException as exc:  # fork failed (no memory, no processes left)
                box.append(exc)
            ready.set()
            # This thread lives as long as the process: holding the last job while it
            # waits would keep the saved object's graph (and all it reaches) alive.
            del job, box, ready


def _fork_child(job: Callable[[], Any]) -> tuple[int, int]:
    parent = os.getpid()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, which ends with os._exit
        os.close(read_end)
        _child_main(job, write_end, parent)
    os.close(write_end)
    return pid, read_end


def _child_main(job: Callable[[], Any], write_end: int, parent: int) -> None:  # pragma: no cover
    status = CHILD_FAILED
    try:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:
            os._exit(CHILD_FAILED)  # the caller died before the prctl
        # Ctrl-C reaches the whole process group: the caller decides whether to stop,
        # and a caller that exits waits for this save or takes it down with it.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            payload = pickle.dumps(("ok", job()))
        except BaseException as exc:
            text = "".join(traceback.format_exception(exc))[-_MAX_TEXT:]
            try:
                payload = pickle.dumps(("error", exc, text))
                pickle.loads(payload)
            except BaseException:
                payload = b""
            if not payload or len(payload) > _MAX_REPORT:
                payload = pickle.dumps(("error", None, text))
        view = memoryview(payload)
        while view.nbytes:
            view = view[os.write(write_end, view):]
        status = 0
    finally:
        os._exit(status)



def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


_forker = _Forker()


def _forget_forker_in_child() -> None:
    # The thread that forks is the parent's (gone here); its lock and queue may be held.
    global _forker
    _forker = _Forker()


_process.on_fork_child("checkpoint.forked", _forget_forker_in_child)


def fork(job: Callable[[], Any]) -> tuple[int, int]:
    """Fork a snapshot child that runs ``job`` and reports; ``(pid, read end of its pipe)``."""
    return _forker.fork(job)


def reap(pid: int, read_end: int) -> tuple[int | None, bytes]:
    """Wait for the child ``pid`` to end: its wait status (None if someone else reaped it)
    and the bytes of its report (closes ``read_end``).

    The child exits after writing its report (less than a pipe's buffer), so
    the report is read after ``waitpid``: another process forked meanwhile
    (a sampler worker) may hold a copy of the pipe's write end, so the end of
    the pipe would not say that the child ended.
    """
    status: int | None
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:  # reaped by someone else (SIGCHLD ignored, a waitpid(-1))
        status = None
        while _exists(pid):
            time.sleep(0.01)
    os.set_blocking(read_end, False)
    chunks = []
    with open(read_end, "rb", buffering=0) as f:
        while True:
            try:
                chunk = f.read(1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return status, b"".join(chunks)
