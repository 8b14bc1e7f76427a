"""The arguments a run was built with, compared between a checkpoint and the resumed run.

A resumed run restores the checkpoint's state into freshly built objects,
and that state includes the algorithm's scalars, the optimizer's
hyperparameters and the envs: without a check, a run rebuilt with
``lr=0.5``, ``discount=0.5`` or ``env_kwargs={"lives": 7}`` would silently go
on with the checkpoint's values. So the plain-data attributes of the agent,
algorithm and sampler are recorded when ``resumable`` is called (before
rlpyt's startup: they are the constructor's arguments), stored in the
checkpoint, and compared on resume. A difference is refused unless the
caller accepts it (``resumable(..., accept_changes=...)``); an accepted one
takes effect: the attribute keeps its new value, the optimizers' parameter
groups get the new ``lr`` (and changed ``optim_kwargs``), learning-rate
schedulers the new base rates, and changed env arguments give freshly built
envs that start new episodes. Changes to what shapes the saved state (replay
size, buffer and model classes, model arguments) are always refused.

snapshot      flattened plain-data attributes of the components (``"algo.discount"``)
accepted      ``accept_changes`` checked: True, a tuple of names, or None (invalid)
compare       the refusal, the notes and the ``Reapply`` for a checkpoint's arguments
Differences   compare two snapshots; split them into accepted and refused
Reapply       keep accepted values through the restore of the checkpoint's state
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from typing import Any, Literal, cast

from ..._core.tree import torch_if_loaded

__all__ = ["snapshot", "accepted", "compare", "Differences", "Reapply", "NEVER"]

# Components compared, and attribute names left out: counters and state that
# the run itself changes, never an argument.
_COMPONENTS = ("agent", "algo", "sampler")
_SKIP = {"initial_model_state_dict", "initial_optim_state_dict", "update_counter",
         "_batch_size"}
# Arguments that shape the saved state: a checkpoint cannot be restored into
# a run built otherwise, whatever the caller accepts.
NEVER = ("algo.replay_size", "algo.ReplayBufferCls", "algo.prioritized_replay",
         "algo.store_rnn_state_interval", "algo.batch_T", "algo.batch_B",
         "agent.ModelCls", "agent.model_kwargs", "agent.QModelCls", "agent.q_model_kwargs",
         "sampler.batch_spec", "sampler.EnvCls", "sampler.CollectorCls")
_DEPTH = 4


def _plain(value: Any, depth: int = 0) -> Any:
    """``value`` as comparable plain data, or ``_NOT_PLAIN``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return "nan" if math.isnan(value) else value
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic) and value.ndim == 0:
        return _plain(value.item(), depth)
    if depth < _DEPTH and isinstance(value, tuple | list):
        items = [_plain(v, depth + 1) for v in value]
        return _NOT_PLAIN if any(i is _NOT_PLAIN for i in items) else tuple(items)
    return _NOT_PLAIN


_NOT_PLAIN = object()


def _flatten(prefix: str, value: Any, out: dict[str, Any], depth: int = 0) -> None:
    if isinstance(value, dict) and depth < _DEPTH and all(isinstance(k, str) for k in value):
        if not value:
            out[prefix] = "{}"
        for key, item in value.items():
            _flatten(f"{prefix}.{key}", item, out, depth + 1)
        return
    plain = _plain(value)
    if plain is not _NOT_PLAIN:
        out[prefix] = plain


def snapshot(components: dict[str, Any]) -> dict[str, Any]:
    """``{"algo.discount": 0.99, "sampler.env_kwargs.lives": 3, ...}`` of the components."""
    out: dict[str, Any] = {}
    for what in _COMPONENTS:
        obj = components.get(what)
        for name, value in sorted(getattr(obj, "__dict__", {}).items()):
            if name not in _SKIP and not name.startswith("__"):
                _flatten(f"{what}.{name}", value, out)
    return out


def _matches(key: str, names: Iterable[str]) -> bool:
    return any(key == n or key.startswith(n + ".") for n in names)


def accepted(value: Any) -> Literal[True] | tuple[str, ...] | None:
    """``accept_changes`` as True or a tuple of names; None when it is neither."""
    if value is True:
        return True
    if isinstance(value, str):
        value = (value,)
    try:
        names: tuple[object, ...] = tuple(value)
    except TypeError:
        return None
    # all strings, as just checked
    return cast("tuple[str, ...]", names) if all(isinstance(n, str) for n in names) else None


