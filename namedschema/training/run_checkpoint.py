"""``RunCheckpoint``: checkpoint and resume a whole training loop, exactly.

RunCheckpoint         the checkpoint of one run: what it is made of, restore, save
StateMismatchError    a checkpoint that does not fit the run (names, kinds and array shapes are
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

import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Iterable
from typing import Any, Literal

from .._core.tree import join_path
from ..checkpoint import save
from ..checkpoint._background import written
from ..checkpoint._compression import compression_argument
from ..checkpoint._read import load_for_restore
from ..checkpoint._write import free_bytes, state_bytes
from ..errors import FormatError, RunCheckpointError, RunCheckpointWarning, StateMismatchError
from ..state import plain as _plain_state
from ..state import rng as _rng_state
from . import audit as _audit
from .state_kinds import (
    CLASS_SETTING,
    KindContext,
    StateKind,
    kind_named,
    kind_of,
    names_its_component,
)

_log = logging.getLogger("namedschema")

# What a row's check or a malformed file may raise: turned into one StateMismatchError.
_BAD_STATE = (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError,
              RuntimeError, SystemError)
_COMPONENT_KEYS = {"kind", "state", "settings"}
_TOP_KEYS = {"format", "version", "step", "rng", "components", "loop"}
# A setting that differs: (component name, key, saved value, this run's value).
_Change = tuple[str, str, Any, Any]

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
        verify: :meth:`restore` checks the CRC-32 of every block it reads (all
            of the file), so damaged weights are refused, not restored. False
            skips that pass over the data (see :doc:`/resume` for its cost).
        accept_changes: settings the run may change on resume, by the names
            the refusal lists (``"opt.lr"``, ``"envs.envs[0].TimeLimit._max_episode_steps"``,
            ``"rb.alpha"``; a name also covers the names below it, ``"opt"`` all of
            the optimizer's), or ``True`` for all. What the run was built with in
            code (an optimizer's hyperparameters, a scheduler's, an env's step
            limit, a prioritized replay's ``alpha``/``beta``, taken by
            :meth:`track`) is stored in each checkpoint; by default a resume
            into a run built with other values is refused, naming each
            difference. An accepted one keeps the run's new value (after the
            checkpoint's state is restored) and is said as a
            :class:`~namedschema.errors.RunCheckpointWarning`. Another class of a tracked object
            (an SGD where Adam was saved) is always refused.
        quiet: :meth:`restore` says that it resumed on a logging INFO record of
            the ``"namedschema"`` logger, and also on one line of stderr unless
            ``quiet``.
        compression: as in :func:`namedschema.save`: ``"auto"`` (the default:
            uint8/int8/bool arrays such as frames compressed, float arrays raw;
            all raw where ``zstandard`` is missing), None (raw), ``"zstd"`` or
            ``("zstd", level)``. Checked here. A restore decompresses a replay
            buffer's frames straight into the buffer. See :doc:`/checkpoints`,
            "Compressed checkpoints of a run", for what the default costs and saves.

    The folder of ``path`` must exist and be writable when the checkpoint is
    made (a :class:`~namedschema.errors.StateMismatchError` names it otherwise), and the first save
    of a new run is written before :meth:`save` returns (so that a target
    that cannot be written fails at once, not at the next save).

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
                 allow_pickle: bool = False, verify: bool = True,
                 accept_changes: Literal[True] | str | Iterable[str] = (),
                 quiet: bool = False,
                 compression: str | tuple[str, int] | None = "auto"):
        self.path = os.fspath(path)
        compression_argument(compression, caller="RunCheckpoint")   # refused now, not later
        self.compression = compression
        _check_target(self.path)
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
        self.verify, self.quiet = bool(verify), bool(quiet)
        self.accept_changes = _accepted(accept_changes)
        self._pending: Any = None          # the background save in flight
        self._components: dict[str, tuple[StateKind, Any]] = {}
        self._settings: dict[str, dict[str, Any]] = {}   # as tracked: what the run chose in code
        self.step: int | None = None
        self.loop: dict[str, Any] = {}
        self.restarted: dict[str, str] = {}
        self._last_time = time.monotonic()
        self._warned: set[str] = set()
        self._audit = _audit.follow_run_checkpoint(self)  # check-resume's records, or None

    # -- registering -----------------------------------------------------------------

    def track(self, **components: Any) -> RunCheckpoint:
        """Register what the run is made of, by name; returns the checkpoint."""
        for name, obj in components.items():
            if name in self._components:
                raise ValueError(f"RunCheckpoint.track: {name!r} is registered already")
            kind = kind_of(obj)
            self._components[name] = (kind, obj)
            if kind.settings is not None:
                self._settings[name] = dict(kind.settings(obj, self._context(name)))
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
                if name in self._settings:
                    components[name]["settings"] = self._settings[name]
            except _plain_state.NotDataValue as exc:
                raise StateMismatchError(
                    f"RunCheckpoint: {exc}; pass RunCheckpoint(..., allow_pickle=True) to "
                    "store it by pickling") from None
        try:
            loop_state = _plain_state.to_data(loop, "loop", self.allow_pickle)
        except _plain_state.NotDataValue as exc:
            raise StateMismatchError(f"RunCheckpoint.save: {exc}") from None
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
                                  "metadata": {"kind": FORMAT, "version": str(VERSION)},
                                  "compression": self.compression}
        if self.allow_pickle:
            kwargs["allow_pickle"] = True
        state = self.state(step, **loop)
        if self.step is None:     # a new run's first save: refused now if it cannot fit
            _check_room(self.path, state, compression_argument(
                self.compression, caller="RunCheckpoint"))
        self.wait()       # the previous save's error, if any, is raised here, not lost
        if self._audit is not None:
            self._audit.progress(step)
            self._audit.save_begin(step)
        try:
            if self.background:
                self._pending = save(state, self.path, background=True, **kwargs)
                if self.step is None:     # a new run's first save: its error, now
                    self.wait()
            else:
                save(state, self.path, **kwargs)
        except OSError as exc:
            if self.step is not None:
                raise
            raise StateMismatchError(f"RunCheckpoint: the first checkpoint could not be "
                                     f"written to {self.path!r}: {exc}") from exc
        if self._audit is not None:
            _audit.record_run_checkpoint_save(self._audit, step, self.path)
        self._last_time = time.monotonic()
        self.step = int(step)

    def wait(self) -> None:
        """Wait until the last :meth:`save` is on disk; raise the error it met, if any.

        Under ``namedschema check-resume``, also wait for the save's audit record.
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.wait()
        if self._audit is not None:
            self._audit.flush()

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

    def at_step(self, step: int) -> None:
        """Say that the run is at ``step`` (:meth:`maybe_save` and :meth:`save` say it).

        Only ``namedschema check-resume`` listens (it reports the step each kill
        hit); a loop that saves with :meth:`save` alone may call this each step.
        Without the check it does nothing.
        """
        if self._audit is not None:
            self._audit.progress(step)

    def maybe_save(self, step: int, **loop: Any) -> bool:
        """Save if ``step`` reached the next multiple of ``every_steps`` (or time is up)."""
        self.at_step(step)
        if not self.due(step):
            return False
        self.save(step, **loop)
        return True

    # -- restoring -------------------------------------------------------------------

    def restore(self) -> bool:
        """Restore the last checkpoint into the registered objects; whether there was one.

        The whole file is checked before anything in the run changes: its
        checksums (unless ``verify=False``), its structure, and each saved part
        against its object (a torch module's parameter names, shapes and dtypes,
        an optimizer's class, parameter groups and state sizes, a replay
        buffer's fields and counters, an env's wrappers and values, generator
        states, the loop's values), and the settings the run was built with
        against the checkpoint's (``accept_changes``). Any of it that does not
        fit raises one :class:`~namedschema.errors.StateMismatchError` and the
        run is as it was. Envs that were not captured are left as they are and
        listed in ``ckpt.restarted`` (with a
        :class:`~namedschema.errors.RunCheckpointWarning`): reset them. A
        resume is said once (``quiet``).
        """
        written(self.path)   # a background save of this process to it, if one runs
        if not os.path.exists(self.path):
            return False
        try:  # with allow_pickle, only a file whose header says it is ours is unpickled
            data = load_for_restore(
                self.path, allow_pickle=self.allow_pickle, verify=self.verify,
                expect_metadata={"kind": FORMAT} if self.allow_pickle else None,
                defer=self._copied())
        except FormatError as exc:
            if exc.expected is not None:  # a namedschema checkpoint of another kind
                raise StateMismatchError(
                    f"RunCheckpoint: {self.path!r} is not a RunCheckpoint file (its header "
                    "does not say so; nothing in it was unpickled); refusing to use or "
                    "overwrite it") from exc
            raise StateMismatchError(
                f"RunCheckpoint: {self.path!r} cannot be restored: {exc} (nothing in the run "
                "changed; delete the file to start fresh)") from exc
        rng, loop, accepted = self._checked(data)
        done: list[str] = []
        for name, (kind, obj) in self._components.items():
            self._restore_one(name, kind, obj, data["components"][name]["state"], done)
            done.append(name)
        self._keep_accepted(accepted)
        if rng is not None:
            _rng_state.set_rng_state(_plain_state.from_data(rng))
        self.loop = loop
        self.step = int(data["step"])
        self._last_time = time.monotonic()
        self._say_resumed()
        if self._audit is not None:
            self._audit.record_restore(self.step)
        return True

    def _copied(self) -> Any:
        """Which arrays of the file the rows copy into the run's own (``StateKind.copied``):
        left compressed by the load, they are decompressed straight into them."""
        prefixes = []
        for name, (kind, obj) in self._components.items():
            state = join_path(join_path("components", name), "state")
            for part in kind.copied(obj) if kind.copied is not None else ():
                prefixes.append(join_path(state, part) if part else state)

        def defer(path: str) -> bool:
            return any(path == p or path.startswith((p + ".", p + "[")) for p in prefixes)
        return defer

    def _say_resumed(self) -> None:
        message = (f"namedschema: resumed from {self.path} at step {self.step:,} (delete it "
                   "to start fresh)")
        _log.info(message)
        if not self.quiet:
            print(message, file=sys.stderr, flush=True)

    def _refuse(self, message: str) -> StateMismatchError:
        return StateMismatchError(f"RunCheckpoint: {self.path!r} {message}")

    def _checked(self, data: Any) -> tuple[Any, dict[str, Any], list[_Change]]:
        """Check the whole file against the run; ``(rng, loop, accepted changes)``."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise self._refuse("is not a RunCheckpoint file; refusing to use or overwrite it")
        if data.get("version") != VERSION:
            raise self._refuse(f"has version {data.get('version')!r:.40}, this namedschema "
                               f"reads {VERSION}")
        if set(data) != _TOP_KEYS:
            raise self._refuse(f"is malformed: its top level holds {sorted(map(str, data))[:10]}"
                               f", not {sorted(_TOP_KEYS)}")
        step, components = data["step"], data["components"]
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 1 << 62:
            raise self._refuse(f"is malformed: its step is {step!r:.40}")
        if not isinstance(components, dict) or not all(
                isinstance(c, dict) and {"kind", "state"} <= set(c) <= _COMPONENT_KEYS and
                isinstance(c["kind"], str) for c in components.values()):
            raise self._refuse("is malformed: its components are not {kind, state} entries")
        saved, built = set(components), set(self._components)
        if saved != built:
            raise self._refuse(
                f"holds {sorted(saved)}, this run tracks {sorted(built)} (missing from the "
                f"file: {sorted(built - saved)}; not tracked: {sorted(saved - built)})")
        for name, (kind, _) in self._components.items():
            saved_kind = components[name]["kind"]
            if saved_kind != kind.name:
                known = "" if kind_named(saved_kind) is not None else " (a kind this " \
                    "namedschema does not know)"
                raise StateMismatchError(
                    f"RunCheckpoint: {name!r} was saved as {saved_kind:.60}{known}, this "
                    f"run's is captured as {kind.name}", where=name)
        changes = self._changes(components)
        for name, (kind, obj) in self._components.items():
            if kind.check is not None:
                try:
                    kind.check(obj, components[name]["state"], self._context(name))
                except _BAD_STATE as exc:
                    if names_its_component(exc):
                        raise
                    raise StateMismatchError(
                        f"RunCheckpoint: {name!r} cannot be restored from {self.path!r}: "
                        f"{type(exc).__name__}: {exc} (nothing in the run changed)",
                        where=name) from exc
        rng = data["rng"]
        if (rng is None) == self.global_rngs:
            raise self._refuse(f"was saved with global_rngs={rng is not None}, this run has "
                               f"global_rngs={self.global_rngs}")
        try:
            if rng is not None:
                _rng_state.check_rng_state(_plain_state.from_data(rng, copy=False))
            loop = _plain_state.from_data(data["loop"])
            if not isinstance(loop, dict):
                raise TypeError(f"the loop's variables are a {type(loop).__name__}")
        except _BAD_STATE as exc:
            raise self._refuse(f"is malformed: {type(exc).__name__}: {exc} (nothing in the "
                               "run changed)") from exc
        return rng, loop, self._accepted_changes(changes)

    def _changes(self, components: dict[str, Any]) -> list[_Change]:
        """``(name, key, saved value, this run's value)`` of each setting that differs."""
        out: list[_Change] = []
        for name in self._components:
            saved = components[name].get("settings")
            if saved is None or name not in self._settings:
                continue           # a file from before settings were stored: as before
            if not isinstance(saved, dict) or not all(
                    isinstance(k, str) and _comparable(v) is not _BAD for k, v in
                    saved.items()):
                raise self._refuse(f"is malformed: the settings of {name!r} are not plain data")
            now = self._settings[name]
            for key in sorted(set(saved) | set(now)):
                old, new = saved.get(key, _ABSENT), now.get(key, _ABSENT)
                if _comparable(old) != _comparable(new):
                    out.append((name, key, old, new))
        for name, key, old, new in out:
            if key == CLASS_SETTING:
                raise StateMismatchError(
                    f"RunCheckpoint: {name!r} was saved from a {old!s:.100}, this run's is a "
                    f"{new!s:.100}; a checkpoint restores only into the class it was saved "
                    "from", where=name)
        return out

    def _accepted_changes(self, changes: list[_Change]) -> list[_Change]:
        accept = self.accept_changes
        refused = [c for c in changes if not (accept is True or _matches(f"{c[0]}.{c[1]}",
                                                                         accept))]
        if refused:
            names = [f"{name}.{key}" for name, key, _o, _n in refused]
            raise self._refuse(
                "was written by a run built with other settings: "
                f"{_describe(refused)}. Resuming would restore the checkpoint's values; to "
                f"resume with this run's deliberately, {self._how_to_accept(names)}; nothing "
                "in the run changed")
        return changes

    def _how_to_accept(self, names: list[str]) -> str:
        """How the user accepts the changes ``names`` (a wrapper names its own argument)."""
        return f"pass RunCheckpoint(..., accept_changes={names!r}) (or accept_changes=True)"

    def _keep_accepted(self, accepted: list[_Change]) -> None:
        if not accepted:
            return
        for name, (kind, obj) in self._components.items():
            values = {key: new for n, key, _old, new in accepted
                      if n == name and new is not _ABSENT}
            if values and kind.keep_settings is not None:
                kind.keep_settings(obj, values, self._context(name))
        self._warn_once("accepted changes", "resuming with this run's settings (accepted, "
                        f"they are kept): {_describe(accepted)}")

    def _restore_one(self, name: str, kind: StateKind, obj: Any, state: Any,
                     done: list[str]) -> None:
        try:
            kind.apply(obj, state, self._context(name))
        except (StateMismatchError, *_BAD_STATE) as exc:
            raise StateMismatchError(f"RunCheckpoint: {name!r} cannot be restored from "
                                     f"{self.path!r}: {type(exc).__name__}: {exc} (already "
                                     f"restored: {done})", where=name) from exc


class _Absent:
    def __repr__(self) -> str:
        return "absent"


_ABSENT = _Absent()
_BAD = object()


def _comparable(value: Any) -> Any:
    """A setting as a value to compare (lists as tuples, NaN equal to NaN), or ``_BAD``."""
    if value is _ABSENT or value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return "nan" if math.isnan(value) else value
    if isinstance(value, (tuple, list)) and len(value) <= 64:
        items = tuple(_comparable(v) for v in value)
        return _BAD if any(i is _BAD for i in items) else items
    return _BAD


def _describe(changes: list[_Change]) -> str:
    return "; ".join(f"{name}.{key}: {old!r:.60} in the checkpoint, {new!r:.60} in this run"
                     for name, key, old, new in changes)


def _matches(key: str, names: tuple[str, ...]) -> bool:
    return any(key == n or key.startswith((n + ".", n + "[")) for n in names)


def _accepted(value: Any) -> Literal[True] | tuple[str, ...]:
    """``accept_changes`` as True or a tuple of names (ValueError otherwise)."""
    if value is True:
        return True
    names = (value,) if isinstance(value, str) else value
    try:
        names = tuple(names)
    except TypeError:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise ValueError("RunCheckpoint: accept_changes must be True or names of settings "
                         f"such as 'opt.lr', not {value!r:.100}")
    return names


def _check_room(path: str, state: Any, compression: Any = None) -> None:
    """Refuse, before the first save writes anything, a state larger than the space there
    (free space plus the file it replaces: what ``resumable`` checks at startup).

    With ``compression`` only what it stores raw counts (``state_bytes``): the size of
    the rest is known once written, and a save that does not fit fails as it writes,
    leaving the previous file as it was."""
    try:
        free = free_bytes(path)
    except OSError:       # the folder went away: the save itself says so
        return
    need = state_bytes(state, compression)
    if need > free:
        what = ("the tracked arrays and tensors, replay buffers included" if compression
                is None else "the tracked arrays and tensors that are not compressed")
        raise StateMismatchError(
            f"RunCheckpoint: the checkpoint {path!r} needs about {need:,} bytes "
            f"({need / 2**30:.2f} GiB: {what}), but only {free:,} bytes "
            f"({free / 2**30:.2f} GiB) are free there; "
            "free some space or give a path on another file system")


def _check_target(path: str) -> None:
    """Refuse, when the checkpoint is made, a target that no save could write."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise StateMismatchError(f"RunCheckpoint: {path!r} is a directory, not a checkpoint "
                                 "file")
    if not os.path.isdir(folder):
        raise StateMismatchError(f"RunCheckpoint: the folder {folder!r} of the checkpoint "
                                 f"{path!r} does not exist (create it first)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StateMismatchError(f"RunCheckpoint: the folder {folder!r} of the checkpoint "
                                 f"{path!r} is not writable")
