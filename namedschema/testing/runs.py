"""One run of the user's command for the resume check: its own directory, its lives, its kills.

A run is the command started in a fresh working directory (a copy of the
command's directory) with ``NAMEDSCHEMA_AUDIT`` set, and restarted there
after each SIGKILL until it finishes. Each start ("life") runs in its own
session, so a kill reaches its whole process group (sampler workers, data
loader workers) and nothing it started outlives it. The checker learns what
the run does from the audit file (events appended by the checkpoint
writers) and wakes on a pipe the run writes a byte to after each event: it
never sleeps to wait for one.

Run            a run's directory, audit file and lives; ``start``, ``wait_for``, ``kill``
Life           one start of the command: pid, exit status, where it was killed, its events
Event          one audit event (a parsed line)
ENV_CHECK_DIR  the variable naming the run's directory, for scripts that write elsewhere
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..training.audit import ENV_AUDIT, ENV_NOTIFY, PROGRESS_SUFFIX

__all__ = ["Run", "Life", "Event", "ENV_CHECK_DIR", "COPY_IGNORED"]

ENV_CHECK_DIR = "NAMEDSCHEMA_CHECK_DIR"
# Left out of the copy of the command's directory: version control, environments, caches.
COPY_IGNORED = (".git", ".hg", ".svn", ".venv", "venv", "__pycache__", ".tox", ".nox",
                ".mypy_cache", ".pytest_cache", ".ruff_cache", "node_modules")
MAX_EVENT_LINE = 64 * 2**20     # an audit line longer than this is not the checker's
_REAP_SECONDS = 30.0            # how long a killed process group may take to vanish
_TAIL = 4000                    # of a life's output, the last characters kept for reports


@dataclass
class Event:
    """One audit event: ``kind`` (start, save-begin, save-end, checkpoint, restore, end,
    save-failed, audit-error), the step, the writer's pid and time, and the digests."""

    kind: str
    step: int | None
    pid: int
    t: float
    objects: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Life:
    """One start of the command within a run."""

    pid: int
    returncode: int | None = None      # None: still running; negative: killed by a signal
    killed: bool = False               # SIGKILLed by the checker
    kill_step: int | None = None       # the step the run was at when killed (if it said)
    kill_during_write: int | None = None  # the step whose checkpoint was being written
    timed_out: bool = False
    output: str = ""                   # the tail of its stdout and stderr
    events: list[Event] = field(default_factory=list)  # what its checkpoint writer said
    writer: int | None = None          # the pid that writes its events (its first start)


def _parse(line: bytes) -> Event | None:
    try:
        raw = json.loads(line)
        return Event(kind=str(raw["event"]), step=raw.get("step"), pid=int(raw["pid"]),
                     t=float(raw["t"]), objects=raw.get("objects"), error=raw.get("error"))
    except (ValueError, KeyError, TypeError):
        return None   # a line cut by a kill, or not ours


