"""The handler registry and the context every handler receives.

A component's state is ``{handler key: captured dict}`` for every class in its
method resolution order that has a handler, so mixins compose. The handlers
of rlpyt's own classes are listed in one table, :mod:`.handlers`;
:mod:`namedschema.rlpyt.resume.state` makes this process's registry from it
and is the public face of all this.

Handler         how to capture and restore the state one class adds
HandlerTable    handler key -> Handler, and capture / restore / check / prepare over it
ResumeContext   what the handlers of one capture, check, restore or prepare share (``ctx``)
StateMismatchError  (re-exported from namedschema.errors) the state does not fit the component
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..._core.optional import is_tensor
from ..._core.tree import is_named
from ...errors import StateMismatchError

__all__ = ["Handler", "HandlerTable", "ResumeContext", "StateMismatchError", "handler_key",
           "writable_copy", "say_on_stderr", "CaptureFunction", "RestoreFunction",
           "CheckFunction", "PrepareFunction"]

# What a handler is made of; ctx is the ResumeContext of the call.
CaptureFunction = Callable[[Any, "ResumeContext"], dict[str, Any]]
RestoreFunction = Callable[[Any, Any, "ResumeContext"], object]
CheckFunction = Callable[[Any, "ResumeContext"], list[str]]
PrepareFunction = Callable[[Any, Any, "ResumeContext"], object]


@dataclass(frozen=True)
class Handler:
    """How to capture and restore the state one class adds.

    ``capture(obj, ctx) -> dict``, ``restore(obj, state, ctx)``, the
    optional ``check(obj, ctx) -> list of str`` (reasons the state cannot be
    restored exactly, said before training starts) and the optional
    ``prepare(obj, saved, ctx)``, run before rlpyt's startup (before sampler
    workers fork, so they inherit what it does) with this handler's state
    from the checkpoint, or None when the run starts from scratch. ``ctx`` is
    the :class:`ResumeContext` of that capture, restore, check or prepare.
    """

    capture: CaptureFunction
    restore: RestoreFunction
    check: CheckFunction | None = None
    prepare: PrepareFunction | None = None
    # Instance attributes this handler captures and restores itself: the
    # handlers of base classes leave them alone (an env's emulator, say).
    attributes: tuple[str, ...] = ()
    # Whether restore() gets writable copies of the state's arrays; False
    # hands over the checkpoint's (read-only, mapped) arrays as they are.
    writable: bool = True


def handler_key(cls: type | str) -> str:
    """The registry key of class ``cls``: ``"module.QualName"`` (a str is a key already)."""
    return cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"


def say_on_stderr(message: str) -> None:
    """How a context without a resume to tell says a note (sampler workers, tests)."""
    print(f"namedschema.rlpyt: {message}", file=sys.stderr)


@dataclass
class ResumeContext:
    """What the handlers of one capture, check, restore or prepare share: their ``ctx``.

    Handlers recurse through it (``ctx.capture(obj.collector)``), so they reach
    the very table the resume uses, the handlers users registered included.
    """

    handlers: HandlerTable
    # The sampler's TrajInfoCls: trajectory infos are rebuilt as it.
    traj_info_cls: Any = None
    # The run accepted new env arguments: envs are not restored, they start afresh.
    new_envs: bool = False
    # Envs a restore could not restore (handlers add them): they start new episodes.
    fresh_envs: list[Any] = field(default_factory=list)
    # Says a message once, before training (the resume's notes).
    note_once: Callable[[str], None] = say_on_stderr

    def capture(self, obj: Any) -> dict[str, Any]:
        """The state of ``obj``: ``{handler key: state}`` for each of its handlers."""
        return self.handlers.capture(obj, self)

    def restore(self, obj: Any, state: dict[str, Any], what: str, partial: bool = False) -> None:
        """Restore ``state`` (from :meth:`capture`) into ``obj``; ``what`` names it in errors."""
        self.handlers.restore(obj, state, self, what, partial)

    def check(self, obj: Any) -> list[str]:
        """Reasons why ``obj`` cannot be resumed exactly; empty when it can."""
        return self.handlers.check(obj, self)


def writable_copy(value: Any) -> Any:
    """``value`` with every array in its dicts, lists and tuples copied (writable)."""
    import numpy as np
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if type(value) is dict:
        return {k: writable_copy(v) for k, v in value.items()}
    if type(value) is list:
        return [writable_copy(v) for v in value]
    if isinstance(value, tuple):
        items = [writable_copy(v) for v in value]
        return type(value)(*items) if is_named(value) else type(value)(items)
    if is_tensor(value):
        return value.clone()
    return value


class HandlerTable:
    """Handler key -> :class:`Handler`, and what a resume does with them.

    Made from a table of ``(key, Handler)`` pairs; :meth:`register` adds or
    replaces one.
    """

    def __init__(self, entries: Iterable[tuple[str, Handler]] = ()):
        self._handlers: dict[str, Handler] = dict(entries)

    def register(self, cls: type | str, handler: Handler) -> None:
        """Handle what class ``cls`` (a class or ``"module.QualName"``) adds; replaces."""
        self._handlers[handler_key(cls)] = handler

    def keys(self) -> list[str]:
        """The handled classes' keys, in the order they were listed or registered."""
        return list(self._handlers)

    def handlers_for(self, obj: Any) -> list[tuple[str, Handler]]:
        """The handlers that apply to ``obj``, base classes first."""
        found = []
        for cls in reversed(type(obj).__mro__):
            handler = self._handlers.get(handler_key(cls))
            if handler is not None:
                found.append((handler_key(cls), handler))
        return found

    def handlers_below(self, obj: Any, key: str) -> list[tuple[str, Handler]]:
        """The handlers of ``obj``'s classes more derived than the class of ``key``."""
        found = self.handlers_for(obj)
        keys = [k for k, _ in found]
        return found[keys.index(key) + 1:] if key in keys else found

    def owned_attributes(self, obj: Any, key: str) -> set[str]:
        """Attributes that handlers more derived than ``key``'s capture themselves."""
        return {name for _, handler in self.handlers_below(obj, key)
                for name in handler.attributes}

    def capture(self, obj: Any, ctx: ResumeContext) -> dict[str, Any]:
        """The state of ``obj``: ``{handler key: state}`` (empty if no handler applies)."""
        return {key: handler.capture(obj, ctx) for key, handler in self.handlers_for(obj)}

    def restore(self, obj: Any, state: dict[str, Any], ctx: ResumeContext, what: str,
                partial: bool = False) -> None:
        """Restore ``state`` (from :meth:`capture`) into ``obj``, a freshly built component.

        With ``partial``, handlers without state in ``state`` are left out.
        """
        handlers = dict(self.handlers_for(obj))
        if partial:
            handlers = {k: h for k, h in handlers.items() if k in state}
        missing = sorted(set(state) - set(handlers))
        if missing:
            raise StateMismatchError(
                f"{what}: the checkpoint holds state of {missing}, which the freshly built "
                f"{type(obj).__name__} does not have (was the run built differently?)")
        for key, handler in handlers.items():
            if key not in state:
                raise StateMismatchError(
                    f"{what}: the checkpoint has no state for {key} (was the run built "
                    f"with a different {type(obj).__name__}?)")
            handler.restore(obj, writable_copy(state[key]) if handler.writable else state[key],
                            ctx)

    def prepare(self, obj: Any, state: dict[str, Any] | None, ctx: ResumeContext) -> None:
        """Run the ``prepare`` hooks of ``obj``'s handlers, before rlpyt's startup.

        ``state`` is what the checkpoint holds for ``obj`` (from :meth:`capture`),
        or None when the run starts from scratch.
        """
        for key, handler in self.handlers_for(obj):
            if handler.prepare is not None:
                handler.prepare(obj, None if state is None else state.get(key), ctx)

    def check(self, obj: Any, ctx: ResumeContext) -> list[str]:
        """Reasons why ``obj`` cannot be resumed exactly; empty when it can."""
        reasons = []
        if not self.handlers_for(obj):
            reasons.append(f"{handler_key(type(obj))}: no state handler; its state is not "
                           "saved (register one with namedschema.rlpyt.register_handler)")
        for _, handler in self.handlers_for(obj):
            if handler.check is not None:
                reasons.extend(handler.check(obj, ctx))
        return reasons
