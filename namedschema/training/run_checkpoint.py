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
import random
import time
import warnings
from typing import Any

import numpy as np

from .._core.optional import torch_if_loaded
from ..checkpoint import load, save
from ..checkpoint.background import written
from ..errors import RunCheckpointError, RunCheckpointWarning, UnexpectedKindError
from ..state import plain as _plain_state
from ..state import rng as _rng_state
from ..state.env import capture_env, restore_env
from . import audit as _audit
from .replay import ReplayBuffer

__all__ = ["RunCheckpoint", "RunCheckpointError", "RunCheckpointWarning"]

FORMAT = "namedschema.RunCheckpoint"
VERSION = 1


def _kind(obj: Any) -> str:
    """How a registered object's state is captured."""
    torch = torch_if_loaded()
    if callable(getattr(obj, "capture_state", None)) and \
            callable(getattr(obj, "restore_state", None)):
        return "protocol"
    if isinstance(obj, np.random.Generator):
        return "generator"
    if isinstance(obj, np.random.RandomState) or obj is np.random:
        return "numpy_random_state"
    if isinstance(obj, random.Random) or obj is random:
        return "python_random"
    if torch is not None and (isinstance(obj, torch.Generator) or obj is torch):
        return "torch_generator"
    if callable(getattr(obj, "state_dict", None)) and \
            callable(getattr(obj, "load_state_dict", None)):
        return "state_dict"
    if callable(getattr(obj, "step", None)) and callable(getattr(obj, "reset", None)):
        return "env"
    if type(obj) is dict:
        return "dict"
    if isinstance(obj, np.ndarray):
        return "array"
    raise TypeError(f"RunCheckpoint.track: cannot capture a {type(obj).__qualname__}: track "
                    "objects with state_dict()/load_state_dict() (torch modules, optimizers, "
                    "schedulers, namedschema replay buffers), capture_state()/"
                    "restore_state(state), gymnasium envs, numpy/Python/torch generators, "
                    "dicts (counters) or numpy arrays")


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
        self._components: dict[str, tuple[str, Any]] = {}
        self.step: int | None = None
        self.loop: dict = {}
        self.restarted: dict[str, str] = {}
        self._last_time = time.monotonic()
        self._warned: set = set()
        self._audit = _audit.follow_run_checkpoint(self)  # check-resume's records, or None

    # -- registering -----------------------------------------------------------------

    def track(self, **components: Any) -> RunCheckpoint:
        """Register what the run is made of, by name; returns the checkpoint."""
        for name, obj in components.items():
            if name in self._components:
                raise ValueError(f"RunCheckpoint.track: {name!r} is registered already")
            self._components[name] = (_kind(obj), obj)
        return self

    # -- capturing -------------------------------------------------------------------

    def _capture(self, name: str, kind: str, obj: Any) -> Any:
        torch = torch_if_loaded()
        if kind == "protocol":
            return obj.capture_state()
        if kind == "generator":
            return _plain_state.to_data(obj.bit_generator.state, name)
        if kind == "numpy_random_state":
            k, keys, pos, has_gauss, gauss = obj.get_state()
            return {"keys": keys, "pos": int(pos), "has_gauss": int(has_gauss),
                    "gauss": float(gauss)}
        if kind == "python_random":
            version, internal, gauss = obj.getstate()
            return {"version": version, "internal": np.array(internal, np.uint64),
                    "gauss": gauss}
        if kind == "torch_generator":
            return (torch.get_rng_state() if obj is torch else obj.get_state()).clone()
        if kind == "state_dict":
            return _plain_state.to_data(obj.state_dict(), name, self.allow_pickle)
        if kind == "env":
            state, reason = capture_env(obj, name)
            if state is None:
                self._warn_once(name, f"env {name!r} cannot be captured exactly ({reason}); "
                                "a resumed run restarts it with new episodes")
                return {"restarted": reason}
            return {"captured": state}
        if kind == "dict":
            return _plain_state.to_data(obj, name, self.allow_pickle)
        return obj   # an array: stored as it is (no copy)

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
                components[name] = {"kind": kind, "state": self._capture(name, kind, obj)}
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
        if self._audit is not None:
            self._audit.save_begin(step)
        if self.background:
            self._pending = save(state, self.path, background=True, **kwargs)
        else:
            save(state, self.path, **kwargs)
        if self._audit is not None:
            _audit.record_run_checkpoint_save(self._audit, step, self.path)
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
        if self._audit is not None:
            self._audit.progress(step)
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
        if self._audit is not None:
            self._audit.record_restore(self.step)
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
            if data["components"][name]["kind"] != kind:
                raise RunCheckpointError(
                    f"RunCheckpoint: {name!r} was saved as {data['components'][name]['kind']}"
                    f", this run's is captured as {kind}")
        for name, (kind, obj) in self._components.items():
            saved = data["components"][name]["state"]
            if kind == "array" and (np.shape(saved) != obj.shape or
                                    getattr(saved, "dtype", None) != obj.dtype):
                raise RunCheckpointError(
                    f"RunCheckpoint: {name!r} was saved as an array of "
                    f"{getattr(saved, 'dtype', type(saved).__name__)} {np.shape(saved)}, this "
                    f"run's is {obj.dtype} {obj.shape}")
        if (data["rng"] is None) == self.global_rngs:
            raise RunCheckpointError(f"RunCheckpoint: {self.path!r} was saved with "
                                     f"global_rngs={data['rng'] is not None}, this run has "
                                     f"global_rngs={self.global_rngs}")

    def _restore_one(self, name: str, kind: str, obj: Any, state: Any, done: list) -> None:
        try:
            self._apply(name, kind, obj, state)
        except (RunCheckpointError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise RunCheckpointError(f"RunCheckpoint: {name!r} cannot be restored from "
                                     f"{self.path!r}: {type(exc).__name__}: {exc} (already "
                                     f"restored: {done})") from exc

    def _apply(self, name: str, kind: str, obj: Any, state: Any) -> None:
        torch = torch_if_loaded()
        if kind == "protocol":
            obj.restore_state(_plain_state.from_data(state))
        elif kind == "generator":
            obj.bit_generator.state = _plain_state.from_data(state)
        elif kind == "numpy_random_state":
            obj.set_state(("MT19937", np.array(state["keys"], np.uint32), state["pos"],
                           state["has_gauss"], state["gauss"]))
        elif kind == "python_random":
            obj.setstate((state["version"], tuple(int(x) for x in state["internal"]),
                          state["gauss"]))
        elif kind == "torch_generator":
            (torch.set_rng_state if obj is torch else obj.set_state)(state.clone())
        elif kind == "state_dict":
            # namedschema's replay buffers copy into their own arrays: no second copy.
            obj.load_state_dict(state if isinstance(obj, ReplayBuffer)
                                else _plain_state.from_data(state))
        elif kind == "env":
            self._restore_env(name, obj, state)
        elif kind == "dict":
            obj.clear()
            obj.update(_plain_state.from_data(state))
        else:
            np.copyto(obj, state, casting="no")

    def _restore_env(self, name: str, env: Any, state: dict) -> None:
        if "restarted" in state:
            self.restarted[name] = state["restarted"]
            self._warn_once(name, f"env {name!r} was not captured ({state['restarted']}); it "
                            "is not restored: reset it")
            return
        restore_env(env, state["captured"], name)

