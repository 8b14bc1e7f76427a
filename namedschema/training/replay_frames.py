"""Frames-once replay: next observations read from the following row, each frame stored once.

A ``ReplayBuffer(..., frames_once=("obs", "next_obs"), n_envs=n)`` stores no
``next_obs`` array. Rows come ``n`` per env step (env ``k``'s step at offset
``k``, as ``extend`` of a vector env's step writes them), so the next observation
of row ``p`` is the ``obs`` of row ``p + n`` (modulo the capacity) whenever that
row holds, byte for byte, the ``next_obs`` the row was given. Where it does not
(an episode's end whose true final observation was given, a step whose successor
is not written yet, a layout other than ``n`` rows a step) the given ``next_obs``
is kept in a side pool (:class:`FramesOnce`), so a sample is always exactly what
the plain buffer returns from the same seed: same rows, same bytes.

The pool holds one frame for each such row: the newest ``n`` rows always (their
successors are not written yet), and every row whose next observation differed
from its successor's observation. It grows by doubling and does not shrink.

Also here: the small helpers both buffer modes share (leaves of a storage, the
arrays live buffers own, counts checked).
"""

from __future__ import annotations

import mmap
import operator
import weakref
from typing import Any

import numpy as np

from .._core.tree import is_named
from ..errors import BufferShapeError, StructureMismatchError
from .replay_checks import first_change, refuse_change

__all__ = ["FramesOnce", "config_of", "check_mode", "example_once",
           "options_of"]

_CHUNK_BYTES = 1 << 22   # rows are compared this many bytes at a time


def _leaves(x: Any) -> list[Any]:
    """The arrays of a (nested) named tuple, in field order (None fields skipped)."""
    if is_named(x):
        out: list[Any] = []
        for value in x:
            out.extend(_leaves(value))
        return out
    return [] if x is None else [x]


# The arrays live buffers hold (storage, trees, pools), by id: never adopted by another buffer.
_LIVE: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def _claim(arrays: list[Any]) -> None:
    for array in arrays:
        _LIVE[id(array)] = array


def _adoptable(array: Any) -> bool:
    """Whether a loaded array can become a buffer's own: in memory, writable, C order.

    Arrays that view a file map are copied instead: a later save to that file
    could show through the pages the buffer has not written yet. So are arrays
    sharing memory with a live buffer's (``from_state_dict(rb.state_dict())``,
    or one loaded state given twice): two buffers would write into each other.
    """
    if not (isinstance(array, np.ndarray) and array.flags.writeable
            and array.flags.c_contiguous):
        return False
    if any(np.may_share_memory(array, live) for live in list(_LIVE.values())):
        return False
    base = array.base
    while base is not None:
        if isinstance(base, mmap.mmap):
            return False
        base = getattr(base, "base", None) if isinstance(base, np.ndarray) else \
            getattr(base, "obj", None) if isinstance(base, memoryview) else None
    return True


def _count(value: Any, name: str, what: str, minimum: int) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: {what} must be an int, got {type(value).__name__}") from None
    if n < minimum:
        raise ValueError(f"{name}: {what} must be at least {minimum}, got {n}")
    return n


