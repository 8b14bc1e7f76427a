"""Background saves: the writer thread and the snapshot child."""

from __future__ import annotations

import ctypes
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .. import _process
from ..errors import BackgroundSaveError, SaveError
from . import _incremental, _tracking
from . import _write as writer
from ._header import SaveRecord, read_header
from ._storage import CompactCopy, MemorySpan, RawBytes
from ._write import handles, register, serialized, settle, written

__all__ = ["fork", "reap", "CHILD_FAILED", "BackgroundSave", "SaveError", "BackgroundSaveError",
           "start", "settle", "written", "serialized", "freeze_shared"]


# ---------------------------------------- forked
#
# The snapshot child of a background save: forked from one long-lived thread, reporting by pipe.
#
# The child sees the caller's memory as it was at the fork (copy-on-write),
# runs the save's job (file I/O and CRC-32s only) and writes a pickled report
# (``("ok", value)`` or ``("error", exception, traceback text)``) to a pipe
# before it exits. It dies with the process (``PR_SET_PDEATHSIG``) and ignores
# Ctrl-C (the caller decides whether to stop).
#
# fork      fork a child that runs a job; its pid and the read end of its pipe
# reap      wait for the child to end; its exit status and its report's bytes

_PR_SET_PDEATHSIG = 1
CHILD_FAILED = 70           # exit status of a child that could not report
_MAX_REPORT = 48 * 1024     # a report fits in a pipe's buffer (64 KiB on Linux)
_MAX_TEXT = 16 * 1024       # of a traceback, the last this many characters


# A request to the forking thread: the job, the box for its (pid, read end) or
# exception, and the event set once the box holds it.
_ForkRequest = tuple[Callable[[], Any], list[tuple[int, int] | BaseException], threading.Event]


