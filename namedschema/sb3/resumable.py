"""``resumable(model, path, every_steps=...)``: a Stable-Baselines3 ``learn()`` that resumes exactly.

resumable   wrap a built model: its ``learn(total_timesteps=N)`` continues the run
            saved at ``path`` and checkpoints it every ``every_steps`` env steps

The model's whole run is one :class:`~namedschema.RunCheckpoint`: the policy
(target networks included), every optimizer, the replay buffer, the vector env
(every layer, every sub-env, in SubprocVecEnv's workers too), the algorithm's
counters and the global generators, each through its row of the one table of
state kinds. A checkpoint is taken at the start of ``collect_rollouts`` (the
previous ``train()`` done, nothing of the next rollout begun), written
atomically, incrementally and in the background. Resuming calls SB3's own
``learn`` for the steps left, with ``reset_num_timesteps=False``, so the run's
total stays ``N`` and every progress schedule (exploration, learning rate, clip
range) continues where it was; what ``learn`` resets at its start (the action
noise, the start count) is put back right after. Nothing here draws from a
generator or changes the run: a wrapped run that is never killed equals SB3
alone.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
import weakref
from collections.abc import Iterable
from typing import Any, Literal

from ..checkpoint._compression import compression_argument
from ..errors import RunCheckpointWarning, StateMismatchError
from ..training.run_checkpoint import RunCheckpoint
from . import algorithm_state

__all__ = ["resumable"]

_wrapped: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_OWN = ("learn", "collect_rollouts", "_setup_learn", "_excluded_save_params")


def _accepted(accept_changes: Any) -> tuple[str, ...] | Literal[True]:
    if accept_changes is True:
        return True
    if isinstance(accept_changes, str):
        return (accept_changes,)
    if isinstance(accept_changes, Iterable) and \
            all(isinstance(name, str) for name in accept_changes):
        return tuple(accept_changes)
    raise ValueError("resumable: accept_changes must be True or names of hyperparameters "
                     f"such as 'learning_rate', not {accept_changes!r:.100}")


def _settings_accepted(accept: tuple[str, ...] | Literal[True],
                       optimizers: list[str]) -> tuple[str, ...] | Literal[True]:
    """What RunCheckpoint accepts of the optimizers' settings for the SB3 names accepted.

    SB3 builds each optimizer from the model's hyperparameters: ``learning_rate``
    gives every optimizer's ``lr`` (SAC's entropy optimizer's too), ``policy_kwargs``
    its ``optimizer_kwargs``. RunCheckpoint's own names (``"policy_optimizer.eps"``)
    pass through as they are.
    """
    if accept is True:
        return True
    out = list(accept)
    if "learning_rate" in accept:
        out += [f"{name}.lr" for name in optimizers]
    if "policy_kwargs" in accept:
        out += optimizers
    return tuple(out)


class _Checkpoint(RunCheckpoint):
    """The model's RunCheckpoint: its refusals name ``resumable``'s argument."""

    def _how_to_accept(self, names: list[str]) -> str:
        sb3 = sorted({"learning_rate" if name.endswith(".lr") else name for name in names})
        return (f"pass resumable(..., accept_changes={sb3!r}) (or accept_changes=True); "
                "an accepted change takes effect")


# What every BaseCallback holds (n_calls restarts; num_timesteps is set from the model).
_CALLBACK_BASE = frozenset({"globals", "locals", "n_calls", "num_timesteps", "parent",
                            "verbose", "model", "logger", "training_env"})


def _callback_state(callback: Any) -> list[str]:
    """The callbacks in ``callback`` (a list, CallbackList, EventCallback's child, a
    function) that hold state of their own, as ``"Class (attributes)"``."""
    out: list[str] = []
    stack = [callback]
    while stack:
        cb = stack.pop()
        if cb is None:
            continue
        if isinstance(cb, (list, tuple)):
            stack.extend(reversed(cb))
            continue
        children = [getattr(cb, name) for name in ("callbacks", "callback")
                    if name in getattr(cb, "__dict__", {})]
        for child in children:
            stack.extend(reversed(child) if isinstance(child, list) else [child])
        if not any(c.__name__ == "BaseCallback" for c in type(cb).__mro__):
            out.append(f"{getattr(cb, '__name__', type(cb).__name__)} (a function: "
                       "its closure and globals)")
            continue
        own = sorted(set(vars(cb)) - _CALLBACK_BASE - {"callbacks", "callback"})
        if own and type(cb).__name__ != "ConvertCallback":
            out.append(f"{type(cb).__name__} ({', '.join(own)})")
    return out


class _Run:
    """The checkpointing of one wrapped model (its learn, its save points)."""

    def __init__(self, model: Any, path: str, every_steps: int,
                 accept: tuple[str, ...] | Literal[True], compression: Any = "auto") -> None:
        self.model, self.path, self.every_steps, self.accept = model, path, every_steps, accept
        self.compression = compression
        self.learn_original = model.learn
        self.collect_original = model.collect_rollouts
        self.excluded_original = model._excluded_save_params
        self.ckpt: RunCheckpoint | None = None
        self.last_saved = 0
        self.learned = False
        self.callbacks_warned = False

    def _checkpoint(self) -> RunCheckpoint:
        model = self.model
        if model.env is None:
            raise StateMismatchError("resumable: the model has no env; build it with one")
        parts: dict[str, Any] = {"algorithm": model}
        for name in model._get_torch_save_params()[0]:
            obj = model
            for attr in name.split("."):
                obj = getattr(obj, attr)
            parts[name.replace(".", "_")] = obj
        optimizers = [name for name, obj in parts.items()
                      if any(c.__module__.startswith("torch.optim")
                             and c.__name__ == "Optimizer" for c in type(obj).__mro__)]
        ckpt = _Checkpoint(self.path, accept_changes=_settings_accepted(self.accept, optimizers),
                           quiet=True, compression=self.compression)
        if getattr(model, "replay_buffer", None) is not None:
            parts["replay_buffer"] = model.replay_buffer
        parts["env"] = model.env
        # gSDE's exploration matrices are not captured, and need not be: SB3 draws them
        # at the start of every collect_rollouts (after the checkpoint) and in SAC's
        # train(), from torch's generator, which is (twin tests *_sde).
        return ckpt.track(**parts)

    def learn(self, total_timesteps: int, *args: Any, **kwargs: Any) -> Any:
        first, self.learned = not self.learned, True
        bound = inspect.signature(self.learn_original).bind(total_timesteps, *args, **kwargs)
        if not self.callbacks_warned:
            held = _callback_state(bound.arguments.get("callback"))
            if held:
                self.callbacks_warned = True
                warnings.warn(
                    "namedschema.sb3.resumable: the state of callbacks passed to learn() is "
                    f"not captured ({'; '.join(held)}): a resumed run builds them afresh, "
                    "with n_calls from 0. One that decides from what it counted (saves every "
                    "n_calls, stops after n episodes, keeps the best reward) acts otherwise "
                    "than in an uninterrupted run; self.num_timesteps is the run's, and "
                    "restored. Said once per model", RunCheckpointWarning, stacklevel=2)
        if self.ckpt is None:
            self.ckpt = self._checkpoint()
        if first and os.path.exists(self.path):
            model = self.model
            algorithm_state.expect(model, int(total_timesteps), self.accept)
            self.ckpt.restore()
            algorithm_state.expect(model, None, self.accept)
            self.last_saved = model.num_timesteps
            print(f"namedschema.sb3: resumed from {self.path} at step {model.num_timesteps}",
                  file=sys.stderr)
            bound.arguments["total_timesteps"] = int(total_timesteps) - model.num_timesteps
            bound.arguments["reset_num_timesteps"] = False
            put_back = algorithm_state.deferred(model)
            setup_original = model._setup_learn

            def setup_then_put_back(*a: Any, **k: Any) -> Any:
                del model._setup_learn     # once: the class's method again
                out = setup_original(*a, **k)
                algorithm_state.set_noise_state(model.action_noise, put_back["action_noise"],
                                                f"resumable({self.path!r})")
                model._num_timesteps_at_start = put_back["_num_timesteps_at_start"]
                return out

            model._setup_learn = setup_then_put_back
        result = self.learn_original(*bound.args, **bound.kwargs)
        self._save()
        self.ckpt.wait()
        return result

    def collect_rollouts(self, *args: Any, **kwargs: Any) -> Any:
        n = self.model.num_timesteps
        if self.ckpt is not None:   # where a kill of check-resume hit (nothing without it)
            self.ckpt.at_step(n)
        if n // self.every_steps > self.last_saved // self.every_steps:
            self._save()
        return self.collect_original(*args, **kwargs)

    def _save(self) -> None:
        assert self.ckpt is not None
        self.ckpt.save(self.model.num_timesteps)
        self.last_saved = self.model.num_timesteps

    def excluded_save_params(self) -> list[str]:
        return [*self.excluded_original(), *_OWN]


def resumable(model: Any, path: str | os.PathLike[str], *, every_steps: int,
              accept_changes: Literal[True] | str | Iterable[str] = (),
              compression: str | tuple[str, int] | None = "auto") -> Any:
    """Make ``model.learn(total_timesteps=N)`` resume the run checkpointed at ``path``.

    Args:
        model: a Stable-Baselines3 algorithm (DQN, SAC, TD3, DDPG, PPO, A2C), built as
            usual, with its env, by the same script each time.
        path: the checkpoint file; ``learn`` continues from it when it exists.
        every_steps: checkpoint when the run has taken this many more env steps
            (at the next rollout's start), and at the end of ``learn``.
        accept_changes: hyperparameters that may differ from the checkpoint's run,
            by name as the refusal lists them (``"learning_rate"``,
            ``"exploration_fraction"``, ``"total_timesteps"``...), or True for any.
            By default any difference makes ``learn`` raise
            :class:`~namedschema.errors.StateMismatchError` naming each, before
            anything changes. An accepted one takes effect, as in
            :func:`namedschema.rlpyt.resumable
            <namedschema.rlpyt.resume.resumable>`: the model keeps the value it was
            built with (what SB3 derives from it comes along: ``learning_rate``
            covers ``lr_schedule`` and every optimizer's ``lr``, the exploration
            settings DQN's ``exploration_schedule``), from the first update of
            the resumed run, and it is said as a
            :class:`~namedschema.errors.RunCheckpointWarning`. Settings that shape
            the saved state (``buffer_size``, ``n_envs``, ``policy_class``, the
            replay buffer's class and arguments, ``optimize_memory_usage``) are
            always refused.
        compression: as in :func:`namedschema.save`; ``"auto"`` (the default, as
            for :class:`~namedschema.RunCheckpoint`): frames and other one-byte arrays
            compressed, float arrays raw, all raw where ``zstandard`` is missing;
            None writes raw files. Checked here.

    Returns the model itself; ``N`` is the run's total, so rerunning the same
    script after a kill finishes the same run, as if it had never stopped.
    """
    compression_argument(compression, caller="resumable")
    if not algorithm_state.is_algorithm(model):
        raise TypeError(f"resumable: expected a Stable-Baselines3 algorithm, got a "
                        f"{type(model).__qualname__}")
    if not isinstance(every_steps, int) or isinstance(every_steps, bool) or every_steps < 1:
        raise ValueError(f"resumable: every_steps must be a positive int, got {every_steps!r}")
    if model in _wrapped:
        raise ValueError("resumable: this model is wrapped already")
    run = _Run(model, os.fspath(path), every_steps, _accepted(accept_changes), compression)
    _wrapped[model] = True
    model.learn = run.learn
    model.collect_rollouts = run.collect_rollouts
    model._excluded_save_params = run.excluded_save_params
    return model
