"""``RunCheckpoint``: checkpoint and resume a whole training loop, exactly.

RunCheckpoint         the checkpoint of one run: what it is made of, restore, save
RunCheckpointError    a checkpoint that does not fit the run (names, kinds and array shapes are
                      checked before anything changes; see :meth:`RunCheckpoint.restore`)
RunCheckpointWarning  part of the run that is restarted rather than resumed (said once)

The user registers what the run is made of (:meth:`RunCheckpoint.track`): models,
optimizers, schedulers, replay buffers (anything with ``state_dict`` /
``load_state_dict``), environments, counters (a dict), numpy ``Generator`` s,
``random.Random`` s, ``torch.Generator`` s; the global generators of Python,
numpy and torch are included by default. :meth:`~RunCheckpoint.restore` puts a
saved state back into the freshly built objects and says whether it did;
:meth:`~RunCheckpoint.save` and :meth:`~RunCheckpoint.maybe_save` write the whole
state as plain data (no pickle) with :func:`namedschema.save`: atomically, and
incrementally by default (only what changed since the last save is rewritten,
crash-safe through a journal). Capturing a state never draws from any generator
and changes nothing in the run, so a run killed at any moment and resumed from
its last checkpoint continues exactly as the uninterrupted run (on the CPU with
deterministic torch: bit for bit).
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

from ..checkpoint import load, save
from ..checkpoint.background import written
from ..errors import RunCheckpointError, RunCheckpointWarning, UnexpectedKindError
from ..state import plain as _plain_state
from ..state import rng as _rng_state
from .state_kinds import KindContext, StateKind, kind_named, kind_of

__all__ = ["RunCheckpoint", "RunCheckpointError", "RunCheckpointWarning"]

FORMAT = "namedschema.RunCheckpoint"
VERSION = 1


class RunCheckpoint:
    """The checkpoint of one training run, kept at ``path``.

    Args:
        path: the checkpoint file (``.nsc`` by convention).
        every_steps: :meth:`maybe_save` saves when ``step`` reaches the next
            multiple of this.
        every_seconds: :meth:`maybe_save` also saves when this long has passed
            since the last save (or the start).
        global_rngs: capture Python's ``random``, numpy's global generator and
            torch's (CPU and initialized CUDA devices), if torch is imported.
        incremental: rewrite only what changed since the last save (see
            :doc:`/incremental`); False writes a whole new file every time.
        background: :meth:`save` returns once the state is captured and the
            changed bytes are copied aside (or a fork holds the snapshot); the
            file is written and synced while the loop goes on. The next save
            waits for it, and so does :meth:`wait`, which raises its error
            (:doc:`/incremental`, "Background checkpoints"). False writes before
            returning.
        allow_pickle: store values that are not data (a scheduler's function)
            by pickling; loading such a file runs code, so it is off by default
            and such values are refused at the first save, named. With it,
            :meth:`restore` unpickles the file, and only once its header
            (plain data) says it is a RunCheckpoint.

    A loop, CleanRL style (``rb`` a :class:`~namedschema.ReplayBuffer`)::

        ckpt = namedschema.RunCheckpoint("run.nsc", every_steps=10_000)
        ckpt.track(q_network=q_network, target=target_network, optimizer=optimizer,
                   replay=rb, envs=envs, rng=rng)
        obs, _ = envs.reset(seed=seed)
        if ckpt.restore():
            obs = ckpt.loop["obs"]
        for global_step in range(ckpt.next_step, total_timesteps):
            ...                                  # act, store, learn
            ckpt.maybe_save(global_step, obs=obs)
    """

    def __init__(self, path: str | os.PathLike[str], *, every_steps: int | None = None,
                 every_seconds: float | None = None, global_rngs: bool = True,
                 incremental: bool = True, background: bool = True,
                 allow_pickle: bool = False):
        self.path = os.fspath(path)
        if every_steps is not None and (not isinstance(every_steps, int) or every_steps < 1):
            raise ValueError(f"RunCheckpoint: every_steps must be a positive int, got "
                             f"{every_steps!r}")
        if every_seconds is not None and not every_seconds > 0:
            raise ValueError(f"RunCheckpoint: every_seconds must be positive, got "
                             f"{every_seconds!r}")
        self.every_steps, self.every_seconds = every_steps, every_seconds
        self.global_rngs, self.incremental, self.allow_pickle = \
            bool(global_rngs), bool(incremental), bool(allow_pickle)
        self.background = bool(background)
        self._pending: Any = None          # the background save in flight
        self._components: dict[str, tuple[StateKind, Any]] = {}
        self.step: int | None = None
        self.loop: dict = {}
        self.restarted: dict[str, str] = {}
        self._last_time = time.monotonic()
        self._warned: set = set()

    # -- registering -----------------------------------------------------------------

    def track(self, **components: Any) -> RunCheckpoint:
        """Register what the run is made of, by name; returns the checkpoint."""
        for name, obj in components.items():
            if name in self._components:
                raise ValueError(f"RunCheckpoint.track: {name!r} is registered already")
            self._components[name] = (kind_of(obj), obj)
        return self

    # -- capturing -------------------------------------------------------------------

    def _context(self, name: str) -> KindContext:
        return KindContext(name, self.path, self.allow_pickle, self._warn_once, self.restarted)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"namedschema.RunCheckpoint: {message}", RunCheckpointWarning,
                          stacklevel=4)

    def state(self, step: int, **loop: Any) -> dict[str, Any]:
        """The checkpoint's content for ``step`` (what :meth:`save` writes)."""
        components = {}
        for name, (kind, obj) in self._components.items():
            try:
                components[name] = {"kind": kind.name,
                                    "state": kind.capture(obj, self._context(name))}
            except _plain_state.NotDataValue as exc:
                raise RunCheckpointError(
                    f"RunCheckpoint: {exc}; pass RunCheckpoint(..., allow_pickle=True) to "
                    "store it by pickling") from None
        try:
            loop_state = _plain_state.to_data(loop, "loop", self.allow_pickle)
        except _plain_state.NotDataValue as exc:
            raise RunCheckpointError(f"RunCheckpoint.save: {exc}") from None
        return {"format": FORMAT, "version": VERSION, "step": int(step),
                "rng": _rng_state.rng_state() if self.global_rngs else None,
                "components": components, "loop": loop_state}

    # -- saving ----------------------------------------------------------------------

    def save(self, step: int, **loop: Any) -> None:
        """Write the whole run's state at ``step`` (atomic; incremental by default).

        ``loop`` holds the loop's own variables that the next iteration needs
        (the current observation, say): after :meth:`restore` they are in
        ``ckpt.loop``.
        """
        kwargs: dict[str, Any] = {"incremental": self.incremental,
                                  "metadata": {"kind": FORMAT, "version": str(VERSION)}}
        if self.allow_pickle:
            kwargs["allow_pickle"] = True
        state = self.state(step, **loop)
        self.wait()       # the previous save's error, if any, is raised here, not lost
        if self.background:
            self._pending = save(state, self.path, background=True, **kwargs)
        else:
            save(state, self.path, **kwargs)
        self._last_time = time.monotonic()
        self.step = int(step)

    def wait(self) -> None:
        """Wait until the last :meth:`save` is on disk; raise the error it met, if any."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.wait()

    @property
    def next_step(self) -> int:
        """One past the last step saved or restored (0 before any), so the step to run next.

        ``ckpt.restore()`` then ``for step in range(ckpt.next_step, total)``
        continues a run, and starts a new one; unlike ``step`` (None until a
        save or restore), it is always an int.
        """
        return 0 if self.step is None else self.step + 1

    def due(self, step: int) -> bool:
        """Whether :meth:`maybe_save` would save at ``step``."""
        if self.every_steps is not None:
            last = self.next_step - 1
            if step // self.every_steps > last // self.every_steps and step > last:
                return True
        return self.every_seconds is not None and \
            time.monotonic() - self._last_time >= self.every_seconds

    def maybe_save(self, step: int, **loop: Any) -> bool:
        """Save if ``step`` reached the next multiple of ``every_steps`` (or time is up)."""
        if not self.due(step):
            return False
        self.save(step, **loop)
        return True

    # -- restoring -------------------------------------------------------------------

    def restore(self) -> bool:
        """Restore the last checkpoint into the registered objects; whether there was one.

        The names and kinds of what the run tracks, and the shapes and dtypes of
        tracked arrays, are checked against the file before anything is written.
        Other parts (a model, an optimizer, a replay buffer) check their own
        state as they load it: one that does not fit raises
        :class:`~namedschema.errors.RunCheckpointError` naming it and the
        parts already restored (rebuild those before going on). Envs that were not
        captured are left as they are and listed in ``ckpt.restarted`` (with a
        :class:`~namedschema.errors.RunCheckpointWarning`): reset them.
        """
        written(self.path)   # a background save of this process to it, if one runs
        if not os.path.exists(self.path):
            return False
        try:  # with allow_pickle, only a file whose header says it is ours is unpickled
            data = load(
                self.path, mmap_mode="r", allow_pickle=self.allow_pickle,
                expect_metadata={"kind": FORMAT} if self.allow_pickle else None)
        except UnexpectedKindError as exc:
            raise RunCheckpointError(
                f"RunCheckpoint: {self.path!r} is not a RunCheckpoint file (its header does "
                "not say so; nothing in it was unpickled); refusing to use or overwrite "
                "it") from exc
        self._check(data)
        done: list[str] = []
        for name, (kind, obj) in self._components.items():
            self._restore_one(name, kind, obj, data["components"][name]["state"], done)
            done.append(name)
        if data["rng"] is not None:
            _rng_state.set_rng_state(_plain_state.from_data(data["rng"]))
        self.loop = _plain_state.from_data(data["loop"])
        self.step = int(data["step"])
        self._last_time = time.monotonic()
        return True

    def _check(self, data: Any) -> None:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise RunCheckpointError(f"RunCheckpoint: {self.path!r} is not a RunCheckpoint "
                                     "file; refusing to use or overwrite it")
        if data.get("version") != VERSION:
            raise RunCheckpointError(f"RunCheckpoint: {self.path!r} has version "
                                     f"{data.get('version')!r}, this namedschema reads {VERSION}")
        saved, built = set(data["components"]), set(self._components)
        if saved != built:
            raise RunCheckpointError(
                f"RunCheckpoint: {self.path!r} holds {sorted(saved)}, this run tracks "
                f"{sorted(built)} (missing from the file: {sorted(built - saved)}; not "
                f"tracked: {sorted(saved - built)})")
        for name, (kind, _) in self._components.items():
            saved_kind = data["components"][name]["kind"]
            if saved_kind != kind.name:
                known = "" if kind_named(saved_kind) is not None else " (a kind this " \
                    "namedschema does not know)"
                raise RunCheckpointError(
                    f"RunCheckpoint: {name!r} was saved as {saved_kind}{known}, this run's is "
                    f"captured as {kind.name}")
        for name, (kind, obj) in self._components.items():
            if kind.check is not None:
                kind.check(obj, data["components"][name]["state"], self._context(name))
        if (data["rng"] is None) == self.global_rngs:
            raise RunCheckpointError(f"RunCheckpoint: {self.path!r} was saved with "
                                     f"global_rngs={data['rng'] is not None}, this run has "
                                     f"global_rngs={self.global_rngs}")

    def _restore_one(self, name: str, kind: StateKind, obj: Any, state: Any,
                     done: list) -> None:
        try:
            kind.apply(obj, state, self._context(name))
        except (RunCheckpointError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise RunCheckpointError(f"RunCheckpoint: {name!r} cannot be restored from "
                                     f"{self.path!r}: {type(exc).__name__}: {exc} (already "
                                     f"restored: {done})") from exc
