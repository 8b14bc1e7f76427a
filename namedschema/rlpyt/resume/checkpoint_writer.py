"""How ``resumable`` writes its checkpoints: incremental and in the background by default.

With ``background=True`` each checkpoint returns to training once a snapshot
of the state exists (:func:`namedschema.save` with ``background=True``); the
next checkpoint and the end of training wait for it, so its error is raised
there, in the training process. ``incremental=False, background=False``
writes a whole new file at each checkpoint while training waits.
"""

from __future__ import annotations

from typing import Any

from ... import checkpoint
from ...training import audit as _audit


class CheckpointWriter:
    """Saves resume checkpoints to one path; keeps the background save in flight."""

    def __init__(self, path: str, metadata: dict[str, str], *, incremental: bool = True,
                 background: bool = True):
        self.path, self.metadata = path, metadata
        self.incremental, self.background = bool(incremental), bool(background)
        self.pending: Any = None      # the BackgroundSave in flight, if any
        self.audit = _audit.recorder()   # check-resume's audit records, or None

    def save(self, obj: Any) -> None:
        """Save ``obj`` (waits for the previous background save first, raising its error)."""
        if self.audit is not None:
            self.audit.save_begin(obj["itr"])
        # checkpoint.save looked up at each call: tests wrap it.
        self.pending = checkpoint.save(obj, self.path, allow_pickle=True,
                                       metadata=self.metadata,
                                       incremental=self.incremental,
                                       background=self.background)
        if self.audit is not None:
            self.audit.record_file(obj["itr"], self.path, _audited, lambda d: int(d["itr"]),
                                   allow_pickle=True)

    def wait(self) -> None:
        """Wait for the background save in flight; raise its error."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.wait()


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