class _Forker:
    """One long-lived thread makes every snapshot child.

    ``PR_SET_PDEATHSIG`` fires when the thread that forked a child ends, not
    the process: forking from a thread that lives as long as the process
    keeps the child alive exactly as long as the process.
    """

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[_ForkRequest] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def fork(self, job: Callable[[], Any]) -> tuple[int, int]:
        """Fork a child that runs ``job`` and reports through a pipe; (pid, read end)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="namedschema-snapshot")
                self._thread.start()
        box: list[tuple[int, int] | BaseException] = []
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


_process.on_fork_child("checkpoint._background:forked", _forget_forker_in_child)


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


# ---------------------------------------- background
#
# Background saves: ``save(..., background=True)`` returns once a consistent snapshot exists.
#
# Three ways to a snapshot, chosen per save (``save_in_background``):
#
# * **A small state copied aside** (at most SMALL_STATE bytes of data): the
#   caller copies every block; the writer thread writes the copy as a
#   foreground save would. No fork (its page tables cost more than the copy).
# * **Changes copied aside** (an incremental save of a file this process saved,
#   with write-protect tracking): the caller asks the kernel which pages were
#   written since the last save (re-arming the tracking in the same call) and
#   copies those pages; a thread then compares them with the file, journals
#   and writes the changed bytes in place and syncs (``_incremental.py``). The
#   caller pays for the scan and the copy of what changed.
# * **A fork** (full saves; incremental saves under other tracking): the child
#   sees the caller's memory as it was at that instant (copy-on-write) and
#   writes the checkpoint (data, checksums, fsync, rename or journal) while the
#   caller goes on. Everything that touches the caller's objects (encoding the
#   graph, torch tensors, pickling) happens before the fork; the child only
#   reads memory, computes CRC-32s and does file I/O, so locks that other
#   threads of the caller held at the fork (a torch thread pool, a logging
#   lock) are never needed in it. Write protection is armed in the caller at
#   the fork and the child's file recorded as the baseline once it reports, so
#   the next save is incremental. Memory that a fork does not freeze (shared
#   mappings, which other processes write) is copied aside first. The caller
#   pays for the fork (page tables: about 1 ms per GiB in transparent huge
#   pages, 25 ms per GiB in 4 KiB pages) and, while the child runs, a page
#   copy at the first write to each page.
#
# Order and errors. Saves of one path (background or not) run one after the
# other: a save first waits for the background save of the same path before it
# (a lock per path held from the start of a save to its snapshot). An error of
# the writer is raised by :meth:`BackgroundSave.wait`, or else by the next save
# of that path, or else written to stderr at interpreter exit (which first waits
# for every background save); it is never dropped. A writer child dies with the
# process (``PR_SET_PDEATHSIG``, forked from one long-lived thread): a killed
# training process leaves the last complete checkpoint (and a temporary file
# or journal that the next save or load settles).
#
# BackgroundSave    the handle: ``wait()``, ``done()``
# SaveError         (namedschema.errors) the writer died, or its error could not come back
# save_in_background  the background half of ``save``: picks the route below
# start             run a save job in a snapshot child (``forked``), return its handle
# start_thread      run the rest of a save whose changes are copied aside, in a thread
# incremental_job   the child's job of an incremental-mode save (compares), with its tracking
# settle, written, serialized  (``inflight``, re-exported) the per-path order of saves
# freeze_shared     copies of the blocks that live in shared memory
#
# A fork child of this process starts with no background save: the parent's
# handles and locks (``inflight``) and queued writes are dropped in it
# (``load``, saves and exit there never wait for the parent's writers).

#: States with at most this many bytes of data are copied aside whole and written by
#: the writer thread (a fork of a large process costs more than copying them).
SMALL_STATE = 8 * 2**20


class BackgroundSave:
    """A save running in the background: ``wait()`` for it, ``done()`` to ask.

    Returned by ``save(..., background=True)`` as soon as the snapshot exists:
    later writes to the saved arrays do not reach the file.

    Attributes:
        path: the checkpoint path, as given.
        pid: the writer process (None when the save ran in the caller).
        stall: seconds ``save`` held the caller (encode, copies, snapshot).
        started: ``time.perf_counter()`` when the snapshot was taken.
        ended: ``time.perf_counter()`` when the writer had ended (None before).
    """

    def __init__(self, path: str, pid: int | None, stall: float, started: float):
        self.path, self.pid, self.stall, self.started = path, pid, stall, started
        self.ended: float | None = None
        self._finished = threading.Event()
        self._record: SaveRecord | None = None
        self._error: BaseException | None = None
        self._reported = False

    def done(self) -> bool:
        """Whether the save has ended (completed or failed); never blocks."""
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> SaveRecord | None:
        """Wait for the save to end; return what it wrote.

        Returns the record an incremental save wrote (``kind``,
        ``bytes_written``, ...), or None for a plain full save.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
            Exception: the error the save raised in the background (an
                ``OSError`` such as a full disk, with a note naming the
                background save), or
                :class:`~namedschema.SaveError` if its writer
                died. Raised once: later calls return None.
        """
        if not self._finished.wait(timeout):
            raise TimeoutError(f"the background save of {self.path!r} is still running "
                               f"after {timeout} s")
        self._raise_unreported()
        return self._record

    def _raise_unreported(self) -> None:
        if self._error is not None and not self._reported:
            self._reported = True
            raise self._error

    def _finish(self, record: SaveRecord | None, error: BaseException | None) -> None:
        self.ended = time.perf_counter()
        self._record, self._error = record, error
        self._finished.set()

    def __repr__(self) -> str:
        state = "running" if not self.done() else ("failed" if self._error else "done")
        return f"<BackgroundSave {self.path!r} {state}>"


# --------------------------------------------------------------------------
# Fork children and exit (one save of a path at a time: ``inflight``)
# --------------------------------------------------------------------------

def _forget_in_child() -> None:
    """A fork child has no writer thread of its own (``inflight`` drops the parent's handles).

    The parent's queued writes are the parent's to do; a lock held by another of
    the parent's threads at the fork is never released here.
    """
    global _writer_lock, _writer, _writes
    _writer_lock = threading.Lock()
    _writer, _writes = None, queue.SimpleQueue()


def _wait_at_exit() -> None:
    """At interpreter exit: let every background save finish; report the failed ones."""
    for handle in handles():
        if not isinstance(handle, BackgroundSave):
            continue
        handle._finished.wait()
        if handle._error is not None and not handle._reported:
            handle._reported = True
            sys.stderr.write(f"namedschema: the background save of {handle.path!r} failed "
                             f"({_what_is_left(handle.path)}):\n"
                             + "".join(traceback.format_exception(handle._error)))
            sys.stderr.flush()
    _stop_writer()


_process.at_exit("checkpoint._background:background", _wait_at_exit)


def _stop_writer() -> None:
    """End the writer thread once its queue is empty, and wait for it.

    Left running into interpreter shutdown, the daemon thread could still be
    dropping the last save's data (a torch tensor's C++ destructor, say) when
    the interpreter ends it; a thread ended inside C++ code aborts the whole
    process ("terminate called without an active exception", exit status 134)
    after a run that succeeded.
    """
    global _writer, _writes
    with _writer_lock:
        writer, jobs = _writer, _writes
        if writer is None or not writer.is_alive():
            return
        jobs.put(None)
        # A save begun after this (by a later exit hook) gets a thread of its own.
        _writer, _writes = None, queue.SimpleQueue()
    writer.join(timeout=60)


# --------------------------------------------------------------------------
# Shared memory, which a fork does not freeze
# --------------------------------------------------------------------------

def _shared_ranges() -> list[tuple[int, int]]:
    try:
        with open("/proc/self/maps", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[1][3:4] == b"s":
            lo, hi = (int(x, 16) for x in parts[0].split(b"-"))
            out.append((lo, hi))
    return out


def freeze_shared(sources: tuple[Any, ...]) -> tuple[Any, ...]:
    """``sources`` with every memory span that touches a shared mapping replaced by a copy.

    A fork child reads shared memory live, as other processes (or threads) write it.
    """
    shared = _shared_ranges()
    if not shared:
        return sources
    out = []
    for source in sources:
        if isinstance(source, MemorySpan) and any(
                lo < source.lo + source.nbytes and hi > source.lo for lo, hi in shared):
            raw = (ctypes.c_char * source.nbytes).from_address(source.lo)
            source = RawBytes(bytes(source.lead) + bytes(memoryview(raw).cast("B")))
        out.append(source)
    return tuple(out)


# --------------------------------------------------------------------------
# The snapshot child
# --------------------------------------------------------------------------

def _collect(handle: BackgroundSave, pid: int, read_end: int,
             on_done: Callable[[Any], None]) -> None:
    """In a waiter thread: reap the child, read its report, finish the handle."""
    status, data = reap(pid, read_end)
    record, error, extra = None, None, None
    try:
        report = pickle.loads(data) if data else None
    except Exception:
        report = None
    if report is not None and report[0] == "ok" and status in (0, None):
        record, extra = report[1]
    elif report is not None and report[0] == "error":
        error = report[1]
        if not isinstance(error, BaseException):
            error = SaveError(f"the background save of {handle.path!r} failed "
                                        f"({_what_is_left(handle.path)}):\n"
                                        f"{report[2]}")
        else:
            error.add_note(f"raised by the background save of {handle.path!r} in process "
                           f"{pid}; {_what_is_left(handle.path)}")
    else:
        how = ("ended without a report" if status is None
               else f"was killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exited with status {os.waitstatus_to_exitcode(status)}")
        error = SaveError(f"the process {pid} writing the background save of "
                                    f"{handle.path!r} {how} before it finished; "
                                    f"{_what_is_left(handle.path)}")
    try:
        on_done(extra if error is None else None)
    except BaseException as exc:  # (reported like the writer's own errors)
        error = error or exc
    handle._finish(record, error)


def _what_is_left(path: str) -> str:
    """What a failed save left at ``path``: the previous checkpoint, or none at all."""
    if os.path.exists(path):
        return "the file holds the last complete checkpoint"
    return f"no checkpoint was written: there is none at {path!r} yet"


def start(path: str, job: Callable[[], tuple[SaveRecord | None, Any]], began: float,
          on_done: Callable[[Any], None] = lambda _extra: None) -> BackgroundSave:
    """Run ``job`` (the save's writing) in a snapshot child of this process; return its handle.

    ``job`` returns ``(record, extra)``; ``on_done(extra)`` runs here once the
    child succeeded, ``on_done(None)`` once it failed, before the handle is
    done. The caller holds ``serialized(path)``; ``began`` is when its save
    started (``time.perf_counter()``), for the handle's ``stall``. Where a
    child cannot be made (no ``fork``, or it failed), ``job`` runs here.
    """
    snapshot = time.perf_counter()
    try:
        if not hasattr(os, "fork"):
            raise OSError("no fork on this platform")
        pid, read_end = fork(job)
    except OSError as exc:
        warnings.warn(f"namedschema: cannot start a background save of {path!r} ({exc}); "
                      "saving in the foreground", RuntimeWarning, stacklevel=3)
        try:
            record, extra = job()
        except BaseException:
            on_done(None)
            raise
        on_done(extra)
        handle = BackgroundSave(path, None, time.perf_counter() - began, snapshot)
        handle._finish(record, None)
        return handle
    handle = BackgroundSave(path, pid, time.perf_counter() - began, snapshot)
    register(handle, handle._finished)
    threading.Thread(target=_collect, args=(handle, pid, read_end, on_done), daemon=True,
                     name="namedschema-background-save").start()
    return handle


def start_thread(path: str, rest: Callable[[], SaveRecord | None],
                 began: float) -> BackgroundSave:
    """Run ``rest`` (a save whose data is already copied aside) in the writer thread.

    One long-lived thread writes them in order (starting a thread per save
    would make the caller wait for it to start, which takes milliseconds on a
    busy machine).
    """
    handle = BackgroundSave(path, None, 0.0, time.perf_counter())
    register(handle, handle._finished)
    with _writer_lock:
        global _writer
        if _writer is None or not _writer.is_alive():
            _writer = threading.Thread(target=_write_in_order, args=(_writes,), daemon=True,
                                       name="namedschema-background-save")
            _writer.start()
        _writes.put((handle, rest))    # (under the lock: _stop_writer swaps the queue)
    handle.stall = time.perf_counter() - began
    return handle


# A save for the writer thread: its handle and the rest of its writing.
_WriteJob = tuple[BackgroundSave, Callable[[], SaveRecord | None]]
_writer_lock = threading.Lock()
_writer: threading.Thread | None = None
_writes: queue.SimpleQueue[_WriteJob | None] = queue.SimpleQueue()
_process.on_fork_child("checkpoint._background:background", _forget_in_child)


def _write_in_order(jobs: queue.SimpleQueue[_WriteJob | None]) -> None:
    while True:
        job = jobs.get()
        if job is None:         # _stop_writer, at interpreter exit
            return
        handle, rest = job
        try:
            record = rest()
        except BaseException as exc:
            exc.add_note(f"raised by the background save of {handle.path!r} "
                         f"({_what_is_left(handle.path)})")
            handle._finish(None, exc)
        else:
            handle._finish(record, None)
        del job, handle, rest   # (as in _Forker._serve: keep nothing of a save once written)


def incremental_job(enc: Any, plan: Any, path: str, progress: bool, compression: Any = None
                    ) -> tuple[Callable[[], tuple[SaveRecord, tuple[Any, ...]]],
                               Callable[[tuple[Any, ...] | None], None]]:
    """``(job, on_done)`` of an incremental-mode save written by a snapshot child.

    The child saves incrementally by comparing its snapshot with the file
    (writing only what differs, or a full checkpoint when the file does not
    fit or too much changed): it has no tracking of its own (its baselines
    are dropped at the fork), so it compares rather than arming anything.
    With write protection, tracking is armed here, at the snapshot's instant;
    the child reports its checkpoint id and ``stat``, and ``on_done`` records
    the baseline of that file (the next save then writes only what changed
    since the snapshot). Shared memory, copied aside before the fork, is
    compared too: it is written incrementally, not in full each time. The
    child's rewrites of a watched file (``writelog``) come back in its report.
    """
    real, parent = os.path.realpath(path), os.getpid()
    armed = _tracking.mode() == "writeprotect"
    known = _tracking.arm_for_full_save(plan.sources, [b.nbytes for b in plan.blocks]) \
        if armed or compression is not None else []

    def job() -> tuple[SaveRecord, tuple[Any, ...]]:
        if os.getpid() != parent:    # (not when it runs here, fork having failed)
            _tracking.compare_only()
        record = _incremental.save_encoded(enc, plan, path, progress, compression)
        _incremental.wait(path)   # its sync thread: the child ends after it
        with open(real, "rb", buffering=0) as f:
            st = os.fstat(f.fileno())
            done = (read_header(f, path, st.st_size).description.checkpoint_id, st,
                    _tracking.take(real) if _tracking.watching(real) else None)
        if compression is not None:   # the chunks' checksums, the parent's next baseline
            from . import _squeezed as squeezed
            return record, (*done, squeezed.report(path))
        return record, done

    def on_done(written: tuple[Any, ...] | None) -> None:
        _tracking.add(real, None if written is None else written[2])
        if compression is not None:
            from . import _squeezed as squeezed
            squeezed.adopt(path, None if written is None else written[3], known)
            return
        now = os.stat(real) if os.path.exists(real) else None
        if armed and written and now and \
                _tracking.identity(now) == _tracking.identity(written[1]):
            _tracking.record(real, now, written[0], known)
            _tracking.warm_spare(plan.data_bytes)   # the next save copies into warm pages
        else:
            _tracking.forget(real)
    return job, on_done


# --------------------------------------------------------------------------
# Choosing the route
# --------------------------------------------------------------------------

def save_in_background(enc: Any, plan: Any, path: str, progress: bool, in_place: bool,
                       began: float, compression: Any = None) -> BackgroundSave:
    """The background half of ``save(..., background=True)`` (``serialized(path)`` held).

    * States with at most SMALL_STATE bytes of data: copied aside whole (the
      snapshot), then written by the writer thread exactly as the foreground
      save would write them (incrementally, comparing with the file, when
      ``in_place``). No fork: the caller pays for the encoding and a copy.
    * Incremental saves with write protection: the changes are copied aside,
      the writer thread writes them (``_incremental.begin_background``).
    * Otherwise a snapshot child, shared memory copied aside first.

    ``compression`` is passed to the writer as it is.
    """
    if plan.data_bytes <= SMALL_STATE:
        copy = replace(plan, sources=_copied(plan.sources))
        if in_place:
            return start_thread(path, lambda: _incremental.save_encoded(
                enc, copy, path, progress, compression), began)

        def write_copy() -> None:
            writer.write(enc, copy, path, writer.PLAIN, progress=progress,
                         compression=compression)
        return start_thread(path, write_copy, began)
    frozen = replace(plan, sources=freeze_shared(plan.sources))
    if in_place:
        rest = _incremental.begin_background(enc, frozen, path, progress, compression)
        if rest is not None:       # the changes are copied aside: the thread writes them
            return start_thread(path, rest, began)
        job, on_done = incremental_job(enc, frozen, path, progress, compression)
        return start(path, job, began, on_done)

    def job_full() -> tuple[None, None]:
        writer.write(enc, frozen, path, writer.PLAIN, progress=progress,
                     compression=compression)
        return None, None
    return start(path, job_full, began)


def _copied(sources: tuple[Any, ...]) -> tuple[Any, ...]:
    """``sources`` as private copies of their bytes: the snapshot of a small state."""
    out = []
    for source in sources:
        if isinstance(source, MemorySpan):
            raw = (ctypes.c_char * source.nbytes).from_address(source.lo).raw
            source = RawBytes(bytes(source.lead) + raw if source.lead else raw)
        elif isinstance(source, CompactCopy):
            source = RawBytes(b"".join(bytes(chunk) for chunk, _copy in source.chunks()))
        out.append(source)
    return tuple(out)