def _same_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, whether ``a[i]`` and ``b[i]`` (same dtype and shape) have the same bytes."""
    n = len(a)
    out = np.ones(n, bool)
    if n == 0 or a[0].nbytes == 0:
        return out
    step = max(1, _CHUNK_BYTES // a[0].nbytes)
    for i in range(0, n, step):
        x = np.ascontiguousarray(a[i:i + step]).reshape(len(out[i:i + step]), -1)
        y = np.ascontiguousarray(b[i:i + step]).reshape(len(x), -1)
        out[i:i + step] = (x.view(np.uint8) == y.view(np.uint8)).all(axis=1)
    return out


class FramesOnce:
    """The next observations a frames-once buffer cannot read from the following row.

    ``pool[s]`` is the next observation of row ``owner[s]`` (``-1``: slot free);
    ``slot[p]`` is row ``p``'s slot or ``-1``, when its next observation is the
    observation of row ``(p + n_envs) % capacity``. Only ``pool`` and ``owner``
    are state; ``slot`` is rebuilt from them.
    """

    def __init__(self, storage: Any, capacity: int, fields: Any, n_envs: Any, where: str) -> None:
        try:
            obs, nxt = fields
        except (TypeError, ValueError):
            raise TypeError(f"{where}: frames_once must be a pair of field names "
                            f"(observation, next observation), got {fields!r}") from None
        names = type(storage)._fields
        for label, name in (("observation", obs), ("next observation", nxt)):
            if not isinstance(name, str) or name not in names:
                raise ValueError(f"{where}: frames_once names the {label} field {name!r}, "
                                 f"which is not a top-level field of {names}")
        if obs == nxt:
            raise ValueError(f"{where}: frames_once needs two different fields, got {obs!r} "
                             "twice")
        self.obs, self.next = obs, nxt
        self.n_envs = _count(n_envs, where, "n_envs", 1)
        self.capacity = capacity
        frames = getattr(storage, obs)
        if not isinstance(frames, np.ndarray):
            raise StructureMismatchError(f"{where}: frames_once field {obs!r}", "an array "
                                         "field (not a nested schema)", type(frames).__name__)
        self.leaf = [a is frames for a in _leaves(storage)].index(True)
        self.shape, self.dtype = frames.shape[1:], frames.dtype
        self.pool = np.zeros((0, *self.shape), self.dtype)
        self.owner = np.zeros(0, np.int64)
        self.slot = np.full(capacity, -1, np.int64)
        _claim([self.pool, self.owner, self.slot])

    @property
    def config(self) -> tuple[str, str, int]:
        """``(observation field, next-observation field, number of envs)``."""
        return self.obs, self.next, self.n_envs

    # -- writing ---------------------------------------------------------------------

    def split(self, batch: Any) -> tuple[Any, Any]:
        """``(batch without its next observations, them)``; a batch without the field as it is."""
        if not is_named(batch) or self.next not in type(batch)._fields:
            return batch, None
        return batch._replace(**{self.next: None}), getattr(batch, self.next)

    def checked_next(self, value: Any, storage: Any, rows: int | None, where: str) -> np.ndarray:
        """The next observations given, cast to the stored dtype (``rows`` of them, or one
        step when ``rows`` is None), or the error for them; nothing is changed."""
        if value is None:
            raise StructureMismatchError(f"{where}: {self.next}", "the next observations "
                                         f"(frames_once reads them from {self.obs!r} where it "
                                         "can)", "None")
        array = value if type(value) is np.ndarray else np.asarray(value)
        want = self.shape if rows is None else (rows, *self.shape)
        if array.shape != want:
            raise BufferShapeError(f"{where}: {self.next} has shape {array.shape}, expected "
                                   f"{want} (the shape of {self.obs})")
        if array.dtype != self.dtype:
            if not np.can_cast(array.dtype, self.dtype, "same_kind"):
                raise StructureMismatchError(f"{where}: {self.next}", f"an array castable to "
                                             f"{self.dtype}", str(array.dtype))
            batch = array if rows is not None else array[None]
            index = first_change(batch, self.dtype)
            if index is not None:
                raise refuse_change(storage, (self.next,), batch, self.dtype, index, where)
            array = array.astype(self.dtype)
        return array if rows is not None else array[None]

    def write(self, cursor: int, size: int, obs: np.ndarray, nxt: np.ndarray) -> None:
        """Account for ``m = len(obs)`` rows written from ``cursor`` (before the write:
        ``size`` rows stored), with their observations and next observations (stored dtype).

        Rows are numbered from the first written (old rows negative): row ``L`` sits at
        ``(cursor + L) % capacity`` and its successor is row ``L + n_envs``.
        """
        m, n, cap = len(obs), self.n_envs, self.capacity
        keep = min(m, cap)
        low = m - keep - min(size, cap - keep)       # the oldest row that survives
        free = [self.slot[(cursor + np.arange(m - keep, m)) % cap]]   # rows overwritten
        # old rows whose successor is written now: their pooled frame stays if it differs
        old = np.arange(max(low, -n, -size), min(0, m - n))
        if len(old):
            slots = self.slot[(cursor + old) % cap]
            same = _same_rows(self.pool[slots], obs[old + n])
            free.append(slots[same])
        # new rows: pooled if their successor is not written or differs from what they had
        new = np.arange(max(low, 0), m)
        resolved = new[new < m - n]
        pooled = np.concatenate([resolved[~_same_rows(nxt[resolved], obs[resolved + n])],
                                 new[new >= m - n]])
        self._release(np.concatenate(free))
        self._place((cursor + pooled) % cap, nxt[pooled])

    def _release(self, slots: np.ndarray) -> None:
        slots = slots[slots >= 0]
        self.slot[self.owner[slots]] = -1
        self.owner[slots] = -1

    def _place(self, rows: np.ndarray, frames: np.ndarray) -> None:
        if not len(rows):
            return
        free = np.flatnonzero(self.owner < 0)
        if len(free) < len(rows):
            grow = max(len(rows) - len(free), len(self.owner), 1)
            self.pool = np.concatenate([self.pool, np.zeros((grow, *self.shape), self.dtype)])
            self.owner = np.concatenate([self.owner, np.full(grow, -1, np.int64)])
            _claim([self.pool, self.owner])
            free = np.flatnonzero(self.owner < 0)
        slots = free[:len(rows)]
        self.pool[slots] = frames
        self.owner[slots] = rows
        self.slot[rows] = slots

    # -- reading ---------------------------------------------------------------------

    def next_of(self, index: np.ndarray, frames: np.ndarray) -> np.ndarray:
        """The next observations of rows ``index``, ``frames`` being the stored observations."""
        out: np.ndarray = frames[(index + self.n_envs) % self.capacity]
        slots = self.slot[index]
        pooled = slots >= 0
        if pooled.any():
            out[pooled] = self.pool[slots[pooled]]
        return out

    # -- state -----------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The pool's part of the buffer's state."""
        return {"frames_once": self.config, "next_pool": self.pool, "next_rows": self.owner}

    def checked(self, state: dict[str, Any], cursor: int, size: int, where: str) -> dict[str, Any]:
        """The pool of ``state`` checked against this buffer (BufferShapeError otherwise)."""
        try:
            pool, owner = np.asarray(state["next_pool"]), np.asarray(state["next_rows"])
        except KeyError as exc:
            raise BufferShapeError(f"{where}: not a frames-once state ({exc!r} "
                                   "missing)") from None
        if pool.ndim != len(self.shape) + 1 or pool.dtype != self.dtype or \
                pool.shape[1:] != self.shape or owner.ndim != 1 or \
                owner.shape[0] != pool.shape[0] or owner.dtype.kind not in "iu":
            raise BufferShapeError(
                f"{where}: the saved next-observation pool ({pool.dtype.str}, {pool.shape}; "
                f"rows {owner.dtype.str}, {owner.shape}) does not fit this buffer's "
                f"{self.next} ({self.dtype.str}, (k, *{self.shape}))")
        rows = owner[owner >= 0].astype(np.int64)
        if rows.size and (rows.max() >= size or owner.min() < -1):
            raise BufferShapeError(f"{where}: the saved pool names rows outside the "
                                   f"{size} stored")
        if np.unique(rows).size != rows.size:
            raise BufferShapeError(f"{where}: the saved pool holds two frames for one row")
        newest = (cursor - 1 - np.arange(min(self.n_envs, size))) % self.capacity
        if not np.isin(newest, rows).all():
            raise BufferShapeError(
                f"{where}: the saved pool lacks the next observations of the newest rows "
                f"(their successors are not written; no {self.obs} holds them)")
        return {"pool": pool, "owner": owner.astype(np.int64, copy=False)}

    def commit(self, checked: dict[str, Any]) -> None:
        """Adopt a pool :meth:`checked` returned (copied unless it can be owned)."""
        pool, owner = checked["pool"], checked["owner"]
        if pool is not self.pool:
            self.pool = pool.copy() if not _adoptable(pool) else pool
        if owner is not self.owner:
            self.owner = owner.copy() if not _adoptable(owner) else owner
        _claim([self.pool, self.owner])
        self.slot[:] = -1
        live = np.flatnonzero(self.owner >= 0)
        self.slot[self.owner[live]] = live


