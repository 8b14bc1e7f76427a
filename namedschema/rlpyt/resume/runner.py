"""``resumable(runner, path)``: an rlpyt run that continues from its last checkpoint.

rlpyt's train loops always start at iteration 0 and have no hook to start
elsewhere. Rather than copy them, :func:`resumable` wraps a few methods of the
runner *instance* (nothing in rlpyt's classes changes):

``startup``
    runs rlpyt's own startup (which builds the sampler, agent, algorithm and
    replay buffer as usual), then, if ``path`` holds a checkpoint, writes its
    state into those freshly built objects (``namedschema.rlpyt.resume.state``),
    and says once, before training, what cannot be resumed exactly.
``train``
    runs rlpyt's own ``train``; while it runs, ``logger.set_iteration`` (the
    first statement of each iteration of every rlpyt train loop) also tells
    the resume which iteration begins. That is where checkpoints are written:
    between two iterations, every ``every_itrs`` iterations.
``shutdown``
    writes the final checkpoint before rlpyt's own shutdown (after it, for
    the async runners, once the sampler and memory copiers have stopped).

For the async runners see ``_AsyncResume`` below. Iterations before the
checkpoint's are *skipped*: until the loop reaches the
checkpoint's iteration, the calls the loop body makes (``agent.sample_mode``,
``sampler.obtain_samples``, ``algo.optimize_agent``, the runner's diagnostics
and evaluation) return at once without doing anything. Those stand-ins are
instance attributes of the main process's objects, set after the sampler's
workers started and removed when the checkpoint's iteration begins.

ResumeError    a runner or checkpoint that cannot be resumed (before training)
ResumeWarning  what a resume cannot restore exactly (said once, at start)
resumable      the one call

What ``resumable`` checks and says at the start of a run, before any training
(below, "announcing"): a resume must say so: rlpyt's own log of a resumed run
reads like a fresh start (its startup counts from iteration 0), and rerunning a
command to start anew would quietly continue the old run. And a checkpoint path
that cannot be written must be refused when the run starts, not at the first
checkpoint hours later.

check_target      refuse a checkpoint path that cannot be written (at ``resumable()``)
lack_of_room      a run whose state does not fit the free space (said at startup)
say_resumed       the one line that says a run resumed, through rlpyt's logger
continue_logs     rlpyt's progress.csv continues across the resume
Offset / OffsetSampler  the iteration offsets of a resumed async run
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar

from ... import checkpoint as _checkpoint
from ...checkpoint._compression import compression_argument
from ...checkpoint._read import mappable
from ...checkpoint._write import free_bytes, state_bytes, unwritable
from ...errors import FormatError, ResumeError, ResumeWarning
from ..patch.install import continue_tabular_logs, open_tabular_logs
from . import arguments as _arguments
from . import state as _state
from . import table as _table
from . import workers as _workers
from .checkpoint_writer import CheckpointWriter

__all__ = ["resumable", "ResumeError", "ResumeWarning", "CHECKPOINT_KIND", "check_target",
           "lack_of_room", "say_resumed", "continue_logs", "Offset", "OffsetSampler"]

CHECKPOINT_KIND = "namedschema.rlpyt.resume"

_Runner = TypeVar("_Runner")
CHECKPOINT_VERSION = 1
# Plain data in the file's header, checked before anything in the file is unpickled.
_MARKER = {"kind": CHECKPOINT_KIND, "version": str(CHECKPOINT_VERSION)}

# Runner classes resumable() drives, by rlpyt class name (subclasses included).
_MINIBATCH = ("rlpyt.runners.minibatch_rl.MinibatchRl",
              "rlpyt.runners.minibatch_rl.MinibatchRlEval")
_ASYNC = ("rlpyt.runners.async_rl.AsyncRl", "rlpyt.runners.async_rl.AsyncRlEval")
_REFUSED = {
    "rlpyt.runners.sync_rl.SyncRlMixin":
        "SyncRl/SyncRlEval run one optimizer per process, and their state is not "
        "gathered in the main process",
}


def _class_names(obj: object) -> list[str]:
    return [f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__]


def _kind(runner: object) -> str:
    names = _class_names(runner)
    for name, why in _REFUSED.items():
        if name in names:
            raise ResumeError(f"resumable: {type(runner).__name__} cannot be resumed: {why}")
    if any(name in names for name in _MINIBATCH):
        return "minibatch"
    if any(name in names for name in _ASYNC):
        return "async"
    raise ResumeError(
        f"resumable: {type(runner).__name__} is not a runner it knows; supported: "
        "MinibatchRl, MinibatchRlEval, AsyncRl, AsyncRlEval (and their subclasses)")


def _interval(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ResumeError(f"resumable: {name} must be a positive int, not {value!r}")
    return value


class _Gates:
    """Stand-ins that make the loop body do nothing for already-done iterations."""

    def __init__(self) -> None:
        self._installed: list[tuple[object, str, bool, object]] = []

    def add(self, obj: object, name: str, result: object) -> None:
        had = name in vars(obj)
        old = vars(obj).get(name)

        def skipped(*args: Any, **kwargs: Any) -> object:
            return result() if callable(result) else result
        setattr(obj, name, skipped)
        self._installed.append((obj, name, had, old))

    @property
    def active(self) -> bool:
        return bool(self._installed)

    def remove(self) -> None:
        for obj, name, had, old in reversed(self._installed):
            if had:
                setattr(obj, name, old)
            else:
                vars(obj).pop(name, None)
        self._installed = []


# -- announcing: checked and said at the start of a run --------------------------------

_log = logging.getLogger("namedschema.rlpyt")


def check_target(path: str) -> None:
    """Raise ResumeError if no checkpoint can be written at ``path``."""
    why = unwritable(path)
    if why:
        raise ResumeError(f"resumable: cannot write checkpoints to {path!r}: {why}")


def lack_of_room(path: str, state: Any, compression: Any = None) -> str | None:
    """Why the run's state (its replay buffer full) does not fit the space a checkpoint at
    ``path`` may take, or None if it fits. With ``compression`` (a ``compression=``
    argument) only what it stores raw counts: the rest's size is known once written (a
    save that does not fit fails as it writes, the previous file kept)."""
    codec = compression_argument(compression, caller="resumable")
    need, free = state_bytes(state, codec), free_bytes(path)
    if need <= free:
        return None
    what = ("the run's state, its replay buffer included" if codec is None else
            "the run's state that is not compressed")
    return (f"resumable: the checkpoints at {path!r} need about {_human(need)} ({what}), "
            f"but only {_human(free)} are free there; "
            "free some space or pass a path on another file system")


def say_resumed(path: str, itr: int, steps: int) -> str:
    """Say, once, that the run continues from ``path``; returns the line."""
    line = (f"namedschema: resumed {path} at itr {itr:,} (step {steps:,}); rlpyt's startup "
            f"lines above count from 0, training continues at itr {itr:,}; "
            f"delete {path} to start fresh")
    _log.info(line)
    try:
        from rlpyt.utils.logging import logger
    except ImportError:  # pragma: no cover - resumable needs rlpyt
        print(line, flush=True)
    else:
        logger.log(line)
    return line


def continue_logs(resumed_itr: int, note: Callable[[str], None]) -> Callable[[], None]:
    """rlpyt's ``progress.csv`` (opened by ``logger_context`` after this) continues its rows
    before ``resumed_itr``; files it already opened (erased) are said through ``note``.
    Returns the undo."""
    for name in open_tabular_logs():
        note(f"rlpyt's tabular log {name} was opened (and emptied by rlpyt) before "
             "resumable() was called: the rows of the run it resumes are gone; call "
             "resumable() before logger_context() to keep them")
    return continue_tabular_logs(resumed_itr)


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


# -- the iteration offsets of a resumed async run --------------------------------------
#
# rlpyt's async loop counts iterations from 0 in local variables, and its sampler
# runs ``range(n_itr)`` in its own process; a resumed run lets both count from 0
# again and adds the checkpoint's counts where the counts leave the loop.

class Offset:
    """Calls ``function`` with ``offset`` added to the chosen positional/keyword args."""

    def __init__(self, function: Callable[..., Any], offsets: dict[int, int],
                 keywords: dict[str, int] | None = None) -> None:
        self.function = function
        self.offsets = offsets            # {position: offset}
        self.keywords = keywords or {}    # {name: offset}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function with the offsets added to their arguments."""
        values = list(args)
        for i, off in self.offsets.items():
            if i < len(values):
                values[i] = values[i] + off
        for name, off in self.keywords.items():
            if kwargs.get(name) is not None:
                kwargs[name] = kwargs[name] + off
        return self.function(*values, **kwargs)


