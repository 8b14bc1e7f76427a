"""How ``resumable`` writes its checkpoints: incremental and in the background by default.

With ``background=True`` each checkpoint returns to training once a snapshot
of the state exists (:func:`namedschema.save` with ``background=True``); the
next checkpoint and the end of training wait for it, so its error is raised
there, in the training process. ``incremental=False, background=False``
writes a whole new file at each checkpoint while training waits.

What each checkpoint wrote is kept (``CheckpointStat``, read with
:func:`checkpoint_history`) and logged at debug level (logger
``namedschema.rlpyt``); when incremental checkpoints keep falling back to
full saves, a :class:`~namedschema.ResumeWarning` says why.

CheckpointStat      what one checkpoint wrote: kind, bytes, why it was full
checkpoint_history  the checkpoints a resumable runner wrote so far
CheckpointWriter    the save call resumable makes
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any

from ... import checkpoint
from ...checkpoint import _incremental
from ...errors import FormatError, ResumeError, ResumeWarning
from ...training import audit as _audit

__all__ = ["CheckpointStat", "checkpoint_history", "CheckpointWriter"]

_log = logging.getLogger("namedschema.rlpyt")
#: This many full saves in a row (after the first checkpoint) give a warning.
FULL_STREAK = 2
_CHEAPER_FULL = "more changed than an incremental save is worth"


@dataclass(frozen=True)
class CheckpointStat:
    """What one checkpoint of a ``resumable`` run wrote.

    ``kind`` is ``"full"`` (a whole new file) or ``"incremental"`` (changes
    written in place); ``bytes_written`` the data bytes it wrote,
    ``data_bytes`` the checkpoint's data, ``file_bytes`` the file's size
    after it; ``reason`` says why an incremental-mode checkpoint was full,
    when known.
    """

    kind: str
    bytes_written: int
    data_bytes: int
    file_bytes: int
    reason: str | None = None

    @property
    def fraction(self) -> float:
        """``bytes_written`` as a share of the file."""
        return self.bytes_written / max(self.file_bytes, 1)


def checkpoint_history(runner: Any) -> tuple[CheckpointStat, ...]:
    """The checkpoints ``runner`` (made ``resumable``) wrote so far, oldest first.

    A background checkpoint is listed once it ended (the next checkpoint or
    the end of training waits for it).

    Raises:
        namedschema.errors.ResumeError: ``runner`` was not made resumable.
    """
    resume = getattr(runner, "_namedschema_resume", None)
    if resume is None:
        raise ResumeError("checkpoint_history: the runner was not made resumable()")
    return tuple(resume.writer.history)


class CheckpointWriter:
    """Saves resume checkpoints to one path; keeps the background save in flight."""

    def __init__(self, path: str, metadata: dict[str, str], *, incremental: bool = True,
                 background: bool = True, compression: Any = None) -> None:
        self.path, self.metadata, self.compression = path, metadata, compression
        self.incremental, self.background = bool(incremental), bool(background)
        self.pending: Any = None      # the BackgroundSave in flight, if any
        self.history: list[CheckpointStat] = []
        self._streak = 0              # full saves in a row after the first checkpoint
        self._warned: str | None = None

        self.audit = _audit.recorder()   # check-resume's audit records, or None

    def save(self, obj: Any) -> None:
        """Save ``obj`` (waits for the previous background save first, raising its error)."""
        self.wait()
        if self.audit is not None:
            self.audit.save_begin(obj["itr"])
        # checkpoint.save looked up at each call: tests wrap it.
        self.pending = checkpoint.save(obj, self.path, allow_pickle=True,
                                       metadata=self.metadata,
                                       incremental=self.incremental,
                                       background=self.background,
                                       compression=self.compression)
        if self.pending is None:
            self._record(None)
        if self.audit is not None:
            self.audit.record_file(obj["itr"], self.path, _audited, lambda d: int(d["itr"]),
                                   allow_pickle=True)

    def wait(self) -> None:
        """Wait for the background save in flight; raise its error."""
        pending, self.pending = self.pending, None
        if pending is not None:
            self._record(pending.wait())

    def _record(self, saved: Any) -> None:
        try:
            size = os.stat(self.path).st_size
            if saved is None and self.incremental:
                saved = checkpoint.inspect(self.path).last_save
        except (OSError, FormatError):
            return   # replaced or removed meanwhile: nothing to say about it
        if saved is None:   # a plain save: the whole file
            stat = CheckpointStat("full", size, size, size)
        else:
            reason = _incremental.fallback_reason(self.path) if saved.kind == "full" else None
            if saved.kind == "full" and reason is None and not self.history:
                reason = "the first checkpoint of the file"
            stat = CheckpointStat(saved.kind, saved.bytes_written, saved.data_bytes, size,
                                  reason)
        self.history.append(stat)
        _log.debug("checkpoint %d to %s: %s, %d of %d bytes written (%.1f%% of the file)%s",
                   len(self.history), self.path, stat.kind, stat.bytes_written,
                   stat.file_bytes, 100 * stat.fraction,
                   f"; full because {stat.reason}" if stat.reason else "")
        self._warn_if_full(stat)

    def _warn_if_full(self, stat: CheckpointStat) -> None:
        if not self.incremental or len(self.history) < 2:
            return
        # A full save because most of the state changed is the cheaper save, not a miss.
        costlier = stat.reason is not None and stat.reason.startswith(_CHEAPER_FULL)
        self._streak = self._streak + 1 if stat.kind == "full" and not costlier else 0
        why = stat.reason or "unknown (the save ran in a snapshot process)"
        if self._streak >= FULL_STREAK and self._warned != why:
            self._warned = why
            warnings.warn(
                f"namedschema.rlpyt.resumable: the last {self._streak} checkpoints of "
                f"{self.path!r} were full saves, not incremental ones (each rewrote "
                f"{stat.bytes_written:,} bytes): {why}", ResumeWarning, stacklevel=5)


# The runner's wall-clock bookkeeping (rlpyt's log timers): kept, but never equal twice.
_WALL_CLOCK = ("times", "_cum_time", "_cum_eval_time")


def _audited(data: Any) -> dict[str, Any]:
    """The named objects of a resume checkpoint, for check-resume's audit record
    (less the runner's timers)."""
    state = dict(data["state"])
    runner = state.get("runner")
    if isinstance(runner, dict):
        state["runner"] = {key: {k: v for k, v in part.items() if k not in _WALL_CLOCK}
                           if isinstance(part, dict) else part for key, part in runner.items()}
    return {**state, "global_rngs": data["rng"]}
