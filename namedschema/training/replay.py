"""Replay buffers for any training loop whose whole state is data: they resume exactly.

ReplayBuffer               uniform sampling, with replacement, from the steps stored
PrioritizedReplayBuffer    proportional prioritized sampling (a vectorized sum tree)
(either with ``frames_once``: each frame stored once, see namedschema.training.replay_frames)

A buffer holds its steps in one schema instance of arrays with a leading
``capacity`` dimension (``storage``), written as a ring, and everything else it
needs to continue (write cursor, size, its own seeded random generator, and for
the prioritized buffer the sum and min trees and the largest priority) in the
object. ``state_dict()`` gives all of it as plain data (arrays, ints, floats, a
schema instance): a checkpoint stores it raw, an incremental save rewrites only
what changed, and ``load_state_dict`` puts it back into a buffer built with the
same arguments, after which the buffer draws and writes exactly what the
uninterrupted one would have. The buffer draws only from its own generator,
never from numpy's, Python's or torch's global ones.

For type checkers both buffers are generic in the example's type when it is an
array tuple (``ReplayBuffer(Samples(...), n)`` is a ``ReplayBuffer[Samples]``:
``sample`` returns ``Samples``, ``extend`` takes ``Samples``); other examples
(records, plain named tuples) give ``ReplayBuffer[Any]``, as the storage is then
an array schema made at run time. Nothing of this exists at run time beyond
``typing.Generic`` (no per-call work).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Self, TypeVar, overload

import numpy as np
import numpy.typing as npt

from .._core.instance import NamedArrayTuple
from .._core.tree import is_named
from ..buffer import buffer_from_example
from ..checkpoint._storage import copy_from_map
from ..errors import BufferShapeError, StructureMismatchError
from ..state.rng import generator_capture, generator_set, pcg64_words, set_pcg64_words
from . import sum_tree as _sum_tree
from .replay_checks import (
    batch_leaves,
    by_names,
    first_change,
    leaf_paths,
    refuse_change,
    saved_leaves,
)
from .replay_frames import (
    FramesOnce,
    _adoptable,
    _claim,
    _count,
    _leaves,
    check_mode,
    config_of,
    example_once,
    options_of,
)

__all__ = ["ReplayBuffer", "PrioritizedReplayBuffer", "PrioritizedSample"]

if TYPE_CHECKING:
    # A default (PEP 696) keeps a bare ``ReplayBuffer`` annotation valid under
    # ``mypy --strict`` (as ``ReplayBuffer[Any]``); typing's TypeVar takes one from 3.13.
    from typing_extensions import TypeVar as DefaultTypeVar
    BatchT = DefaultTypeVar("BatchT", bound=NamedArrayTuple, default=Any)
else:
    BatchT = TypeVar("BatchT", bound=NamedArrayTuple)
# The storage and every sample have the example's type when it is an array tuple.
_ArrayTupleT = TypeVar("_ArrayTupleT", bound=NamedArrayTuple)

# What ``PrioritizedReplayBuffer.sample`` returns: (batch, indices, importance weights).
PrioritizedSample = tuple[BatchT, npt.NDArray[np.int64], npt.NDArray[np.float32]]


class ReplayBuffer(Generic[BatchT]):
    """A ring buffer of steps with uniform sampling (with replacement).

    Args:
        example: one step, a schema instance (or any named tuple) whose fields
            are arrays or scalars, maybe nested; the buffer stores every field
            with a leading ``capacity`` dimension, in its dtype.
        capacity: the number of steps kept; older steps are overwritten.
        seed: seeds the buffer's own generator (``numpy.random.PCG64``); the
            buffer never draws from any global generator.
        frames_once: ``(obs, next_obs)``, two top-level array fields of the same
            shape and dtype: store each frame once (Stable-Baselines3's
            ``optimize_memory_usage``). ``next_obs`` gets no array: a row's next
            observation is read from the ``obs`` of the row ``n_envs`` later,
            where that holds the very bytes given; others (episode ends, the
            newest rows) are kept in a small pool. Samples and draws are exactly
            the plain buffer's (see :doc:`buffers`); ``storage.next_obs`` is None.
            The example's ``next_obs`` may be None.
        n_envs: with ``frames_once``, the rows one env step writes (a vector
            env's ``n_envs``, env ``k`` at offset ``k``).

    For type checkers an example of array tuple type ``Samples`` makes a
    ``ReplayBuffer[Samples]``: ``sample`` returns ``Samples``, ``extend`` takes it
    (see :doc:`typed`).

    >>> import numpy as np, namedschema
    >>> Step = namedschema.NamedArrayTupleSchema("Step", "obs action reward")
    >>> rb = namedschema.ReplayBuffer(Step(np.zeros(4, np.float32), 0, 0.0), 100, seed=1)
    >>> rb.extend(Step(np.ones((10, 4), np.float32), np.arange(10), np.zeros(10)))
    >>> rb.add(Step(np.ones(4, np.float32), 10, 1.0))
    >>> len(rb), rb.sample(32).obs.shape
    (11, (32, 4))
    """

    storage: BatchT
    _frames: FramesOnce | None   # frames-once mode's pool of next observations, or None
    # ``ReplayBuffer[Samples](...)`` makes the same object as ``ReplayBuffer(...)``: typing
    # would store the alias on the instance as ``__orig_class__`` (and so in its pickles);
    # a property without a setter refuses it, which typing ignores.
    __orig_class__ = property()

    @overload
    def __init__(self: ReplayBuffer[_ArrayTupleT], example: _ArrayTupleT, capacity: int, *,
                 seed: Any = None, frames_once: tuple[str, str] | None = None,
                 n_envs: int = 1) -> None: ...
    @overload
    def __init__(self: ReplayBuffer[Any], example: Any, capacity: int, *,
                 seed: Any = None, frames_once: tuple[str, str] | None = None,
                 n_envs: int = 1) -> None: ...

    def __init__(self, example: Any, capacity: int, *, seed: Any = None,
                 frames_once: tuple[str, str] | None = None, n_envs: int = 1) -> None:
        name = type(self).__name__
        if not is_named(example):
            raise StructureMismatchError(f"{name}(example)", "one step as a schema instance "
                                         "(or a named tuple)", type(example).__name__)
        self.capacity = _count(capacity, name, "capacity", 1)
        if frames_once is not None:
            example = example_once(example, frames_once, name)
        self.storage = buffer_from_example(example, (self.capacity,))
        self._init_common(seed, frames_once, n_envs)

    def _init_common(self, seed: Any, frames_once: Any = None, n_envs: Any = 1) -> None:
        self._frames = None if frames_once is None else FramesOnce(
            self.storage, self.capacity, frames_once, n_envs, type(self).__name__)
        self._stored = _leaves(self.storage)
        _claim(self._stored)
        self._name = f"{type(self).__name__}({type(self.storage).__name__})"
        self._cursor = 0
        self._size = 0
        self._rng = np.random.Generator(np.random.PCG64(seed))

    # -- writing ---------------------------------------------------------------------

    def _arrays(self, batch: Any) -> tuple[list[Any], int]:
        """The arrays of ``batch`` in the storage's order and their leading dimension, checked.

        Fields are matched by name (any order; other names are refused), shapes
        must match the stored steps', dtypes must cast to theirs within their
        kind (numpy's ``same_kind``: no float into an int field) and every value
        must survive that cast (no int64 70000 into int16, no 1e300 into
        float32), so a bad batch is refused before anything is written.
        """
        where = f"{self._name}.extend"
        if not is_named(batch):
            raise StructureMismatchError(f"{where}(batch)", "a schema instance "
                                         "with a leading batch dimension",
                                         type(batch).__name__)
        given = [x if type(x) is np.ndarray else np.asarray(x)
                 for x in batch_leaves(batch, self.storage, f"{where}(batch)")]
        n = None
        for stored, value in zip(self._stored, given, strict=True):
            shape = value.shape
            if len(shape) != stored.ndim or shape[1:] != stored.shape[1:]:
                raise BufferShapeError(
                    f"{where}: an array of {type(batch).__name__} has shape "
                    f"{tuple(shape)}, expected (n, *{stored.shape[1:]}) (fields "
                    f"{type(batch)._fields})")
            if value.dtype != stored.dtype and not np.can_cast(value.dtype, stored.dtype,
                                                               "same_kind"):
                raise StructureMismatchError(
                    f"{where}(batch)", f"arrays castable to {stored.dtype}",
                    f"{value.dtype} (fields {type(batch)._fields})")
            if n is None:
                n = shape[0]
            elif shape[0] != n:
                raise BufferShapeError(
                    f"{where}: the arrays of {type(batch).__name__} have "
                    f"different leading dimensions ({n} and {shape[0]})")
        for i, (stored, value) in enumerate(zip(self._stored, given, strict=True)):
            if value.dtype != stored.dtype:
                index = first_change(value, stored.dtype)
                if index is not None:
                    raise refuse_change(self.storage, leaf_paths(self.storage)[i], value,
                                        stored.dtype, index, where)
        return given, 0 if n is None else int(n)

    def _write(self, batch: Any) -> tuple[int, int]:
        """Write a batch at the cursor (wrapping); ``(start, n)`` of what was written.

        The positions written are ``(start + arange(n)) % capacity``.
        """
        frames, nxt = self._frames, None
        if frames is not None:
            batch, nxt = frames.split(batch)
        given, n = self._arrays(batch)
        if frames is not None:
            nxt = frames.checked_next(nxt, self.storage, n, f"{self._name}.extend")
            obs = given[frames.leaf].astype(frames.dtype, copy=False)
            frames.write(self._cursor, self._size, obs, nxt)
        cap, start, skip = self.capacity, self._cursor, 0
        if n > cap:  # only the last ``capacity`` steps survive
            skip = n - cap
            start = (start + skip) % cap
            n = cap
        first = min(n, cap - start)
        for stored, value in zip(self._stored, given, strict=True):
            stored[start:start + first] = value[skip:skip + first]
            if first < n:
                stored[:n - first] = value[skip + first:skip + n]
        self._cursor = (start + n) % cap
        self._size = min(cap, self._size + n)
        return start, n

    def extend(self, batch: BatchT) -> None:
        """Append a batch of steps (a schema instance with a leading batch dimension)."""
        self._write(batch)

    def add(self, step: BatchT | NamedTuple) -> None:
        """Append one step (a schema instance without the batch dimension, or a record
        with the same field names, in any order), checked as ``buffer[i] = step`` is."""
        if getattr(step, "_fields", None) != type(self.storage)._fields:
            step = by_names(step, self.storage)
        frames = self._frames
        if frames is not None:
            step, nxt = frames.split(step)
            nxt = frames.checked_next(nxt, self.storage, None, f"{self._name}.add")
        self.storage[self._cursor] = step
        if frames is not None:
            obs = getattr(self.storage, frames.obs)
            frames.write(self._cursor, self._size, obs[self._cursor:self._cursor + 1], nxt)
        self._added(self._cursor)
        self._cursor = (self._cursor + 1) % self.capacity
        self._size = min(self.capacity, self._size + 1)

    def _added(self, position: int) -> None:
        """Hook: one step was written at ``position``."""

    # -- reading ---------------------------------------------------------------------

    def _check_sample(self, batch_size: int) -> int:
        n = _count(batch_size, f"{self._name}.sample", "batch_size", 1)
        if self._size == 0:
            raise ValueError(f"{self._name}.sample: the buffer is empty")
        return n

    def sample(self, batch_size: int) -> BatchT:
        """``batch_size`` steps drawn uniformly with replacement (a schema instance)."""
        n = self._check_sample(batch_size)
        return self._rows(self._rng.integers(0, self._size, n))

    def _rows(self, index: np.ndarray) -> BatchT:
        """The steps at ``index`` (next observations put back in frames-once mode)."""
        rows = self.storage[index]
        frames = self._frames
        if frames is None:
            return rows
        value = frames.next_of(index, getattr(self.storage, frames.obs))
        return rows._replace(**{frames.next: value})

    def __len__(self) -> int:
        return self._size

    @property
    def cursor(self) -> int:
        """Where the next step is written."""
        return self._cursor

    def __repr__(self) -> str:
        return f"<{self._name}: {self._size} of {self.capacity} steps>"

    # -- state -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything the buffer needs to continue exactly, as plain data.

        The arrays are the buffer's own (not copies): save them before the
        buffer changes again. A frames-once buffer's storage has no next
        observations; its state adds ``frames_once`` (the fields and n_envs),
        ``next_pool`` and ``next_rows`` (the pooled frames and their rows, -1 free).
        """
        state = {"storage": self.storage, "cursor": self._cursor, "size": self._size,
                 "rng": pcg64_words(self._rng)}
        if self._frames is not None:
            state.update(self._frames.state())
        return state

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Self:
        """A new buffer holding ``state`` (from :meth:`state_dict`, maybe loaded from a file).

        The example and capacity are read from the saved storage, so a process
        that never defined the step's schema can continue the buffer. Arrays
        loaded into memory (``namedschema.load`` without ``mmap_mode``) become the
        buffer's own, without a copy; others (memory-mapped, read-only) are copied.
        """
        where = f"{cls.__name__}.from_state_dict"
        try:
            storage = state["storage"]
            leaves = _leaves(storage)
            capacity = len(leaves[0])
        except (KeyError, TypeError, IndexError) as exc:
            raise BufferShapeError(f"{where}: not a buffer state ({exc!r})") from None
        if not is_named(storage) or any(np.ndim(a) < 1 or len(a) != capacity
                                        for a in leaves) or capacity < 1:
            raise BufferShapeError(
                f"{where}: the saved storage's fields must all hold the same number of "
                f"steps (at least 1), got {[np.shape(a) for a in leaves]}")
        try:
            if all(_adoptable(a) for a in leaves):
                buffer = cls.__new__(cls)
                buffer.capacity = capacity
                buffer.storage = storage
                buffer._adopt(state)
            else:
                buffer = cls(storage[0], capacity, **cls._options(state))
        except (TypeError, ValueError) as exc:
            raise BufferShapeError(f"{where}: the saved state cannot make a buffer "
                                   f"({exc})") from exc
        buffer.load_state_dict(state)
        return buffer

    def _adopt(self, state: dict[str, Any]) -> None:
        """Finish a buffer whose ``storage`` is loaded arrays (``from_state_dict``)."""
        self._init_common(None, **options_of(state, f"{type(self).__name__}.from_state_dict"))

    @classmethod
    def _options(cls, state: dict[str, Any]) -> dict[str, Any]:
        return options_of(state, f"{cls.__name__}.from_state_dict")

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """Raise what :meth:`load_state_dict` would raise for ``state``; change nothing."""
        self._checked(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` gave, writing into this buffer's arrays.

        Saved fields are matched to this buffer's by name (a schema whose fields
        were reordered, added with a default or removed since the save goes
        through the rules of :func:`namedschema.upgrade`). The whole state is
        checked before anything changes; a state that does not fit or does not
        hold together raises BufferShapeError and leaves the buffer as it was.
        """
        self._commit(self._checked(state))

    def _checked(self, state: Any) -> dict[str, Any]:
        """Everything :meth:`_commit` puts in place, checked (BufferShapeError otherwise)."""
        where = f"{self._name}.load_state_dict"
        try:
            storage, cursor, size, rng = (state["storage"], state["cursor"], state["size"],
                                          state["rng"])
        except (KeyError, TypeError, IndexError) as exc:
            raise BufferShapeError(f"{where}: not a {type(self).__name__} state ({exc!r} "
                                   "missing)") from None
        check_mode(None if self._frames is None else self._frames.config,
                   config_of(state, where), where)
        given = saved_leaves(storage, self.storage, self.capacity, where)
        if any(np.shape(g) != s.shape or _dtype(g) != s.dtype
               for g, s in zip(given, self._stored, strict=True)):
            raise BufferShapeError(
                f"{where}: the saved storage "
                f"{[(_dtype(g).str, np.shape(g)) for g in given]} does not fit "
                f"this buffer's {[(s.dtype.str, s.shape) for s in self._stored]} (built with "
                "another example or capacity?)")
        try:
            cursor = _count(cursor, where, "cursor", 0)
            size = _count(size, where, "size", 0)
            scratch = np.random.Generator(np.random.PCG64())
            set_pcg64_words(scratch, rng, where)
        except (TypeError, ValueError) as exc:
            raise BufferShapeError(str(exc)) from None
        if cursor >= self.capacity or size > self.capacity or (
                size < self.capacity and cursor != size):
            # a ring is written from row 0: until it is full, the cursor is the size
            raise BufferShapeError(f"{where}: cursor {cursor} / size {size} do not fit "
                                   f"capacity {self.capacity}")
        return {"leaves": given, "cursor": cursor, "size": size,
                "rng": generator_capture(scratch),
                "frames": None if self._frames is None else
                self._frames.checked(state, cursor, size, where)}

    def _commit(self, checked: dict[str, Any]) -> None:
        """Put a state :meth:`_checked` accepted in place."""
        for stored, value in zip(self._stored, checked["leaves"], strict=True):
            if stored is not value:   # a mapped or compressed array read straight into it
                copy_from_map(stored, value)
        generator_set(self._rng, checked["rng"])
        self._cursor, self._size = checked["cursor"], checked["size"]
        if self._frames is not None:
            self._frames.commit(checked["frames"])


def _dtype(value: Any) -> np.dtype:
    """The dtype of a saved array, read without making one (a restore's compressed arrays
    are decompressed only into the buffer)."""
    dtype = getattr(value, "dtype", None)
    return dtype if isinstance(dtype, np.dtype) else np.asarray(value).dtype


class PrioritizedReplayBuffer(ReplayBuffer[BatchT]):
    """Proportional prioritized replay (Schaul et al., 2016) over a vectorized sum tree.

    A step is drawn with probability ``p_i ** alpha / sum_k p_k ** alpha``; new
    steps get the largest priority given so far (1 at first). ``sample`` draws
    one target in each of ``batch_size`` equal slices of the total (stratified)
    and returns ``(batch, indices, weights)``: ``weights`` (float32) are the
    importance weights ``(N * P(i)) ** -beta`` divided by the largest possible
    one (that of the least likely step), so at most 1. ``beta`` may be changed
    between calls (annealing); it is part of the state.

    >>> import numpy as np, namedschema
    >>> Step = namedschema.NamedArrayTupleSchema("Step", "obs reward")
    >>> rb = namedschema.PrioritizedReplayBuffer(Step(np.zeros(2), 0.0), 64, seed=0)
    >>> rb.extend(Step(np.ones((8, 2)), np.arange(8.0)))
    >>> batch, idx, w = rb.sample(4)
    >>> rb.update_priorities(idx, np.full(4, 2.0))
    >>> batch.obs.shape, idx.shape, w.dtype
    ((4, 2), (4,), dtype('float32'))
    """

    @overload
    def __init__(self: PrioritizedReplayBuffer[_ArrayTupleT], example: _ArrayTupleT,
                 capacity: int, *, alpha: float = 0.6, beta: float = 0.4,
                 seed: Any = None, frames_once: tuple[str, str] | None = None,
                 n_envs: int = 1) -> None: ...
    @overload
    def __init__(self: PrioritizedReplayBuffer[Any], example: Any, capacity: int, *,
                 alpha: float = 0.6, beta: float = 0.4, seed: Any = None,
                 frames_once: tuple[str, str] | None = None, n_envs: int = 1) -> None: ...

    def __init__(self, example: Any, capacity: int, *, alpha: float = 0.6, beta: float = 0.4,
                 seed: Any = None, frames_once: tuple[str, str] | None = None,
                 n_envs: int = 1) -> None:
        self.alpha = self._exponent(alpha, "alpha")
        self.beta = self._exponent(beta, "beta")
        super().__init__(example, capacity, seed=seed, frames_once=frames_once, n_envs=n_envs)
        self._sum = _sum_tree.new_sum_tree(self.capacity)
        self._min = _sum_tree.new_min_tree(self.capacity)
        _claim([self._sum, self._min])
        self._max_priority = 1.0

    def _exponent(self, value: Any, label: str) -> float:
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{type(self).__name__}: {label} must be a number, got "
                            f"{type(value).__name__}") from None
        if not (math.isfinite(x) and x >= 0):
            raise ValueError(f"{type(self).__name__}: {label} must be finite and >= 0, "
                             f"got {value!r}")
        return x

    def _set(self, index: np.ndarray, values: np.ndarray) -> None:
        _sum_tree.update_sum(self._sum, index, values)
        _sum_tree.update_min(self._min, index, values)

    def _new_leaf(self) -> float:
        """The leaf of a new step, ``max_priority ** alpha``, checked against the tree's bounds
        (it is one of the priorities already checked, unless ``alpha`` was changed)."""
        with np.errstate(all="ignore"):
            leaf = np.float64(self._max_priority) ** self.alpha
        if _sum_tree.out_of_bounds(np.array([leaf]), self.capacity)[0]:
            low, high = _sum_tree.leaf_bounds(self.capacity)
            raise ValueError(f"{self._name}: the priority of new steps, max_priority "
                             f"{self._max_priority!r} ** alpha {self.alpha!r} = {float(leaf)!r}, is "
                             f"outside [{low!r}, {high!r}], what the sum tree holds")
        return float(leaf)

    def extend(self, batch: BatchT) -> None:
        """Append ``batch``, each row at the maximum priority so far."""
        leaf = self._new_leaf()
        start, n = self._write(batch)
        if n:
            positions = (start + np.arange(n)) % self.capacity
            self._set(positions, np.full(n, leaf))

    def add(self, step: BatchT | NamedTuple) -> None:
        """Append one step at the maximum priority so far."""
        self._new_leaf()  # checked before the step is written
        super().add(step)

    def _added(self, position: int) -> None:
        self._set(np.array([position]), np.array([self._max_priority ** self.alpha]))

    # A prioritized buffer is a ReplayBuffer whose sample is a triple (as ever at run time).
    def sample(self, batch_size: int) -> PrioritizedSample[BatchT]:  # type: ignore[override]
        """``(batch, indices, weights)``: ``batch_size`` steps drawn by priority."""
        n = self._check_sample(batch_size)
        total = self._sum[1]
        targets = (np.arange(n) + self._rng.random(n)) * (total / n)
        index = _sum_tree.find_prefix_sums(self._sum, targets)
        first = self._sum.shape[0] // 2
        probs = self._sum[first + index] / total
        least = self._min[1] / total
        weights = (probs / least) ** -self.beta
        return self._rows(index), index, weights.astype(np.float32)

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Set the priorities (before ``alpha``) of the steps at ``indices``.

        Priorities must be finite and positive (add a small epsilon to TD
        errors), and after ``alpha`` within what the sum tree holds
        (``2**-511`` to ``2**511 / capacity`` rounded up to a power of two, so
        that no sum overflows and no probability underflows to 0); indices must
        be of stored steps. With repeated indices the last priority wins. A
        refused call changes nothing.
        """
        where = f"{self._name}.update_priorities"
        index = np.asarray(indices)
        value = np.asarray(priorities, dtype=np.float64)
        if index.ndim != 1 or value.shape != index.shape:
            raise BufferShapeError(f"{where}: indices {index.shape} and priorities "
                                   f"{value.shape} must be 1-d of the same length")
        if index.size == 0:
            return
        if not np.issubdtype(index.dtype, np.integer):
            raise TypeError(f"{where}: indices must be integers, got {index.dtype}")
        if index.min() < 0 or index.max() >= self._size:
            raise IndexError(f"{where}: indices must be in [0, {self._size}), got "
                             f"{index.min()}..{index.max()}")
        if not (np.all(np.isfinite(value)) and value.min() > 0):
            raise ValueError(f"{where}: priorities must be finite and > 0")
        with np.errstate(all="ignore"):
            leaves = value ** self.alpha
        bad = _sum_tree.out_of_bounds(leaves, self.capacity)
        if bad.any():
            i = int(np.argmax(bad))
            low, high = _sum_tree.leaf_bounds(self.capacity)
            raise ValueError(f"{where}: priority {float(value[i])!r} (of step "
                             f"{int(index[i])}) ** alpha {self.alpha!r} is "
                             f"{float(leaves[i])!r}, outside [{low!r}, {high!r}], what the "
                             "sum tree holds")
        index = index.astype(np.int64, copy=False)
        self._set(index, leaves)
        self._max_priority = max(self._max_priority, float(value.max()))

    def state_dict(self) -> dict[str, Any]:
        """The buffer's state, its priority trees and exponents included."""
        state = super().state_dict()
        state.update(sum_tree=self._sum, min_tree=self._min,
                     max_priority=self._max_priority, alpha=self.alpha, beta=self.beta)
        return state

    @classmethod
    def _options(cls, state: dict[str, Any]) -> dict[str, Any]:
        return {**super()._options(state), "alpha": state.get("alpha", 0.6),
                "beta": state.get("beta", 0.4)}

    def _adopt(self, state: dict[str, Any]) -> None:
        super()._adopt(state)
        self.alpha = self._exponent(state.get("alpha", 0.6), "alpha")
        self.beta = self._exponent(state.get("beta", 0.4), "beta")
        size = _sum_tree.tree_size(self.capacity)
        trees: list[Any] = [state.get("sum_tree"), state.get("min_tree")]
        self._sum, self._min = (
            tree if _adoptable(tree) and tree.dtype == np.float64 and tree.shape == (size,)
            else make(self.capacity)
            for tree, make in zip(trees, (_sum_tree.new_sum_tree, _sum_tree.new_min_tree),
                                  strict=True))
        _claim([self._sum, self._min])
        self._max_priority = 1.0

    def _checked(self, state: Any) -> dict[str, Any]:
        checked = super()._checked(state)
        where = f"{self._name}.load_state_dict"
        try:
            trees = (state["sum_tree"], state["min_tree"])
            max_priority, alpha, beta = state["max_priority"], state["alpha"], state["beta"]
        except (KeyError, TypeError) as exc:
            raise BufferShapeError(f"{where}: not a PrioritizedReplayBuffer state ({exc!r} "
                                   "missing)") from None
        try:
            alpha, beta = self._exponent(alpha, "alpha"), self._exponent(beta, "beta")
        except (TypeError, ValueError) as exc:
            raise BufferShapeError(f"{where}: {exc}") from None
        try:
            max_priority = float(max_priority)
        except (TypeError, ValueError):
            raise BufferShapeError(f"{where}: max_priority must be a number, got "
                                   f"{type(max_priority).__name__}") from None
        if not (math.isfinite(max_priority) and max_priority > 0):
            raise BufferShapeError(f"{where}: max_priority must be finite and > 0, got "
                                   f"{max_priority!r}")
        with np.errstate(all="ignore"):
            new_leaf = np.float64(max_priority) ** alpha
        if _sum_tree.out_of_bounds(np.array([new_leaf]), self.capacity)[0]:
            raise BufferShapeError(f"{where}: max_priority {max_priority!r} ** alpha "
                                   f"{alpha!r} is outside what the sum tree holds")
        sum_tree, min_tree = (np.asarray(t) for t in trees)
        problem = _sum_tree.tree_problem(sum_tree, min_tree, self.capacity, checked["size"])
        if problem is not None:
            raise BufferShapeError(f"{where}: the saved trees do not hold together: "
                                   f"{problem}")
        checked.update(trees=(sum_tree, min_tree), max_priority=max_priority, alpha=alpha,
                       beta=beta)
        return checked

    def _commit(self, checked: dict[str, Any]) -> None:
        super()._commit(checked)
        for target, tree in zip((self._sum, self._min), checked["trees"], strict=True):
            if target is not tree:
                np.copyto(target, tree, casting="no")
        self._max_priority = checked["max_priority"]
        self.alpha, self.beta = checked["alpha"], checked["beta"]