def compare(saved: dict[str, Any] | None, now: dict[str, Any],
            accept: Literal[True] | tuple[str, ...], path: str,
            components: dict[str, Any]) -> tuple[str | None, list[str], Reapply | None]:
    """``(refusal message or None, notes, Reapply or None)`` for the resumed run.

    ``components`` are the freshly built run's, after rlpyt's startup and
    before the checkpoint's state is restored into them.
    """
    if saved is None:  # a checkpoint from before arguments were recorded
        return None, [], None
    diff = Differences(saved, now, accept)
    if diff.never:
        return (f"resumable: {path} was written by a run built with other arguments "
                "that shape the saved state, which cannot change on resume: "
                f"{diff.describe(diff.never)}"), [], None
    if diff.refused:
        names = [k for k, _o, _n in diff.refused]
        return (f"resumable: {path} was written by a run with other arguments: "
                f"{diff.describe(diff.refused)}. Resuming would restore the checkpoint's "
                "values; to resume with the new ones deliberately, pass "
                f"resumable(..., accept_changes={names!r}) (or accept_changes=True)"), [], None
    if not diff.accepted:
        return None, [], None
    notes = ["resuming with changed arguments (accepted, the new values take effect): "
             + diff.describe(diff.accepted)]
    reapply = Reapply(components, diff.accepted_names())
    if reapply.new_envs:
        notes.append("new env arguments: the envs are built anew and start new episodes")
    return None, notes, reapply


class Differences:
    """The arguments that differ between a checkpoint's run and this one."""

    def __init__(self, saved: dict[str, Any], now: dict[str, Any],
                 accept: Literal[True] | tuple[str, ...]) -> None:
        keys = sorted(set(saved) | set(now))
        missing = "<absent>"
        self.changes = [(k, saved.get(k, missing), now.get(k, missing)) for k in keys
                        if saved.get(k, missing) != now.get(k, missing)]
        self.never = [c for c in self.changes if _matches(c[0], NEVER)]
        rest = [c for c in self.changes if c not in self.never]
        self.accepted = [c for c in rest if accept is True or _matches(c[0], accept)]
        self.refused = [c for c in rest if c not in self.accepted]

    @staticmethod
    def describe(changes: Iterable[tuple[str, Any, Any]]) -> str:
        """``changes`` as ``name: old -> new`` text."""
        return "; ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in changes)

    def accepted_names(self) -> list[Any]:
        """The names of the accepted changes."""
        return [k for k, _old, _new in self.accepted]


class Reapply:
    """Record the freshly built run's values of accepted changes; put them back after restore."""

    def __init__(self, components: dict[str, Any], accepted: list[Any]) -> None:
        self.names = accepted
        self.attributes: list[Any] = []     # (obj, name, value)
        self.groups: list[Any] = []         # (optimizer, [{key: value}] per group)
        self.schedulers: list[Any] = []     # (scheduler, base_lrs)
        self.new_envs = any(_matches(k, ("sampler.env_kwargs", "sampler.eval_env_kwargs"))
                            for k in accepted)
        for key in accepted:
            what, _, rest = key.partition(".")
            name = rest.split(".")[0]
            obj = components.get(what)
            if obj is not None and what != "sampler" and name in vars(obj):
                self.attributes.append((obj, name, vars(obj)[name]))
        keys = {"lr"} if "algo.learning_rate" in accepted else set()
        keys |= {k.split(".", 2)[2] for k in accepted if k.startswith("algo.optim_kwargs.")}
        torch = torch_if_loaded()
        algo = components.get("algo")
        if not keys or torch is None or algo is None:
            return
        for value in vars(algo).values():
            if isinstance(value, torch.optim.Optimizer):
                self.groups.append((value, [{k: g[k] for k in keys if k in g}
                                            for g in value.param_groups]))
            elif isinstance(value, torch.optim.lr_scheduler.LRScheduler) and "lr" in keys:
                self.schedulers.append((value, [g["lr"] for g in
                                                value.optimizer.param_groups]))

    def apply(self) -> None:
        """After the checkpoint's state was restored: the accepted new values win."""
        for obj, name, value in self.attributes:
            setattr(obj, name, value)
        for optimizer, groups in self.groups:
            for group, fresh in zip(optimizer.param_groups, groups, strict=False):
                group.update(fresh)
        for scheduler, base_lrs in self.schedulers:
            scheduler.base_lrs = list(base_lrs)
