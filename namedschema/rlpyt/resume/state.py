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

This module is the public face: :data:`HANDLERS`, this process's handler
table, starts as the table of rlpyt's classes in ``handlers`` (the one place
that lists them) and takes the handlers users register. Where things live: the
table's machinery, the context handlers get and the generic data state in
``table``, the handlers of rlpyt's classes in ``handlers``, the parallel
samplers' workers in ``workers``. What is not rlpyt's own (torch modules,
optimizers, schedulers, Atari emulators, generators) is captured by its row of
the one table of state kinds, ``namedschema.training.state_kinds``.

register_handler   add or replace the handler of one class (the public one: restore
                   gets writable copies of the arrays)
context            a ResumeContext over HANDLERS (what handlers get as ``ctx``)
capture            the state of one component (a dict)
restore            put a captured state back into a freshly built component
check              why a component cannot be resumed exactly (list of strings)
prepare            what a resume must do to a component before rlpyt's startup
data_state / restore_data_state   generic attribute-wise state, for handlers
rng_state / set_rng_state         the global RNGs (Python, numpy, torch; namedschema.state.rng)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ...state.rng import rng_state, set_rng_state
from .handlers import BUILTIN
from .table import (
    CaptureFunction,
    CheckFunction,
    Handler,
    HandlerTable,
    PrepareFunction,
    RestoreFunction,
    ResumeContext,
    StateMismatchError,
    data_state,
    fresh_copy,
    is_async_sampler,
    make_traj_infos,
    restore_data_state,
    traj_infos_state,
)

__all__ = ["register_handler", "context", "capture", "restore", "check", "prepare",
           "data_state", "fresh_copy", "is_async_sampler", "traj_infos_state",
           "make_traj_infos", "restore_data_state", "rng_state", "set_rng_state", "Handler",
           "HandlerTable", "ResumeContext", "StateMismatchError", "handlers_for", "HANDLERS"]

# This process's handler table: rlpyt's classes, then what users register.
HANDLERS = HandlerTable(BUILTIN)


# A user's prepare hook: prepare(obj, saved state or None).
UserPrepareFunction = Callable[[Any, Any], object]


def register_handler(cls: type[Any] | str, capture: CaptureFunction, restore: RestoreFunction,
                     check: CheckFunction | None = None,
                     prepare: UserPrepareFunction | None = None, *,
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
    startup with this handler's saved state (None on a fresh start). ``ctx``
    is a :class:`~namedschema.rlpyt.resume.table.ResumeContext`
    (``ctx.traj_info_cls``: the sampler's ``TrajInfoCls``).

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
    if isinstance(attributes, str):
        attributes = (attributes,)
    HANDLERS.register(cls, Handler(capture, restore, check, _without_context(prepare),
                                   tuple(attributes), bool(writable)))


def _without_context(prepare: UserPrepareFunction | None) -> PrepareFunction | None:
    """A user's ``prepare(obj, saved)`` as the table calls it: ``(obj, saved, ctx)``."""
    if prepare is None:
        return None

    def prepare_(obj: Any, saved: Any, ctx: ResumeContext) -> None:
        prepare(obj, saved)
    return prepare_


def context(**fields: Any) -> ResumeContext:
    """A :class:`ResumeContext` over :data:`HANDLERS` (``fields``: its other fields)."""
    return ResumeContext(HANDLERS, **fields)


def handlers_for(obj: object) -> list[tuple[str, Handler]]:
    """The handlers that apply to ``obj``, base classes first."""
    return HANDLERS.handlers_for(obj)


def capture(obj: object, ctx: ResumeContext | None = None) -> dict[str, Any]:
    """The state of ``obj``: ``{handler key: state}`` (empty if no handler applies)."""
    return HANDLERS.capture(obj, ctx or context())


def restore(obj: object, state: dict[str, Any], ctx: ResumeContext | None = None, what: str = "",
            partial: bool = False) -> None:
    """Restore ``state`` (from :func:`capture`) into ``obj``, a freshly built component.

    ``what`` names ``obj`` in errors; with ``partial``, handlers without state
    in ``state`` are left out.
    """
    HANDLERS.restore(obj, state, ctx or context(), what or type(obj).__name__, partial)


def check(obj: object, ctx: ResumeContext | None = None) -> list[str]:
    """Reasons why ``obj`` cannot be resumed exactly; empty when it can."""
    return HANDLERS.check(obj, ctx or context())


def prepare(obj: object, state: dict[str, Any] | None, ctx: ResumeContext | None = None) -> None:
    """Run the ``prepare`` hooks of ``obj``'s handlers, before rlpyt's startup."""
    HANDLERS.prepare(obj, state, ctx or context())
