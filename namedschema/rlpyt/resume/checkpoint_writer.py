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


class CheckpointWriter:
    """Saves resume checkpoints to one path; keeps the background save in flight."""

    def __init__(self, path: str, metadata: dict[str, str], *, incremental: bool = True,
                 background: bool = True):
        self.path, self.metadata = path, metadata
        self.incremental, self.background = bool(incremental), bool(background)
        self.pending: Any = None      # the BackgroundSave in flight, if any

    def save(self, obj: Any) -> None:
        """Save ``obj`` (waits for the previous background save first, raising its error)."""
        # checkpoint.save looked up at each call: tests wrap it.
        self.pending = checkpoint.save(obj, self.path, allow_pickle=True,
                                       metadata=self.metadata,
                                       incremental=self.incremental,
                                       background=self.background)

    def wait(self) -> None:
        """Wait for the background save in flight; raise its error."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.wait()