class OffsetSampler:
    """The async sampler as its process sees it: iteration ``i`` is ``i + offset``."""

    def __init__(self, sampler: Any, offset: int) -> None:
        self._sampler = sampler
        self._offset = offset

    def obtain_samples(self, itr: int, *args: Any, **kwargs: Any) -> Any:
        """The sampler's samples for iteration ``itr`` plus the offset."""
        return self._sampler.obtain_samples(itr + self._offset, *args, **kwargs)

    def evaluate_agent(self, itr: int, *args: Any, **kwargs: Any) -> Any:
        """The sampler's evaluation at iteration ``itr`` plus the offset."""
        return self._sampler.evaluate_agent(itr + self._offset, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sampler, name)


def _load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The resume state in ``path``, unpickled only once its header says it is one."""
    try:
        data = _checkpoint.load(path, allow_pickle=True, mmap_mode=mappable(path),
                                expect_metadata=_MARKER)
    except FormatError as exc:
        if exc.metadata is None:  # not a namedschema checkpoint of another kind
            raise
        if exc.metadata.get("kind") == CHECKPOINT_KIND:
            raise ResumeError(f"resumable: {path} has resume-state version "
                              f"{exc.metadata.get('version')!r}; this namedschema reads "
                              f"{CHECKPOINT_VERSION} (nothing in it was loaded)") from exc
        raise ResumeError(f"resumable: {path} is a namedschema checkpoint but not one "
                          "written by namedschema.rlpyt.resumable (its header does not "
                          "say so; nothing in it was loaded or unpickled); refusing to "
                          "load or overwrite it (pass another path)") from exc
    except ModuleNotFoundError as exc:
        raise ResumeError(f"resumable: {path} needs module {exc.name!r} to load, which "
                          "cannot be imported here") from exc
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_KIND:
        raise ResumeError(f"resumable: {path} is a namedschema checkpoint but not one "
                          "written by namedschema.rlpyt.resumable; refusing to overwrite "
                          "it (pass another path)")
    if data.get("version") != CHECKPOINT_VERSION:
        raise ResumeError(f"resumable: {path} has resume-state version "
                          f"{data.get('version')!r}; this namedschema reads "
                          f"{CHECKPOINT_VERSION}")
    return data


class _Resume:
    def __init__(self, runner: Any, path: str | os.PathLike[str], every_itrs: int | None,
                 every_steps: int | None, checkpoint: dict[str, Any] | None,
                 accept: Literal[True] | tuple[str, ...], writer: CheckpointWriter) -> None:
        self.runner, self.accept, self.writer = runner, accept, writer
        self.path = os.fspath(path)
        self.every_itrs = every_itrs
        self.every_steps = every_steps
        # The loaded checkpoint (a dict), or None; what reads it runs only with one.
        self.checkpoint: Any = checkpoint
        self.start: int = checkpoint["itr"] if checkpoint is not None else 0
        self.last_saved: int | None = self.start if checkpoint is not None else None
        self.every = 1
        self.n_itr: int | None = None
        self.gates = _Gates()
        self.notes: list[str] = []
        self.saves = 0
        self.undo_logs: Callable[[], None] = lambda: None
        self._originals = {name: getattr(runner, name)
                           for name in ("startup", "train", "shutdown")}
        # The constructors' arguments, before rlpyt's startup changes anything.
        self.arguments = _arguments.snapshot(self.components())

    # -- set-up -------------------------------------------------------------------

    def install(self) -> None:
        self.runner.startup = self.startup
        self.runner.train = self.train
        self.runner.shutdown = self.shutdown
        self.runner._namedschema_resume = self
        if self.checkpoint is not None:   # rlpyt's progress.csv continues, not restarts
            self.undo_logs = continue_logs(self.start, self.note)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)
            warnings.warn(f"namedschema.rlpyt.resumable: {message}", ResumeWarning,
                          stacklevel=4)

    def context(self, new_envs: bool = False) -> _state.ResumeContext:
        """What the handlers of one capture, check, restore or prepare share."""
        return _state.context(traj_info_cls=getattr(self.runner.sampler, "TrajInfoCls", None),
                              note_once=self.note, new_envs=new_envs)

    def components(self) -> dict[str, Any]:
        r = self.runner
        return {"runner": r, "agent": r.agent, "algo": r.algo, "sampler": r.sampler}

    def config(self) -> dict[str, Any]:
        r = self.runner
        names = {k: _class_names(v)[0] for k, v in self.components().items()}
        spec = r.sampler.batch_spec
        return {"classes": names, "batch_T": int(spec.T), "batch_B": int(spec.B),
                "world_size": int(getattr(r, "world_size", 1)), "n_itr": int(self.n_itr or 0),
                "arguments": self.arguments}

    def _prepare(self) -> None:
        """Before rlpyt's startup (before sampler workers fork)."""
        r = self.runner
        ctx = self.context()
        if self.checkpoint is None:
            for obj in self.components().values():
                _state.prepare(obj, None, ctx)
            return
        seeds = [v["seed"] for v in self.checkpoint["state"]["runner"].values()
                 if isinstance(v, dict) and v.get("seed") is not None]
        if r.seed is None and seeds:
            # The same seed builds the same envs and models as the first start.
            r.seed = seeds[0]
        for what, obj in self.components().items():
            _state.prepare(obj, self.checkpoint["state"].get(what), ctx)

    def startup(self) -> Any:   # what rlpyt's startup returns
        self._prepare()
        n_itr = self._originals["startup"]()
        r = self.runner
        self.n_itr = n_itr
        if self.every_steps is not None:
            self.every = max(1, self.every_steps // r.itr_batch_size)
        else:
            self.every = self.every_itrs or r.log_interval_itrs
        if self.checkpoint is None:
            self._check()
            return n_itr
        try:
            # Before the check: parallel-sampler workers apply their saved states
            # at the check's round, which must not happen with another run's.
            self._verify_config()
            self._check()
            self._restore()
        except ResumeError:
            self._stop_sampler()
            raise
        say_resumed(self.path, self.start, self.start * r.itr_batch_size)
        return n_itr

    def _stop_sampler(self) -> None:
        """Let sampler workers exit before a refusal propagates (they are not daemons)."""
        try:
            self.runner.sampler.shutdown()
        except Exception:  # the ResumeError is what the user must see
            pass

    def _check(self) -> None:
        ctx = self.context()
        reasons: list[str] = []
        for what, obj in self.components().items():
            reasons.extend(_state.check(obj, ctx))
            if what == "algo" and getattr(obj, "replay_buffer", None) is not None:
                reasons.extend(_state.check(obj.replay_buffer, ctx))
        for reason in dict.fromkeys(reasons):
            self.note(f"not exact: {reason}")
        # Refused now, not at the first checkpoint (no worker round trip for it).
        captured = {what: _state.capture(obj, ctx) for what, obj in
                    self.components().items() if hasattr(obj, "collector") or what != "sampler"}
        why = _table.unsavable(captured)
        if why:
            self._stop_sampler()
            raise ResumeError(f"resumable: the run's state cannot be checkpointed ({why}): "
                              "give its class a handler (namedschema.rlpyt.register_handler)")
        short = lack_of_room(self.path, captured, getattr(self.writer, "compression", None))
        if short:
            self._stop_sampler()
            raise ResumeError(short)

    def _verify_config(self) -> None:
        """Refuse a checkpoint of a run built differently, before anything is restored."""
        saved, now = self.checkpoint["config"], self.config()
        self._verify_config_of(saved, now)
        self._reapply = self._changed_arguments(saved.get("arguments"), now["arguments"])
        if self._reapply is not None and self._reapply.new_envs:
            _workers.skip_env_states(self.runner.sampler)

    def _verify_config_of(self, saved: Mapping[str, Any], now: Mapping[str, Any]) -> None:
        for key in ("classes", "batch_T", "batch_B", "world_size"):
            if saved[key] != now[key]:
                raise ResumeError(
                    f"resumable: {self.path} was written by a run built differently: "
                    f"{key} was {saved[key]!r}, now {now[key]!r}")

    def _restore(self) -> None:
        checkpoint, self.checkpoint = self.checkpoint, None
        saved, now = checkpoint["config"], self.config()
        self._verify_config_of(saved, now)
        if saved["n_itr"] != now["n_itr"]:
            self.note(f"the run now has {now['n_itr']} iterations, the checkpoint's "
                      f"run had {saved['n_itr']}: from iteration {self.start} on it "
                      "follows the new length")
        reapply = self._reapply          # (from _verify_config)
        ctx = self.context(new_envs=reapply is not None and reapply.new_envs)
        try:
            for what, obj in self.components().items():
                _state.restore(obj, checkpoint["state"][what], ctx, what)
        except _state.StateMismatchError as exc:
            raise ResumeError(f"resumable: {self.path} does not fit this run: {exc}") from exc
        if reapply is not None:
            reapply.apply()
        _state.set_rng_state(checkpoint["rng"])
        if self.start > 0:
            self._gate()
        if self.writer.audit is not None:
            self.writer.audit.record_restore(self.start)

    def _changed_arguments(self, saved: dict[str, Any] | None, now: dict[str, Any]
                           ) -> _arguments.Reapply | None:
        """Refuse arguments that differ from the checkpoint's run, unless accepted."""
        refusal, notes, reapply = _arguments.compare(saved, now, self.accept, self.path,
                                                      self.components())
        if refusal:
            raise ResumeError(refusal)
        for note in notes:
            self.note(note)
        return reapply

    def _gate(self) -> None:
        r, g = self.runner, self.gates
        for name, result in (("store_diagnostics", None), ("log_diagnostics", None),
                             ("evaluate_agent", lambda: ([], 0.0))):
            if hasattr(r, name):
                g.add(r, name, result)
        for name in ("sample_mode", "train_mode", "eval_mode"):
            g.add(r.agent, name, None)
        g.add(r.sampler, "obtain_samples", lambda: (None, []))
        g.add(r.algo, "optimize_agent", None)

    # -- the loop -------------------------------------------------------------------

    def train(self) -> Any:   # what rlpyt's train returns
        from rlpyt.utils.logging import logger
        original = logger.set_iteration

        def set_iteration(itr: int) -> None:
            original(itr)
            self.at_iteration(itr)
        logger.set_iteration = set_iteration
        try:
            result = self._originals["train"]()
        except BaseException as exc:
            # Parallel samplers: end the workers left waiting; a worker's failure is
            # the cause to say (rlpyt's barriers may raise other errors on top of it).
            failure = _workers.finish(self.runner.sampler, failed=True)
            if failure is not None and failure is not exc:
                raise failure from exc
            raise
        finally:
            logger.set_iteration = original
            self.gates.remove()
            self.undo_logs()
        _workers.finish(self.runner.sampler, failed=False)
        return result

    def at_iteration(self, itr: int) -> None:
        if self.writer.audit is not None:
            self.writer.audit.progress(itr)
        if self.gates.active:
            if itr < self.start:
                return
            self.gates.remove()
        if itr > 0 and itr % self.every == 0 and itr != self.last_saved:
            self.save(itr)

    def shutdown(self) -> Any:   # what rlpyt's shutdown returns
        self.gates.remove()
        if self.n_itr is not None and self.last_saved != self.n_itr:
            self.save(self.n_itr)
        self.writer.wait()
        if self.writer.audit is not None:   # the end: the checkpoint of n_itr
            self.writer.audit.record_end(self.n_itr)
        return self._originals["shutdown"]()

    def save(self, itr: int, **extra: Any) -> None:
        """Checkpoint the state between iterations ``itr - 1`` and ``itr``."""
        ctx = self.context()
        with _replay_write_lock(self.runner.algo):
            # rlpyt's run-time sample types by value: loads without patch_rlpyt().
            state = _table.portable({what: _state.capture(obj, ctx)
                                        for what, obj in self.components().items()})
            self.writer.save({"format": CHECKPOINT_KIND, "version": CHECKPOINT_VERSION,
                              "itr": int(itr), "config": self.config(),
                              "rng": _state.rng_state(), "state": state, **extra})
        self.last_saved = itr
        self.saves += 1


def _replay_write_lock(algo: object) -> contextlib.AbstractContextManager[object]:
    """The async replay buffer's write lock (memory copiers wait), or a no-op."""
    lock = getattr(getattr(algo, "replay_buffer", None), "rw_lock", None)
    return lock.write_lock if lock is not None else contextlib.nullcontext()


class _AsyncResume(_Resume):
    """AsyncRl / AsyncRlEval: the loops run in local counts; offsets map them to the run's.

    rlpyt's async loop keeps its iteration counters in local variables that
    start at 0, and its sampler runs ``range(n_itr)`` in its own process. A
    resumed run lets both count from 0 again and adds the checkpoint's
    optimizer and sampler iterations where the counts leave the loop: in the
    calls of ``algo.optimize_agent`` and the runner's diagnostics, and in the
    sampler process (started with ``n_itr`` minus the done iterations, its
    ``obtain_samples``/``evaluate_agent`` shifted).
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        ck = self.checkpoint
        self.itr_offset = ck["itr"] if ck is not None else 0
        self.sampler_offset = ck.get("sampler_itr", 0) if ck is not None else 0
        self.last_saved_sampler = self.sampler_offset if ck is not None else 0
        self.finished = False
        self.local_itr = -1

    def install(self) -> None:
        super().install()
        if self.checkpoint is not None:
            self._originals["launch_sampler"] = self.runner.launch_sampler
            self.runner.launch_sampler = self.launch_sampler

    def launch_sampler(self, n_itr: int) -> Any:
        r = self.runner
        real = r.sampler
        r.sampler = OffsetSampler(real, self.sampler_offset)
        try:
            return self._originals["launch_sampler"](n_itr - self.sampler_offset)
        finally:
            r.sampler = real

    def startup(self) -> tuple[Any, Any] | None:
        self._prepare()
        if self.checkpoint is not None and \
                self.sampler_offset >= self._n_itr_before_startup():
            self.finished = True
            return None
        throttle_itr, delta = self._originals["startup"]()
        r = self.runner
        self.n_itr = r.n_itr
        if self.every_steps is not None:
            self.every = max(1, self.every_steps // r.sampler_batch_size)
        else:
            self.every = self.every_itrs or r.log_interval_itrs
        self._check()
        if self.checkpoint is not None:
            with _replay_write_lock(r.algo):
                self._verify_config()
                self._restore()
            say_resumed(self.path, self.itr_offset,
                                  self.sampler_offset * r.sampler_batch_size)
            r.algo.optimize_agent = Offset(r.algo.optimize_agent, {0: self.itr_offset},
                                            {"sampler_itr": self.sampler_offset})
            r.store_diagnostics = Offset(r.store_diagnostics,
                                          {0: self.itr_offset, 1: self.sampler_offset})
            r.log_diagnostics = Offset(r.log_diagnostics,
                                        {0: self.itr_offset, 1: self.sampler_offset})
            # Learn from the first new batch on: the buffer is already filled.
            throttle_itr = 1
        return throttle_itr, delta

    def _n_itr_before_startup(self) -> int:
        n_itr: int = self.checkpoint["config"]["n_itr"]
        return n_itr

    def train(self) -> Any:
        if self.finished:
            self.note("the checkpoint's run had finished: nothing to train")
            return None
        return super().train()

    def _gate(self) -> None:
        pass   # Async loops count from 0 again (offsets), nothing to skip.

    def at_iteration(self, itr: int) -> None:
        self.local_itr = itr
        done = self.sampler_offset + self.runner.ctrl.sampler_itr.value
        if itr > 0 and done // self.every > self.last_saved_sampler // self.every:
            self.save_async(itr + self.itr_offset, done)

    def save_async(self, itr: int, sampler_itr: int) -> None:
        self.save(itr, sampler_itr=int(sampler_itr))
        self.last_saved_sampler = sampler_itr

    def shutdown(self) -> Any:
        if self.finished:
            return None
        # After rlpyt's shutdown joined the sampler and the memory copiers.
        result = self._originals["shutdown"]()
        if self.n_itr is not None:
            self.save_async(self.itr_offset + self.local_itr + 1, self.n_itr)
        self.writer.wait()
        return result


def _started(runner: object) -> str | None:
    if hasattr(runner, "_opt_infos") or hasattr(runner, "n_itr"):
        return "its startup() already ran"
    agent = getattr(runner, "agent", None)
    if getattr(agent, "model", None) is not None:
        return "its agent is already initialized"
    return None


def resumable(runner: _Runner, path: str | os.PathLike[str], *, every_itrs: int | None = None,
              every_steps: int | None = None, accept_changes: Literal[True] | str | Iterable[str] = (),
              incremental: bool = True, background: bool = True,
              compression: str | tuple[str, int] | None = None) -> _Runner:
    """Make an rlpyt runner resume from ``path``, and checkpoint to it as it trains.

    Call it on a runner that is built but not started, then call
    ``runner.train()`` as usual::

        runner = MinibatchRl(algo=algo, agent=agent, sampler=sampler, n_steps=...)
        runner = namedschema.rlpyt.resumable(runner, "run.nsc", every_itrs=1000)
        runner.train()

    If ``path`` holds a checkpoint, training continues from it: the agent's
    models (target networks included), epsilon, the optimizers and their
    state, ``update_counter``, the replay buffer (sum trees, cursor, beta),
    the sampler's envs, agent inputs and in-progress trajectories, the
    runner's diagnostics and the global RNGs (Python, numpy, torch) are put
    back into the freshly built objects, and the loop goes on at the
    iteration where the checkpoint was taken (one line, through rlpyt's
    logger, says so; rlpyt's ``progress.csv`` continues). Otherwise it starts from
    scratch. Either way it checkpoints every ``every_itrs`` iterations or
    ``every_steps`` env steps (whole iterations, at least one; by default every
    log interval) and at the end, incrementally and in the background: training
    waits only for a snapshot; the next checkpoint or the end raises its error.

    Resuming unpickles the checkpoint (models, optimizers and envs are
    pickled): only resume from files you trust. A file is unpickled only
    after its header (plain data) says it is a resume checkpoint of this
    version; any other file at ``path`` is refused without being loaded.

    The resumed process must build the run the same way (same classes,
    sizes and arguments; the seed is taken from the checkpoint if the
    runner's is None). What cannot be restored exactly (envs that cannot be
    pickled, envs in sampler worker processes, components without a state
    handler) is said once as a :class:`ResumeWarning` before training.

    Args:
        runner: an rlpyt ``MinibatchRl``, ``MinibatchRlEval``, ``AsyncRl`` or
            ``AsyncRlEval`` (or subclass); for the async ones the intervals
            count sampler iterations and steps.
        path: the checkpoint file; read if it exists, replaced at each save.
        every_itrs: checkpoint every this many iterations.
        every_steps: checkpoint every this many environment steps.
        accept_changes: arguments that may differ from the checkpoint's run,
            by name as the refusal lists them (``"algo.learning_rate"``,
            ``"sampler.env_kwargs.lives"``; a name also covers what is below
            it), or ``True`` for all. By default any difference in the
            agent's, algorithm's or sampler's arguments is refused when
            ``train()`` starts, naming each; an accepted one takes effect (a
            new learning rate reaches the optimizer's parameter groups, new
            env arguments build new envs that start new episodes) and is said
            as a ResumeWarning. Arguments that shape the saved state
            (``replay_size``, model arguments, classes) are always refused.
        incremental, background: as in :func:`namedschema.save`; False, False: as before.
        compression: as in :func:`namedschema.save` (``"auto"``: frames compressed,
            float arrays raw); checked here.

    Returns:
        ``runner`` itself, ready for ``train()``.

    Raises:
        ResumeError: the runner is of an unsupported kind or already started,
            the intervals are invalid, no checkpoint can be written at ``path``
            (a missing or read-only folder; too little space is said at
            startup), or ``path`` holds something else than a resume checkpoint. A checkpoint that does not fit the run built
            (other classes or sizes) raises it when ``train()`` starts.
        namedschema.FormatError: ``path`` exists but is not a readable
            checkpoint (it is never replaced silently).
    """
    compression_argument(compression, caller="resumable")
    kind = _kind(runner)
    every_itrs = _interval(every_itrs, "every_itrs")
    every_steps = _interval(every_steps, "every_steps")
    if every_itrs is not None and every_steps is not None:
        raise ResumeError("resumable: give every_itrs or every_steps, not both")
    if getattr(runner, "_namedschema_resume", None) is not None:
        raise ResumeError("resumable: this runner is already resumable")
    started = _started(runner)
    if started:
        raise ResumeError(f"resumable: {type(runner).__name__} must not be started yet "
                          f"({started}); call resumable() before train()")
    accept = _arguments.accepted(accept_changes)
    if accept is None:
        raise ResumeError("resumable: accept_changes must be True or names of arguments "
                          f"such as 'algo.learning_rate', not {accept_changes!r:.100}")
    check_target(os.fspath(path))   # now, not at the first checkpoint
    checkpoint = _load_checkpoint(path) if os.path.lexists(path) else None
    cls = _AsyncResume if kind == "async" else _Resume
    cls(runner, path, every_itrs, every_steps, checkpoint, accept, CheckpointWriter(
        os.fspath(path), _MARKER, incremental=incremental, background=background,
        compression=compression)).install()
    return runner

