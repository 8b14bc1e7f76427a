"""Process-wide state: the one lock, the one fork hook and the one exit hook.

Some modules keep state between calls (the files a save is writing, what the last save
of a file wrote, a writer thread). Each registers here what a forked child must reset
and what must run when the interpreter exits; this module installs the only
``os.register_at_fork`` hook and the only ``atexit`` hook of namedschema, and runs the
registered callbacks in the order written below, whatever the order of imports.

LOCK            the lock of the registries that need no lock of their own: held for a
                few dict operations only, never across I/O or a wait (it is one lock
                for all of them); a fork child gets a new one before any reset runs
on_fork_child   register ``name``'s reset for a forked child
at_exit         register ``name``'s callback for interpreter exit
registered      the names registered so far, in the order they run

A reset runs in the child only (the parent keeps its state); it must not wait for
another thread (none of the parent's threads exist in the child) and may take LOCK.
An error in one reset or exit callback is reported on stderr and the others still run.

This is a leaf: it imports nothing of namedschema.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from collections.abc import Callable

__all__ = ["LOCK", "FORK_ORDER", "EXIT_ORDER", "on_fork_child", "at_exit", "registered"]

# Who may register, in the order the callbacks run. A forked child resets the
# low-level records first (shared memory, the saves in flight), then what saves left
# behind, then the snapshot machinery; a new name is added here, where it belongs.
FORK_ORDER = (
    "buffer.shared_memory",     # the shared-memory lock
    "checkpoint._write",        # per-path save locks, saves in flight
    "checkpoint._background:background",  # the writer thread and its queue
    "checkpoint._incremental",  # locked descriptors, finishing threads
    "checkpoint._tracking:baselines",  # what the last save of each file wrote
    "checkpoint._squeezed",     # chunk checksums of compressed files (tokens dropped)
    "checkpoint._tracking:tracking",  # spare copies for page comparison
    "checkpoint._tracking:writeprotect",  # pages watched for writes
    "checkpoint._background:forked",  # the snapshot child's forker
    "checkpoint._tracking:writelog",  # ranges rewritten, for the audit
)
# At exit: background saves are written, then incremental saves finish (their journals
# go), then check-resume's recorder writes the run's end after every save's record. (With
# a hook each, the order was the reverse of the imports': RunCheckpoint's recorder ran
# after the saves, rlpyt's before the incremental ones.)
EXIT_ORDER = (
    "checkpoint._background:background",
    "checkpoint._incremental",
    "training.audit",
)

LOCK = threading.RLock()
_fork: dict[str, Callable[[], None]] = {}
_exit: dict[str, Callable[[], None]] = {}


def _register(table: dict[str, Callable[[], None]], order: tuple[str, ...], name: str,
              callback: Callable[[], None]) -> None:
    if name not in order:
        raise ValueError(f"namedschema._process: {name!r} is not in the order of callbacks "
                         f"({', '.join(order)}); add it there")
    with LOCK:
        table[name] = callback


def on_fork_child(name: str, reset: Callable[[], None]) -> None:
    """Call ``reset`` in every child this process forks (``name``: a FORK_ORDER entry).

    Registering a name again replaces its reset.
    """
    _register(_fork, FORK_ORDER, name, reset)


def at_exit(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` when the interpreter exits (``name``: an EXIT_ORDER entry).

    Registering a name again replaces its callback.
    """
    _register(_exit, EXIT_ORDER, name, callback)


def registered() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names with a fork reset, and those with an exit callback, in running order."""
    return (tuple(n for n in FORK_ORDER if n in _fork),
            tuple(n for n in EXIT_ORDER if n in _exit))


def _run(table: dict[str, Callable[[], None]], order: tuple[str, ...], when: str) -> None:
    for name in order:
        callback = table.get(name)
        if callback is None:
            continue
        try:
            callback()
        except Exception:  # the others must still run
            sys.stderr.write(f"namedschema: the {when} callback of {name} failed:\n"
                             + traceback.format_exc())


def _after_fork_in_child() -> None:
    # Another of the parent's threads may have held the lock at the fork: never released
    # here, so the child gets a new one before any reset takes it.
    global LOCK
    LOCK = threading.RLock()
    _run(_fork, FORK_ORDER, "fork-child")


def _at_interpreter_exit() -> None:
    _run(_exit, EXIT_ORDER, "exit")


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_interpreter_exit)
