"""``ShardedReplay``: replay over N Ray actors, checkpointed as one consistent cut.

The handle a program holds is small: the shards' actor handles, its own random
generator (which decides how many rows each shard contributes to a sample),
and its writer id. It travels to other Ray tasks and actors (pickled by value):
a copy there writes with a writer id of its own; only the handle that made or
restored the replay (its *owner*) may checkpoint it.

For type checkers a replay is ``ShardedReplay[Batch, Sample]``: ``Batch`` the example's
type when it is an array tuple (as for :class:`namedschema.ReplayBuffer`), ``Sample``
what ``sample`` returns (``Batch``, or ``PrioritizedSample[Batch]`` with
``prioritized=True``); a restored replay is ``ShardedReplay[Any, Any]``.
"""

from __future__ import annotations

import operator
import os
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, NamedTuple, Self, TypeVar, overload

import numpy as np

from .._core.instance import NamedArrayTuple
from .._core.tree import is_named
from ..errors import FormatError, ShardedReplayError, WorkerError
from ..integrations import hook_loaded
from ..state.rng import pcg64_words, set_pcg64_words
from ..training.replay import BatchT, PrioritizedSample
from . import _files as _manifest
from ._files import check_shard_files, expected_shard
from .shard import CUT_WAIT_SECONDS, ReplayShard, ordered_rows, route

__all__ = ["ShardedReplay", "WorkerError", "ShardedReplayError", "CheckpointInfo"]

if TYPE_CHECKING:   # a default, as for BatchT (see namedschema.training.replay)
    from typing_extensions import TypeVar as DefaultTypeVar
    SampleT = DefaultTypeVar("SampleT", default=Any)
else:
    SampleT = TypeVar("SampleT")
_ArrayTupleT = TypeVar("_ArrayTupleT", bound=NamedArrayTuple)

_CHUNK_BYTES = 32 << 20       # rows moved per call when re-sharding
_MAX_IN_FLIGHT = 8            # extend calls a handle has on their way before it waits


@dataclass(frozen=True)
class CheckpointInfo:
    """What one :meth:`ShardedReplay.checkpoint` did."""

    path: str
    generation: int
    rows: tuple[int, ...]          # per shard, at the cut
    bytes: int                     # of the shard files named by the manifest
    seconds: float                 # the whole checkpoint, as the caller waited
    held_seconds: float            # the longest a shard held writes (cut + snapshot)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("namedschema.ray needs Ray: install the 'ray' extra of "
                          "namedschema (pip install 'ray>=2.9')") from None
    hook_loaded()   # Ray's cloudpickle ships schemas made before its import by id too
    return ray


def _split(capacity: int, num_shards: int) -> list[int]:
    base, extra = divmod(capacity, num_shards)
    return [base + (i < extra) for i in range(num_shards)]


def _concat(parts: list[Any]) -> Any:
    """One batch from same-schema batches (nested fields; None fields stay None)."""
    first = parts[0]
    if is_named(first):
        return type(first)(*(_concat(list(fields)) for fields in zip(*parts, strict=True)))
    if first is None:
        return None
    return np.concatenate(parts)


def _row_bytes(example: Any) -> int:
    if is_named(example):
        return sum(_row_bytes(v) for v in example)
    return 0 if example is None else int(np.asarray(example).nbytes)


