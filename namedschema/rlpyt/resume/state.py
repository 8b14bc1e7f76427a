"""Capture and restore the training state of rlpyt components, one handler per class.

A component's state is ``{handler key: captured dict}`` for every class in its
method resolution order that has a handler, so mixins compose: a
``DqnAgent`` is handled by ``BaseAgent`` (its torch modules) and by
``EpsilonGreedyAgentMixin`` (epsilon), an ``R2d1Agent`` also by
``RecurrentAgentMixin`` (its recurrent states). Supporting a new rlpyt class
is one :func:`register_handler` call.

Captured state is data wherever it can be (arrays, tensors, numbers, lists,
dicts), so a checkpoint stores it raw; restoring writes arrays *into* the
objects a freshly built run made (``np.copyto``), which keeps views as views
and shared memory shared. Only objects that are not data (an environment's
own attributes, say) are pickled by the checkpoint.

This module is the public face; importing it installs the handlers of rlpyt's
classes. Where things live: the registry and its composition in ``_registry``,
generic data state, trajectory infos and RNGs in ``_data_state``, the handlers
of agents, algorithms and replay buffers in ``_learner_handlers``, those of
envs, collectors, samplers and runners in ``_sampling_handlers``.

register_handler   add or replace the handler of one class (the public one: restore
                   gets writable copies of the arrays)
capture            the state of one component (a dict)
restore            put a captured state back into a freshly built component
check              why a component cannot be resumed exactly (list of strings)
prepare            what a resume must do to a component before rlpyt's startup
data_state / restore_data_state   generic attribute-wise state, for handlers
rng_state / set_rng_state         the global RNGs (Python, numpy, torch)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import atari_state as _atari_state
from . import learner_handlers as _learner_handlers
from . import registry as _registry
from . import sampling_handlers as _sampling_handlers
from .data_state import (
    data_state,
    fresh_copy,
    make_traj_infos,
    restore_data_state,
    rng_state,
    set_rng_state,
    traj_infos_state,
)
from .registry import (
    CaptureFunction,
    CheckFunction,
    Handler,
    PrepareFunction,
    RestoreFunction,
    StateMismatchError,
    capture,
    check,
    handlers_for,
    prepare,
    restore,
)
from .sampling_handlers import is_async_sampler

__all__ = ["register_handler", "capture", "restore", "check", "prepare", "data_state",
           "fresh_copy", "is_async_sampler", "traj_infos_state", "make_traj_infos",
           "restore_data_state", "rng_state", "set_rng_state", "Handler",
           "StateMismatchError", "handlers_for"]



def register_handler(cls: type[Any] | str, capture: CaptureFunction, restore: RestoreFunction,
                     check: CheckFunction | None = None,
                     prepare: PrepareFunction | None = None, *,
                     attributes: str | Iterable[str] = (), writable: bool = True) -> None:
    """Capture and restore the state that class ``cls`` adds to a component.

    ``capture(obj, ctx) -> dict`` returns the state (data where it can be:
    arrays, tensors, numbers, strings, lists and dicts of them; anything else
    is pickled with the checkpoint); ``restore(obj, state, ctx)`` puts it
    back into a freshly built ``obj``. The handlers of every class in an
    object's MRO run, base classes first, so yours covers only what ``cls``
    adds and its ``restore`` has the last word. ``check(obj, ctx)``, if
    given, returns reasons (strings) why ``obj`` cannot be resumed exactly,
    said once before training; ``prepare(obj, saved)`` runs before rlpyt's
    startup with this handler's saved state (None on a fresh start).

    Args:
        cls: the class, or its ``"module.QualName"``; registering it again
            replaces its handler (rlpyt's own ones included).
        attributes: names of instance attributes ``capture``/``restore``
            take care of: base-class handlers leave them alone. rlpyt's
            ``Env`` handler pickles an env's other attributes and puts them
            back; those it cannot pickle are left, as the freshly built env
            has them, to the handlers of subclasses.
        writable: ``restore`` gets the state as ``capture`` returned it, with
            every array (in dicts, lists, tuples) a writable copy. With False
            it gets the checkpoint's arrays themselves: read-only maps of the
            file, no copy (for large arrays you copy into memory of your own).
    """
    _registry.register_handler(cls, capture, restore, check, prepare,
                               attributes=attributes, writable=writable)


_learner_handlers.install()
_sampling_handlers.install()
_atari_state.install()