class Run:
    """The command run in ``root/name``: a copy of ``source`` as working directory."""

    def __init__(self, root: str, name: str, command: Sequence[str], source: str,
                 env: Mapping[str, str], timeout: float, copy: bool = True) -> None:
        self.name, self.command, self.timeout = name, list(command), timeout
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.work = os.path.join(self.dir, "work")
        if copy:
            shutil.copytree(source, self.work, symlinks=True,
                            ignore=shutil.ignore_patterns(*COPY_IGNORED, os.path.basename(root)))
            self.cwd = self.work
        else:
            os.makedirs(self.work)
            self.cwd = source
        self.audit = os.path.join(self.dir, "audit.jsonl")
        self.env = dict(env, **{ENV_AUDIT: self.audit, ENV_CHECK_DIR: self.work})
        self.lives: list[Life] = []
        self._proc: subprocess.Popen[Any] | None = None
        self._pipe: int | None = None
        self._offset, self._partial = 0, b""
        self._started = 0.0
        self.tick: Callable[[Run], None] | None = None   # called while waiting (progress)

    # -- a life -----------------------------------------------------------------------

    def start(self) -> Life:
        """Start the command (its own session); returns the new life."""
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)   # a full pipe never blocks the run
        # closed in the finally below, once the child holds its own descriptor
        log = open(os.path.join(self.dir, f"life-{len(self.lives)}.log"), "wb")  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(
                self.command, cwd=self.cwd, env=dict(self.env, **{ENV_NOTIFY: str(write_end)}),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(write_end,))
        finally:
            os.close(write_end)
            log.close()
        self._pipe = read_end
        self._offset = os.path.getsize(self.audit) if os.path.exists(self.audit) else 0
        self._partial = b""
        self._started = time.monotonic()
        life = Life(pid=self._proc.pid)
        self.lives.append(life)
        return life

    def new_events(self) -> list[Event]:
        """This life's events appended since the last call."""
        try:
            with open(self.audit, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        life = self.lives[-1]
        found = []
        for event in map(_parse, lines):
            if event is None:
                continue
            if life.writer is None and event.kind == "start":
                life.writer = event.pid   # the command itself, or what a wrapper started
            if event.pid == life.writer:  # not a worker process that audits on its own
                found.append(event)
        life.events.extend(found)
        return found

    def wait_for(self, wanted: Callable[[Event], bool] | None = None,
                 until: float | None = None) -> Event | str:
        """Wait for an event ``wanted`` accepts, the end of the life, ``until`` (a
        ``time.monotonic()``) or the life's timeout; returns the event, or "exit",
        "until" or "timeout"."""
        assert self._proc is not None and self._pipe is not None
        deadline = self._started + self.timeout
        while True:
            for event in self.new_events():
                if wanted is not None and wanted(event):
                    return event
            if self._proc.poll() is not None:
                if wanted is not None:
                    for event in self.new_events():
                        if wanted(event):
                            return event
                return "exit"
            if self.tick is not None:
                self.tick(self)
            now = time.monotonic()
            if until is not None and now >= until:
                return "until"
            if now >= deadline:
                return "timeout"
            limit = min(deadline, until if until is not None else deadline) - now
            # The pipe wakes us at each event; the cap notices an exit that leaves
            # the pipe open (a worker still holding it).
            ready, _, _ = select.select([self._pipe], [], [], min(limit, 0.25))
            if ready:
                try:
                    if not os.read(self._pipe, 65536):   # every writer closed it
                        self._proc.wait(timeout=max(0.0, min(limit, 0.25)))
                except subprocess.TimeoutExpired:
                    pass

    def kill(self) -> None:
        """SIGKILL the life's whole process group, record where it was, reap it."""
        assert self._proc is not None
        life = self.lives[-1]
        _kill_group(self._proc.pid)
        self._proc.wait()
        life.killed = True
        life.kill_step = self._progress()
        self.new_events()
        begun = [e.step for e in life.events if e.kind == "save-begin"]
        ended = {e.step for e in life.events if e.kind in ("save-end", "save-failed")}
        if begun and begun[-1] not in ended:
            life.kill_during_write = begun[-1]
        self._finish()

    def finish(self) -> Life:
        """Wait for the life to end (killing it at its timeout); reap what it left."""
        assert self._proc is not None
        result = self.wait_for(None)
        life = self.lives[-1]
        if result == "timeout":
            life.timed_out = True
            _kill_group(self._proc.pid)
        self._proc.wait()
        self.new_events()
        self._finish()
        return life

    def _finish(self) -> None:
        assert self._proc is not None
        life = self.lives[-1]
        life.returncode = self._proc.returncode
        _kill_group(self._proc.pid)    # workers it left behind
        _reap_group(self._proc.pid)
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        life.output = _tail(os.path.join(self.dir, f"life-{len(self.lives) - 1}.log"))

    def current_step(self) -> int | None:
        """The step the current life said it is at (None: it has not said yet)."""
        return self._progress()

    def _progress(self) -> int | None:
        try:
            with open(self.audit + PROGRESS_SUFFIX, "rb") as f:
                raw = f.read(8)
        except FileNotFoundError:
            return None
        if len(raw) != 8 or self.lives[-1].writer is None:
            return None
        step = int.from_bytes(raw, "little", signed=True)
        return step if step >= 0 else None

    @property
    def elapsed(self) -> float:
        """Seconds since the current life started."""
        return time.monotonic() - self._started


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid`` (Linux /proc; else probe)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(int(entry))
    return members


def _reap_group(pgid: int) -> None:
    """Wait until nothing of the group is left (SIGKILL again meanwhile)."""
    deadline = time.monotonic() + _REAP_SECONDS
    delay = 0.001
    while _group_members(pgid):
        if time.monotonic() > deadline:
            raise ProcessLookupError(f"check-resume: processes of group {pgid} survived "
                                     f"SIGKILL for {_REAP_SECONDS:.0f} s")
        _kill_group(pgid)
        time.sleep(delay)   # the kernel tears them down; nothing to wake us up
        delay = min(delay * 2, 0.1)


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - _TAIL))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