class ShardedReplay(Generic[BatchT, SampleT]):
    """Uniform or prioritized replay over ``num_shards`` Ray actors.

    Args:
        example: one step, a schema instance (as for :class:`namedschema.ReplayBuffer`).
        capacity: steps kept in all; shard ``i`` keeps ``capacity // num_shards``
            (one more for the first ``capacity % num_shards``).
        num_shards: Ray actors, each holding a :class:`namedschema.ReplayBuffer` (or
            :class:`namedschema.PrioritizedReplayBuffer` with ``prioritized=True``).
        seed: seeds every shard's generator and this handle's (a
            :class:`numpy.random.SeedSequence` spawns them).
        alpha, beta: as for :class:`namedschema.PrioritizedReplayBuffer`.
        actor_options: passed to ``.options()`` of every shard actor (``num_cpus``,
            ``resources``, ``scheduling_strategy``, ...); default ``num_cpus=0``.

    ``extend`` sends each batch whole to one shard, in turn, without waiting (at
    most a few calls in flight per handle); ``sample`` first draws how many rows
    each shard gives (in proportion to its rows, or to its total priority), then
    gathers them in one round trip. Indices of prioritized samples are global:
    ``shard * stride + row`` with ``stride`` the largest shard capacity.

    For type checkers an example of array tuple type ``Samples`` makes a
    ``ShardedReplay[Samples, Samples]``, or with ``prioritized=True`` a
    ``ShardedReplay[Samples, PrioritizedSample[Samples]]``: the second parameter is
    what ``sample`` returns (see :doc:`typed`).
    """

    @overload
    def __init__(self: ShardedReplay[_ArrayTupleT, _ArrayTupleT], example: _ArrayTupleT,
                 capacity: int, *, num_shards: int, prioritized: Literal[False] = False,
                 seed: Any = None, alpha: float = 0.6, beta: float = 0.4,
                 actor_options: dict[str, Any] | None = None) -> None: ...
    @overload
    def __init__(self: ShardedReplay[_ArrayTupleT, PrioritizedSample[_ArrayTupleT]],
                 example: _ArrayTupleT, capacity: int, *, num_shards: int,
                 prioritized: Literal[True], seed: Any = None, alpha: float = 0.6,
                 beta: float = 0.4, actor_options: dict[str, Any] | None = None) -> None: ...
    @overload
    def __init__(self: ShardedReplay[Any, Any], example: Any, capacity: int, *,
                 num_shards: int, prioritized: bool = False, seed: Any = None,
                 alpha: float = 0.6, beta: float = 0.4,
                 actor_options: dict[str, Any] | None = None) -> None: ...

    def __init__(self, example: Any, capacity: int, *, num_shards: int,
                 prioritized: bool = False, seed: Any = None, alpha: float = 0.6,
                 beta: float = 0.4, actor_options: dict[str, Any] | None = None) -> None:
        n = _positive(num_shards, "num_shards")
        cap = _positive(capacity, "capacity")
        if cap < n:
            raise ValueError(f"ShardedReplay: capacity {cap} is less than num_shards {n}: "
                             "every shard needs at least one row")
        seeds = np.random.SeedSequence(seed)
        children = seeds.spawn(n + 2)
        spec = {"example": example, "prioritized": bool(prioritized), "alpha": float(alpha),
                "beta": float(beta)}
        # entropy for seeding shards anew on a restore onto another shard count
        entropy = int.from_bytes(seeds.generate_state(4, np.uint32).tobytes(), "little")
        self._setup(spec, _split(cap, n), actor_options, entropy)
        # the owner's writer id comes from the seed too, so a seeded program routes
        # its batches to the same shards in every run
        self._writer = int(children[-1].generate_state(1, np.uint64)[0]) >> 2
        self._rng = np.random.Generator(np.random.PCG64(children[0]))
        self._start([(dict(spec, capacity=c), children[1 + i]) for i, c in
                     enumerate(self._capacities)])

    # -- construction ----------------------------------------------------------------

    def _setup(self, spec: dict[str, Any], capacities: list[int], actor_options: dict[str, Any] | None,
               entropy: int) -> None:
        self._spec = {k: v for k, v in spec.items() if k != "example"}
        self._capacities = list(capacities)
        self._stride = max(capacities)
        self._options = dict(actor_options or {"num_cpus": 0})
        self._entropy = entropy
        self._writer = secrets.randbits(62)
        self._seq = -1
        self._inflight: list[Any] = []
        self._owner = True
        self._generation = 0
        self.beta = float(spec["beta"])

    def _start(self, shard_args: list[tuple[dict[str, Any], Any]]) -> None:
        ray = _ray()
        actor = ray.remote(ReplayShard).options(**self._options)
        n = len(shard_args)
        self._shards = [actor.remote(spec, i, n, seed) for i, (spec, seed) in
                        enumerate(shard_args)]
        self._get([s.ping.remote() for s in self._shards], "start")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._spec, self._capacities, self._options, self._entropy,
                           self._shards, self.beta))

    @property
    def num_shards(self) -> int:
        """How many shards the buffer has."""
        return len(self._shards)

    @property
    def capacity(self) -> int:
        """Rows all shards together hold at most."""
        return sum(self._capacities)

    @property
    def prioritized(self) -> bool:
        """Whether the shards sample by priority."""
        return bool(self._spec["prioritized"])

    def _get(self, refs: Any, what: str) -> Any:
        ray = _ray()
        try:
            return ray.get(refs)
        except ray.exceptions.RayActorError as exc:
            raise WorkerError(
                f"ShardedReplay.{what}: a shard actor died ({exc.__class__.__name__}); "
                "restore the last checkpoint with ShardedReplay.restore(path)") from exc
        except ray.exceptions.RayTaskError as exc:
            raise WorkerError(f"ShardedReplay.{what}: a shard failed: "
                                     f"{exc.cause!r}") from exc

    # -- writing ---------------------------------------------------------------------

    def extend(self, batch: BatchT) -> None:
        """Append a batch of steps (a schema instance with a leading batch dimension)."""
        self._seq += 1
        shard = route(self._writer, self._seq, len(self._shards))
        self._inflight.append(self._shards[shard].extend.remote(batch, self._writer,
                                                                self._seq))
        if len(self._inflight) > _MAX_IN_FLIGHT:
            self._get(self._inflight.pop(0), "extend")

    def add(self, step: BatchT | NamedTuple) -> None:
        """Append one step: a batch of one (prefer ``extend`` with bigger batches)."""
        self.extend(_one(step))

    def flush(self) -> None:
        """Wait until every ``extend`` of this handle has been applied (errors raise)."""
        pending, self._inflight = self._inflight, []
        if pending:
            self._get(pending, "extend")

    # -- reading ---------------------------------------------------------------------

    def _stats(self) -> np.ndarray:
        self.flush()
        return np.array(self._get([s.stats.remote() for s in self._shards], "sample"),
                        np.float64).reshape(len(self._shards), 3)

    def __len__(self) -> int:
        return int(self._stats()[:, 0].sum())

    def sample(self, batch_size: int) -> SampleT:
        """Like :meth:`namedschema.ReplayBuffer.sample`; prioritized: ``(batch, indices,
        weights)`` with global indices and weights normalized over all shards."""
        n = _positive(batch_size, "batch_size")
        stats = self._stats()
        weight = stats[:, 1]
        if stats[:, 0].sum() == 0:
            raise ValueError("ShardedReplay.sample: the replay is empty")
        counts = self._rng.multinomial(n, weight / weight.sum())
        chosen = [i for i in range(len(self._shards)) if counts[i]]
        beta = self.beta
        parts = self._get([self._shards[i].sample.remote(int(counts[i]), beta)
                           for i in chosen], "sample")
        if not self.prioritized:
            uniform: SampleT = _concat(parts)    # SampleT is BatchT for a uniform replay
            return uniform
        batch = _concat([p[0] for p in parts])
        index = np.concatenate([p[1] + i * self._stride for i, p in zip(chosen, parts,
                                                                        strict=True)])
        prio = np.concatenate([p[2] for p in parts])
        least = stats[stats[:, 0] > 0, 2].min()
        weights = (prio / least) ** -beta
        # SampleT is this triple for a prioritized replay (the overloads of __init__)
        return batch, index.astype(np.int64), weights.astype(np.float32)  # type: ignore[return-value]

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Set priorities (before ``alpha``) of rows given by global ``indices``."""
        if not self.prioritized:
            raise TypeError("ShardedReplay.update_priorities: this replay is not "
                            "prioritized (prioritized=False)")
        index = np.asarray(indices)
        value = np.asarray(priorities, np.float64)
        if index.ndim != 1 or value.shape != index.shape or (
                index.size and not np.issubdtype(index.dtype, np.integer)):
            raise ValueError("ShardedReplay.update_priorities: indices (integers) and "
                             f"priorities must be 1-d of one length, got {index.shape} "
                             f"{index.dtype} and {value.shape}")
        shard = index // self._stride
        if index.size and (index.min() < 0 or shard.max() >= len(self._shards)):
            raise IndexError("ShardedReplay.update_priorities: an index is outside every "
                             "shard")
        self.flush()
        refs = [self._shards[i].update_priorities.remote(index[shard == i] % self._stride,
                                                         value[shard == i])
                for i in np.unique(shard)]
        self._get(refs, "update_priorities")

    # -- checkpoints -----------------------------------------------------------------

    def checkpoint(self, path: str | os.PathLike[str], *,
                   compression: str | tuple[str, int] | None = None) -> CheckpointInfo:
        """Save every shard at one consistent cut into the directory ``path``.

        Writes are held only while each shard reaches the cut and takes its
        snapshot (what changed since that slot's last save, copied aside); the
        shards write and sync in the background, this call waits for them and
        replaces the manifest last, so a kill of any shard or of this process at
        any moment leaves the previous generation loadable. Returns what it
        wrote. ``compression`` is :func:`namedschema.save`'s, for every shard
        file (checked before anything is held).
        """
        if not self._owner:
            raise WorkerError("ShardedReplay.checkpoint: only the handle that made "
                                     "or restored the replay can checkpoint it (this is a "
                                     "copy sent to another process)")
        from ..checkpoint._compression import compression_argument
        compression_argument(compression, caller="ShardedReplay.checkpoint")
        started = time.perf_counter()
        directory = os.fspath(path)
        os.makedirs(directory, exist_ok=True)
        try:
            generation = _manifest.read_manifest(directory).generation + 1
        except FileNotFoundError:
            generation = 1
        generation = max(generation, self._generation + 1)
        n = len(self._shards)
        files = [_manifest.shard_file(generation, i, n) for i in range(n)]
        os.makedirs(os.path.join(directory, f"slot{generation % 2}"), exist_ok=True)
        self.flush()
        applied = self._get([s.freeze.remote() for s in self._shards], "checkpoint")
        cut: dict[int, int] = {}
        for one in applied:
            for writer, seq in one.items():
                cut[writer] = max(seq, cut.get(writer, -1))
        paths = [os.path.join(directory, f) for f in files]
        try:
            infos = self._snapshot(cut, paths, compression)
        except BaseException:
            ray = _ray()
            for s in self._shards:   # a shard that is alive takes writes again
                try:
                    ray.get(s.thaw.remote(), timeout=30)
                except Exception:  # a dead shard stays dead
                    pass
            raise
        done = self._get([s.finish.remote(p) for s, p in zip(self._shards, paths, strict=True)],
                         "checkpoint")
        missing = sorted({w for info in infos for w in info["missing_writers"]})
        manifest = _manifest.Manifest(
            generation=generation, capacities=tuple(self._capacities),
            prioritized=self.prioritized, alpha=float(self._spec["alpha"]),
            beta=self.beta, files=tuple(files), rng=tuple(int(w) for w in pcg64_words(self._rng)),
            seed_entropy=self._entropy, writer=self._writer, seq=self._seq,
            rows=tuple(int(i["rows"]) for i in infos),
            cut={str(k): v for k, v in cut.items()}, missing_writers=tuple(missing))
        _manifest.write_manifest(directory, manifest)
        self._generation = generation
        _remove_strays(directory, generation, files)
        return CheckpointInfo(directory, generation, manifest.rows,
                              sum(int(d["bytes"]) for d in done),
                              time.perf_counter() - started,
                              max(float(i["held"]) for i in infos))

    def _snapshot(self, cut: dict[int, int], paths: list[str],
                  compression: Any = None) -> list[dict[str, Any]]:
        """Ask every shard to save at ``cut`` until all have (see namedschema.ray.shard)."""
        infos: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + CUT_WAIT_SECONDS
        pause = 0.001
        while len(infos) < len(self._shards):
            give_up = time.monotonic() > deadline
            todo = [i for i in range(len(self._shards)) if i not in infos]
            got = self._get([self._shards[i].snapshot.remote(cut, paths[i], give_up,
                                                             compression)
                             for i in todo], "checkpoint")
            infos.update((i, info) for i, info in zip(todo, got, strict=True) if info)
            if len(infos) < len(self._shards):
                time.sleep(pause)
                pause = min(0.05, pause * 2)
        return [infos[i] for i in range(len(self._shards))]

    @classmethod
    def restore(cls, path: str | os.PathLike[str], *, num_shards: int | None = None,
                actor_options: dict[str, Any] | None = None) -> ShardedReplay[Any, Any]:
        """The replay as of the last checkpoint in ``path``, on ``num_shards`` shards.

        On the checkpoint's own shard count every shard loads its file and the
        replay continues exactly (the same samples, given the same calls). On
        another count the rows are dealt out afresh (oldest first, interleaved
        by age across the old shards) with their priorities; sampling then
        differs from the original's.

        Nothing is built before the manifest and the files agree (capacities,
        row counts, prioritized or not, one file per shard, one schema): every
        shard is sized by the data its file holds. Each shard verifies its
        file's checksums as it loads it. A file that does not agree or is
        damaged raises FormatError (the shards started for it are ended); a
        shard that dies raises WorkerError.
        """
        directory = os.fspath(path)
        m = _manifest.read_manifest(directory)
        example = check_shard_files(directory, m)
        files = [os.path.join(directory, f) for f in m.files]
        spec = {"example": example, "prioritized": m.prioritized, "alpha": m.alpha,
                "beta": m.beta}
        n = m.num_shards if num_shards is None else _positive(num_shards, "num_shards")
        self = cls.__new__(cls)
        same = n == m.num_shards
        capacities = list(m.capacities) if same else _split(sum(m.capacities), n)
        if min(capacities) < 1:
            raise ValueError(f"ShardedReplay.restore: {sum(m.capacities)} rows of capacity "
                             f"cannot be split over {n} shards")
        self._setup(spec, capacities, actor_options, m.seed_entropy)
        self._rng = np.random.Generator(np.random.PCG64())
        set_pcg64_words(self._rng, np.array(m.rng, np.uint64), f"manifest of {directory!r}")
        self._generation = m.generation
        seeds = np.random.SeedSequence(m.seed_entropy, spawn_key=(m.generation, n))
        # on the same count a shard's buffer is made from its file by load()
        self._start([(dict(spec, capacity=None if same else c), s) for c, s in
                     zip(capacities, seeds.spawn(n), strict=True)])
        try:
            if same:
                self._writer, self._seq = m.writer, m.seq
                self._restore_get([s.load.remote(f, expected_shard(m, i)) for i, (s, f) in
                                   enumerate(zip(self._shards, files, strict=True))])
            else:
                self._reshard(files, m, example)
        except BaseException:
            self.close()
            raise
        return self

    def _restore_get(self, refs: Any) -> Any:
        """``_get`` for a restore: a shard's FormatError (a damaged or disagreeing
        file) comes back as the FormatError it is."""
        ray = _ray()
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, FormatError):
                raise FormatError(f"ShardedReplay.restore: {exc.cause}") from exc
        return self._get(refs, "restore")

    def _reshard(self, files: list[str], m: _manifest.Manifest, example: Any) -> None:
        from ..checkpoint import load
        from ..checkpoint._read import mappable
        from ..training.sum_tree import tree_problem
        states = []
        for f, capacity, size in zip(files, m.capacities, m.rows, strict=True):
            # verified (checksums); rows go in through extend and update_priorities,
            # which check them again; the trees the priorities come from hold together
            state = load(f, mmap_mode=mappable(f), verify=True)["buffer"]
            cursor = state.get("cursor")
            if isinstance(cursor, bool) or not isinstance(cursor, int | np.integer) or not (
                    0 <= cursor < capacity and size in (capacity, cursor)):
                raise FormatError(f"ShardedReplay.restore: {f!r}: cursor {cursor!r:.40} does "
                                  f"not fit {size} rows of {capacity}")
            problem = tree_problem(np.asarray(state["sum_tree"]), np.asarray(state["min_tree"]),
                                   capacity, size) if m.prioritized else None
            if problem is not None:
                raise FormatError(f"ShardedReplay.restore: {f!r}: the saved trees do not "
                                  f"hold together: {problem}")
            states.append(state)
        sizes = [int(s["size"]) for s in states]
        # every old row by relative age (0 oldest), interleaving the old shards
        owner = np.concatenate([np.full(k, i) for i, k in enumerate(sizes)]).astype(np.int64)
        rank = np.concatenate([np.arange(k) for k in sizes]).astype(np.int64)
        age = np.concatenate([np.arange(k) / k for k in sizes if k]) if any(sizes) else \
            np.zeros(0)
        order = np.argsort(age, kind="stable")
        owner, rank = owner[order], rank[order]
        n = len(self._shards)
        chunk = max(1, _CHUNK_BYTES // max(1, _row_bytes(example)))
        for j, shard in enumerate(self._shards):
            mine_owner, mine_rank = owner[j::n], rank[j::n]
            for start in range(0, len(mine_owner), chunk):
                o, r = mine_owner[start:start + chunk], mine_rank[start:start + chunk]
                parts: list[Any] = []
                prios: list[Any] = []
                pos: list[Any] = []
                for i in np.unique(o):
                    sel = np.flatnonzero(o == i)
                    rows, prio = ordered_rows(states[i], r[sel])
                    parts.append(rows)
                    prios.append(prio)
                    pos.append(sel)
                back = np.argsort(np.concatenate(pos), kind="stable")
                batch = _concat(parts)[back]
                prio = np.concatenate(prios)[back] if m.prioritized else None
                self._get(shard.put_rows.remote(batch, prio, m.alpha), "restore")

    def close(self) -> None:
        """End the shard actors (the replay's rows go with them)."""
        ray = _ray()
        for s in self._shards:
            ray.kill(s)
        self._shards = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "prioritized" if self.prioritized else "uniform"
        return (f"<ShardedReplay: {kind}, {len(self._shards)} shards, capacity "
                f"{self.capacity}>")


def _rebuild(spec: dict[str, Any], capacities: list[int], options: dict[str, Any], entropy: int,
             shards: list[Any], beta: float) -> ShardedReplay[Any, Any]:
    """A copy of a handle in another process: its own writer id, not the owner."""
    self: ShardedReplay[Any, Any] = ShardedReplay.__new__(ShardedReplay)
    self._setup(dict(spec, beta=beta), capacities, options, entropy)
    self._owner = False
    self._rng = np.random.Generator(np.random.PCG64())
    self._shards = list(shards)
    return self


def _positive(value: Any, name: str) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"ShardedReplay: {name} must be an int, got "
                        f"{type(value).__name__}") from None
    if n < 1:
        raise ValueError(f"ShardedReplay: {name} must be at least 1, got {n}")
    return n


def _one(step: Any) -> Any:
    """A step as a batch of one."""
    if is_named(step):
        return type(step)(*(_one(v) for v in step))
    return None if step is None else np.asarray(step)[None]


def _remove_strays(directory: str, generation: int, files: list[str]) -> None:
    """Shard files in this generation's slot that the manifest does not name."""
    slot = f"slot{generation % 2}"
    keep = {os.path.basename(f) for f in files}
    with os.scandir(os.path.join(directory, slot)) as entries:
        for entry in entries:
            if entry.name.endswith(".nsb") and entry.name not in keep:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass
