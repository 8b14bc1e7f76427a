"""Saves in flight: what a save or a read of a path waits for before touching the file.

Every save and read of a path goes through here, plain ones included, so the
plain format needs nothing of the incremental or background machinery:

* **This process's background save of the path** (``background``): a save
  holds the path's lock (``serialized``) from its start to its snapshot and
  first waits for the background save before it (``settle``, which raises
  that save's unreported error); readers wait for it without raising
  (``written``), so a program reads what it saved.
* **An incremental save of another process** changing the file in place: it
  holds an exclusive ``flock``; readers hold a shared one (``reading``).
* **The journal of an interrupted incremental save** (``.<name>.journal``
  next to the real file): readers and saves look for it with one ``lstat``
  (``recover``) and only when one is there load ``incremental``, which
  finishes or discards it. A process that never saved incrementally and
  opens files without a journal never imports it.

recover       settle the journal an interrupted incremental save left, if any
reading       hold off incremental saves of an open file while reading it
serialized    the per-path lock a save holds until its snapshot exists
register      record a background save of a path (``background``)
settle        wait for the background save of a path; raise its unreported error
written       wait for the background save of a path, raising nothing
handles       the background saves registered (for the exit hook)

A fork child of this process starts with no background save: the parent's
handles and locks are dropped in it (saves, loads and exit there never wait
for the parent's writers).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from importlib import import_module
from typing import Any, Protocol

from .. import _process
from .atomic import is_file, journal_path

__all__ = ["recover", "reading", "serialized", "register",
           "settle", "written", "handles", "Handle"]


# --------------------------------------------------------------------------
# The journal of an interrupted incremental save
# --------------------------------------------------------------------------

def recover(path: str) -> None:
    """Finish (or discard) the journal an interrupted incremental save of ``path`` left.

    One ``lstat`` when there is none. Only a regular file at the journal's
    path is a journal (``incremental.recover`` reads and settles it, and
    waits first for this process's own save of ``path`` still finishing,
    whose journal is there until it has).

    Raises:
        FormatError: there is a journal to finish but the file is not writable.
    """
    if is_file(journal_path(path)):
        import_module("namedschema.checkpoint.incremental").recover(path)


@contextlib.contextmanager
def reading(f: Any, path: str) -> Iterator[None]:
    """Hold off incremental saves of the open checkpoint ``f`` while a loader reads it.

    Settles any journal first. Incremental saves lock the file exclusively
    while they change it in place, so a loader inside this block reads one
    consistent state. The lock is released on leaving the block (a map of
    the file keeps the descriptor open, so closing it would not).
    """
    locked = False
    for _ in range(3):
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
        except OSError:
            break  # file systems without locks: nothing to wait for
        locked = True
        if not is_file(journal_path(path)):
            break
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        locked = False
        recover(path)
    try:
        yield
    finally:
        if locked:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


# --------------------------------------------------------------------------
# This process's saves of a path: one at a time
# --------------------------------------------------------------------------

class Handle(Protocol):
    """What ``register`` keeps of a background save (``background.BackgroundSave``)."""

    path: str

    def wait(self, timeout: float | None = None) -> Any:
        """Wait for the save to end; raise its error once."""


# (the registries below are guarded by _process.LOCK; each path's save lock is its own)
_path_locks: dict[str, threading.Lock] = {}
_latest: dict[str, tuple[Handle, threading.Event]] = {}


def _key(path: str) -> str:
    return os.path.realpath(path)


@contextlib.contextmanager
def serialized(path: str) -> Iterator[None]:
    """Hold ``path``'s save lock: the previous background save of it has ended (see settle)."""
    key = _key(path)
    with _process.LOCK:
        lock = _path_locks.setdefault(key, threading.Lock())
    with lock:
        settle(path)
        yield


def register(handle: Handle, finished: threading.Event) -> None:
    """Record ``handle`` as the latest background save of its path; ``finished`` is set at its end."""
    with _process.LOCK:
        _latest[_key(handle.path)] = (handle, finished)


def settle(path: str) -> None:
    """Wait for this process's background save of ``path``; raise its error if unreported."""
    with _process.LOCK:
        entry = _latest.get(_key(path))
    if entry is not None:
        entry[0].wait()


def written(path: str) -> None:
    """Wait until this process's background save of ``path`` (if any) has ended.

    ``load``, ``inspect`` and ``verify`` call it, so a program reads what it
    saved, not the file as it was before. A failed save's error is left for
    ``wait()`` or the next save to raise: the file still holds the last
    complete checkpoint, which the reader gets.
    """
    with _process.LOCK:
        entry = _latest.get(_key(path))
    if entry is not None:
        entry[1].wait()


def handles() -> list[Handle]:
    """Every background save registered in this process (the latest of each path)."""
    with _process.LOCK:
        return [handle for handle, _finished in _latest.values()]


def _forget_in_child() -> None:
    """A fork child has no background save of its own: start it with none.

    The parent's handles are finished by the parent's threads, which the child
    does not have: waiting on them (``load`` via ``written``, the next save,
    exit) would hang for ever; a path's lock held by another of the parent's
    threads at the fork is never released here. (The child reads the file as its
    writer leaves it: a full save renames it whole, an incremental one holds
    the file's lock.)
    """
    _path_locks.clear()
    _latest.clear()


_process.on_fork_child("checkpoint.inflight", _forget_in_child)
