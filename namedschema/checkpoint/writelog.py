"""Which bytes of a checkpoint file its in-place saves rewrote, for readers that keep
what they computed from the file between saves (check-resume's audit digests).

A reader :func:`watch` es a file; from then on every incremental save of it in
this process (foreground, writer thread, or a snapshot child that reports
back) notes a :class:`Rewrite` before it writes a byte: the file's identity,
the checkpoint ids it goes from and to, and the byte ranges it writes. The
reader :func:`take` s them and knows that the rest of the file is as it read
it, provided the ids chain from the state it read to the state it finds
(anything else that changed the file, another process's save, a journal
replayed at recovery, a full save's new file, breaks the chain: the reader
then starts over). Unwatched files cost one dict lookup per save.

Rewrite   one in-place save: identity, checkpoint ids before and after, byte ranges
watch     keep the rewrites of a file from now on
take      the rewrites of a watched file since the last take (None: unknown)
note      (incremental saves) a rewrite is about to be written
add       rewrites a snapshot child noted (its report)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import _process

__all__ = ["Rewrite", "watch", "unwatch", "watching", "take", "note", "add", "MAX_PENDING"]

#: Rewrites kept per file between two takes; past this the log says it lost count.
MAX_PENDING = 256


@dataclass(frozen=True)
class Rewrite:
    """One in-place save of a file: it went from checkpoint ``before`` to ``after``,
    writing at most the bytes ``ranges`` (``(start, stop)`` file offsets)."""

    identity: tuple[int, int]            # (st_dev, st_ino)
    before: str
    after: str
    ranges: tuple[tuple[int, int], ...]


# (guarded by _process.LOCK) real path -> the rewrites noted since the last take; None: more than MAX_PENDING, or a
# save whose rewrites could not be known (a snapshot child that died).
_pending: dict[str, list[Rewrite] | None] = {}


def _forget_in_child() -> None:
    # A fork child keeps watching (a snapshot child reports its rewrites back), but starts
    # with none noted: the parent's are the parent's to take.
    for key in _pending:
        _pending[key] = []


_process.on_fork_child("checkpoint.writelog", _forget_in_child)


def watch(path: str | os.PathLike[str]) -> None:
    """Keep the rewrites of ``path`` (the file it names now) from now on."""
    key = os.path.realpath(path)
    with _process.LOCK:
        _pending.setdefault(key, [])


def unwatch(path: str | os.PathLike[str]) -> None:
    """Stop keeping the rewrites of ``path``."""
    with _process.LOCK:
        _pending.pop(os.path.realpath(path), None)


def watching(real: str) -> bool:
    """Whether the file at the real path ``real`` is watched (no lock: a hint)."""
    return real in _pending


def take(path: str | os.PathLike[str]) -> list[Rewrite] | None:
    """The rewrites of ``path`` noted since the last take, oldest first; None when they
    are not known (not watched, too many, or a save that could not report them)."""
    key = os.path.realpath(path)
    with _process.LOCK:
        if key not in _pending:
            return None
        found = _pending[key]
        _pending[key] = []
    return found


def _put(real: str, rewrites: list[Rewrite] | None) -> None:
    with _process.LOCK:
        if real not in _pending:
            return
        kept = _pending[real]
        if kept is None or rewrites is None or len(kept) + len(rewrites) > MAX_PENDING:
            _pending[real] = None
        else:
            kept.extend(rewrites)


def note(real: str, st: os.stat_result, before: str, after: str,
         pieces: Iterable[tuple[int, Any]], grown_from: int | None = None) -> None:
    """An in-place save of ``real`` (open as ``st``) from checkpoint ``before`` to
    ``after`` is about to write ``pieces`` (``(file offset, bytes-like, ...)``) and
    grow the file from ``grown_from`` bytes (None: it does not grow)."""
    if real not in _pending:
        return
    ranges = [(int(p[0]), int(p[0]) + memoryview(p[1]).nbytes) for p in pieces]
    if grown_from is not None:
        ranges.append((grown_from, 1 << 62))
    _put(real, [Rewrite((st.st_dev, st.st_ino), before, after, tuple(sorted(ranges)))])


def add(path: str | os.PathLike[str], rewrites: list[Rewrite] | None) -> None:
    """Rewrites noted elsewhere (a snapshot child's); None: a save whose rewrites are
    unknown (the next take says so)."""
    _put(os.path.realpath(path), rewrites)
