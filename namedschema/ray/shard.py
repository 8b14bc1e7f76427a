"""One shard of a sharded replay: a namedschema replay buffer and the consistent-cut protocol.

:class:`ReplayShard` is the class each Ray actor of
:class:`~namedschema.ray.ShardedReplay` runs (an ordinary, one-call-at-a-time actor),
and a plain Python class otherwise, so the protocol is testable without Ray.

Writers (the driver, or any copy of the ``ShardedReplay`` handle in another
actor) number their ``extend`` calls ``0, 1, 2, ...`` and send call ``seq`` of
writer ``w`` to shard ``route(w, seq)``. A shard applies each writer's calls in
``seq`` order: one that arrives early (after a retry, say) is kept until the
calls routed to it before it have arrived. So ``applied[w]`` (the last ``seq``
applied) says exactly which of ``w``'s calls the shard holds.

A checkpoint is a *cut*: for every writer ``w`` a number ``cut[w]``, the same on
every shard, such that each shard holds exactly ``w``'s calls up to ``cut[w]``.
It is taken in steps, driven by the owner of the ``ShardedReplay``:

``freeze()``
    from now on, keep every arriving call instead of applying it; return
    ``applied``. The owner takes ``cut[w]`` as the largest ``applied[w]`` over
    all shards: every call of ``w`` up to it was made before that one, so it
    has reached, or will reach, its shard.
``snapshot(cut, path)``
    apply the kept calls within the cut; if some are still on their way,
    return ``None`` (the owner asks again shortly: the shard takes calls in
    between); else start a background save of the buffer to ``path`` (it
    returns once the changed bytes are copied aside, or a fork holds the
    snapshot), apply the kept calls past the cut and take calls again.
``finish(path)``
    wait for that save to be written and synced.

So a checkpoint never holds a writer's later call without its earlier ones,
whichever shards they went to. A writer that dies with calls in flight may
leave a gap: its later calls on that shard are never applied; after
``CUT_WAIT_SECONDS`` the owner saves anyway (``give_up=True``) and names the
writer in the manifest.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from .._core.tree import is_named
from ..errors import FormatError
from ..training.replay import PrioritizedReplayBuffer, ReplayBuffer

__all__ = ["ReplayShard", "route", "last_routed", "ordered_rows", "CUT_WAIT_SECONDS"]

# How long the owner waits for a call within the cut that has not arrived. Only a
# writer that died while its calls were in flight makes it wait that long; its
# lost calls are then lost from the live replay as well as from the checkpoint.
CUT_WAIT_SECONDS = 30.0


def route(writer: int, seq: int, num_shards: int) -> int:
    """The shard that call ``seq`` of ``writer`` goes to."""
    return (writer + seq) % num_shards


def last_routed(writer: int, upto: int, shard: int, num_shards: int) -> int:
    """The last call ``<= upto`` of ``writer`` routed to ``shard``; -1 if none."""
    first = (shard - writer) % num_shards
    if upto < first:
        return -1
    return upto - (upto - first) % num_shards


def ordered_rows(state: dict[str, Any], ranks: np.ndarray) -> tuple[Any, np.ndarray | None]:
    """The rows of a replay buffer's ``state_dict()`` at ``ranks`` (0 = the oldest row
    stored), and their priorities after ``alpha`` (None for a uniform buffer)."""
    size, cursor, storage = int(state["size"]), int(state["cursor"]), state["storage"]
    capacity = _rows_of(storage)
    oldest = cursor if size == capacity else 0
    where = (oldest + np.asarray(ranks, np.int64)) % capacity
    prios = None
    if "sum_tree" in state:
        tree = state["sum_tree"]
        prios = np.asarray(tree[tree.shape[0] // 2 + where], np.float64)
    return storage[where], prios


def _rows_of(storage: Any) -> int:
    for value in storage:
        if value is None:
            continue
        return _rows_of(value) if is_named(value) else int(np.shape(value)[0])
    raise ValueError("a replay buffer's storage has no arrays")


def _tree_root(tree: np.ndarray) -> float:
    # The trees of PrioritizedReplayBuffer keep their root in node 1.
    return float(tree[1])


class ReplayShard:
    """A replay buffer shard: ``extend``/``sample``/``update_priorities`` and the cut."""

    def __init__(self, spec: dict[str, Any], index: int, num_shards: int, seed: Any) -> None:
        """A shard of ``spec["capacity"]`` rows; with capacity None, one whose buffer
        :meth:`load` makes from a shard file (a restore: nothing is allocated before
        the file is checked)."""
        self.index = index
        self.num_shards = num_shards
        self.prioritized = bool(spec["prioritized"])
        self.buffer: ReplayBuffer
        if spec.get("capacity") is None:
            self.capacity = 0
        else:
            self.capacity = int(spec["capacity"])
            if self.prioritized:
                self.buffer = PrioritizedReplayBuffer(
                    spec["example"], self.capacity, alpha=spec["alpha"], beta=spec["beta"],
                    seed=seed)
            else:
                self.buffer = ReplayBuffer(spec["example"], self.capacity, seed=seed)
        self.applied: dict[int, int] = {}
        self._pending: dict[int, dict[int, Any]] = {}   # writer -> seq -> batch, not applied
        self._frozen = False
        self._cut: dict[int, int] | None = None
        self._saving: Any = None           # the background save snapshot() started

    # -- data path -------------------------------------------------------------------

    def _next(self, writer: int) -> int:
        """The call of ``writer`` this shard applies next."""
        last = self.applied.get(writer)
        if last is None:
            return (self.index - writer) % self.num_shards
        return last + self.num_shards

    def _drain(self, writer: int) -> None:
        """Apply ``writer``'s waiting calls in order, as far as the cut allows."""
        pending = self._pending.get(writer)
        while pending:
            seq = self._next(writer)
            if seq not in pending or (self._frozen and (
                    self._cut is None or seq > self._cut.get(writer, -1))):
                break
            self.buffer.extend(pending.pop(seq))
            self.applied[writer] = seq
        if pending is not None and not pending:
            del self._pending[writer]

    def extend(self, batch: Any, writer: int, seq: int) -> None:
        """Append a batch (call ``seq`` of ``writer``), or keep it until its turn."""
        if seq < self._next(writer) or seq in self._pending.get(writer, ()):
            raise ValueError(f"replay shard {self.index}: call {seq} of writer {writer} "
                             "arrived twice")
        self._pending.setdefault(writer, {})[seq] = batch
        self._drain(writer)

    def stats(self) -> tuple[int, float, float]:
        """``(rows, total priority, least priority)``; priorities after ``alpha``."""
        if not self.prioritized:
            return len(self.buffer), float(len(self.buffer)), 1.0
        state = self.buffer.state_dict()
        return len(self.buffer), _tree_root(state["sum_tree"]), _tree_root(state["min_tree"])

    def sample(self, count: int, beta: float | None = None) -> Any:
        """``count`` rows by this shard's generator: the batch, and for a prioritized
        shard also ``(local indices, priorities after alpha)``."""
        if not self.prioritized:
            return self.buffer.sample(count)
        buffer = self.buffer
        assert isinstance(buffer, PrioritizedReplayBuffer)
        if beta is not None:
            buffer.beta = beta
        batch, index, _ = buffer.sample(count)
        tree = buffer.state_dict()["sum_tree"]
        return batch, index, tree[tree.shape[0] // 2 + index]

    def update_priorities(self, index: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of rows ``index`` (a prioritized shard only)."""
        buffer = self.buffer
        assert isinstance(buffer, PrioritizedReplayBuffer)
        buffer.update_priorities(index, priorities)

    def set_beta(self, beta: float) -> None:
        """Set the importance-sampling exponent (no-op when not prioritized)."""
        if isinstance(self.buffer, PrioritizedReplayBuffer):
            self.buffer.beta = beta

    # -- the cut ---------------------------------------------------------------------

    def freeze(self) -> dict[int, int]:
        """Hold arriving calls from now on; the last call applied, per writer."""
        if self._frozen:
            raise RuntimeError(f"replay shard {self.index}: a checkpoint is already under way")
        self._frozen, self._cut = True, None
        return dict(self.applied)

    def snapshot(self, cut: dict[int, int], path: str, give_up: bool = False,
                 compression: Any = None) -> dict[str, Any] | None:
        """Bring this shard to ``cut``; ``None`` while calls within it are on their way
        (unless ``give_up``); else save to ``path`` (with ``compression``) and take
        calls again."""
        if not self._frozen:
            raise RuntimeError(f"replay shard {self.index}: snapshot without freeze")
        self._cut = cut
        for writer in list(self._pending):
            self._drain(writer)
        missing = self._behind(cut)
        if missing and not give_up:
            return None
        try:
            started = time.perf_counter()
            from ..checkpoint import save
            self._saving = save(self.state(), path, incremental=True, background=True,
                                compression=compression)
            return {"shard": self.index, "rows": len(self.buffer), "path": path,
                    "held": time.perf_counter() - started, "missing_writers": missing}
        finally:
            self.thaw()

    def finish(self, path: str) -> dict[str, Any]:
        """Wait for the background write :meth:`snapshot` started; what it wrote."""
        handle, self._saving = self._saving, None
        if handle is None:
            raise RuntimeError(f"replay shard {self.index}: no save to finish")
        started = time.perf_counter()
        handle.wait()
        return {"shard": self.index, "bytes": os.path.getsize(path),
                "seconds": time.perf_counter() - started}

    def thaw(self) -> None:
        """Take calls again (also after a checkpoint that failed on another shard)."""
        self._frozen, self._cut = False, None
        for writer in list(self._pending):
            self._drain(writer)

    def _behind(self, cut: dict[int, int]) -> list[int]:
        """Writers with calls within ``cut``, routed here, that have not arrived."""
        return [w for w, upto in cut.items()
                if self.applied.get(w, -1) < last_routed(w, upto, self.index, self.num_shards)]

    # -- state -----------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a shard file holds: the buffer's state and where the shard sits."""
        return {"buffer": self.buffer.state_dict(), "shard": self.index,
                "num_shards": self.num_shards,
                "applied": {str(w): seq for w, seq in self.applied.items()}}

    def load(self, path: str, expect: dict[str, Any]) -> int:
        """Make this shard's buffer from a shard file written by :meth:`snapshot`.

        The file is read with its checksums verified, checked against ``expect``
        (what the manifest says of this shard: see
        :func:`namedschema.ray._files.expected_shard`), and its whole buffer
        state checked by ``from_state_dict`` (trees included); the loaded arrays
        become the buffer's own. Raises FormatError before anything changes.
        """
        from ..checkpoint import load
        from ..errors import BufferShapeError
        from ._files import check_loaded_shard
        where = f"replay shard {self.index}: {path!r}"
        saved = load(path, verify=True)
        state = check_loaded_shard(saved, expect, where, os.path.getsize(path))
        try:
            applied = {int(w): int(seq) for w, seq in saved["applied"].items()}
        except (TypeError, ValueError):
            raise FormatError(f"{where}: the record of the calls applied is not writer "
                              "ids and call numbers") from None
        cls = PrioritizedReplayBuffer if self.prioritized else ReplayBuffer
        try:
            buffer = cls.from_state_dict(state)
        except BufferShapeError as exc:
            raise FormatError(f"{where}: {exc}") from exc
        self.buffer, self.capacity, self.applied = buffer, buffer.capacity, applied
        return len(buffer)

    def rows(self, start: int, stop: int) -> tuple[Any, np.ndarray | None]:
        """Rows ``start:stop`` in the order they were written (oldest first), with their
        priorities after ``alpha`` (None for a uniform shard): for re-sharding."""
        stop = min(stop, len(self.buffer))
        return ordered_rows(self.buffer.state_dict(), np.arange(start, stop))

    def put_rows(self, batch: Any, priorities: np.ndarray | None, alpha: float) -> None:
        """Append rows taken from another shard, keeping their priorities."""
        buffer = self.buffer
        start = buffer.cursor
        buffer.extend(batch)
        if priorities is not None and isinstance(buffer, PrioritizedReplayBuffer) and len(
                priorities):
            where = (start + np.arange(len(priorities))) % buffer.capacity
            # update_priorities takes priorities before alpha
            base = priorities ** (1.0 / alpha) if alpha > 0 else np.ones_like(priorities)
            buffer.update_priorities(where, base)

    def ping(self) -> int:
        """The shard's index: answers once the actor is up."""
        return self.index