def config_of(state: Any, where: str) -> tuple[str, str, int] | None:
    """The frames-once settings a saved state was written with (None: a plain buffer's)."""
    config = state.get("frames_once") if isinstance(state, dict) else None
    if config is None:
        return None
    try:
        obs, nxt, n = config
        return str(obs), str(nxt), operator.index(n)
    except (TypeError, ValueError):
        raise BufferShapeError(f"{where}: frames_once must be (observation field, next "
                               f"field, n_envs), got {config!r}") from None


def check_mode(mine: tuple[str, str, int] | None, saved: tuple[str, str, int] | None,
               where: str) -> None:
    """Refuse a state saved in the other mode (plain or frames-once) or other frames-once
    settings: one mode's state is not converted into the other's."""
    if saved == mine:
        return

    def mode(config: Any) -> str:
        return "plain (next observations stored)" if config is None else \
            f"frames-once (frames_once={config[:2]!r}, n_envs={config[2]})"
    raise BufferShapeError(f"{where}: the state was saved by a {mode(saved)} buffer, this "
                           f"buffer is {mode(mine)}: build it as the saved one was (one "
                           "mode's state is not converted into the other)")


def example_once(example: Any, fields: Any, where: str) -> Any:
    """The example of a frames-once buffer without its next observations, which must have
    the observations' shape and dtype (or be None)."""
    try:
        obs, nxt = (getattr(example, str(f), None) for f in fields)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: frames_once must be a pair of field names (observation, "
                        f"next observation), got {fields!r}") from None
    if obs is not None and nxt is not None and (
            np.shape(obs) != np.shape(nxt) or np.result_type(obs) != np.result_type(nxt)):
        raise StructureMismatchError(f"{where}(example): {fields[1]}", "the shape and dtype "
                                     f"of {fields[0]} ({np.shape(obs)}, "
                                     f"{np.result_type(obs)})",
                                     f"{np.shape(nxt)}, {np.result_type(nxt)}")
    return example._replace(**{fields[1]: None}) if nxt is not None else example


def options_of(state: Any, where: str) -> dict[str, Any]:
    """The constructor's frames-once arguments for a saved state (none for a plain one)."""
    config = config_of(state, where)
    return {} if config is None else {"frames_once": config[:2], "n_envs": config[2]}
