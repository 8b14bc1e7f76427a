"""The handler registry: which handler captures and restores what one rlpyt class adds.

A component's state is ``{handler key: captured dict}`` for every class in its
method resolution order that has a handler, so mixins compose. The handlers of
rlpyt's own classes live in ``_learner_handlers`` and ``_sampling_handlers``;
:mod:`namedschema.rlpyt.resume.state` installs them and is the public face of all this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..._core.optional import is_tensor
from ..._core.tree import is_named
from ...errors import StateMismatchError

__all__ = ["Handler", "CaptureFunction", "RestoreFunction", "CheckFunction", "PrepareFunction",
           "StateMismatchError", "handler_key", "register_handler",
           "handlers_for", "capture", "restore", "prepare", "check", "handlers_below",
           "owned_attributes", "writable_copy"]

# What a handler is made of: capture(obj, ctx) -> state, restore(obj, state, ctx),
# check(obj, ctx) -> reasons, prepare(obj, saved state or None); ctx: the resume context.
CaptureFunction = Callable[[Any, Any], dict[str, Any]]
RestoreFunction = Callable[[Any, dict[str, Any], Any], object]
CheckFunction = Callable[[Any, Any], list[str]]
PrepareFunction = Callable[[Any, Any], object]


@dataclass(frozen=True)
class Handler:
    """How to capture and restore the state one class adds.

    ``capture(obj, ctx) -> dict``, ``restore(obj, state, ctx)``, the
    optional ``check(obj, ctx) -> list of str`` (reasons the state cannot be
    restored exactly, said before training starts) and the optional
    ``prepare(obj, saved)``, run before rlpyt's startup (before sampler
    workers fork, so they inherit what it does) with this handler's state
    from the checkpoint, or None when the run starts from scratch. ``ctx`` is the resume
    context (see ``namedschema.rlpyt.resume``): it carries the sampler's
    ``TrajInfoCls`` and collects notes.
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


_HANDLERS: dict[str, Handler] = {}


def handler_key(cls) -> str:
    """The registry key of class ``cls``: ``"module.QualName"``."""
    return f"{cls.__module__}.{cls.__qualname__}"


def register_handler(cls: type[Any] | str, capture: CaptureFunction, restore: RestoreFunction,
                     check: CheckFunction | None = None,
                     prepare: PrepareFunction | None = None, *,
                     attributes: str | Iterable[str] = (), writable: bool = False) -> None:
    """Handle the state that class ``cls`` (a class or ``"module.QualName"``) adds.

    Handlers of every class in a component's MRO run, base classes first, so
    a handler covers only what its own class adds, and its ``restore`` has
    the last word. ``attributes`` names instance attributes the handler
    captures and restores itself: base-class handlers leave them alone (the
    generic env handler neither pickles nor replaces them). ``restore`` gets
    the captured dict as loaded (arrays of the checkpoint, read-only, no
    copy), or with writable copies of its arrays if ``writable``: rlpyt's own
    handlers copy into existing memory and need no copies; the public
    ``namedschema.rlpyt.register_handler`` asks for them by default.
    Registering a class again replaces its handler.
    """
    key = cls if isinstance(cls, str) else handler_key(cls)
    if isinstance(attributes, str):
        attributes = (attributes,)
    _HANDLERS[key] = Handler(capture, restore, check, prepare, tuple(attributes),
                             bool(writable))


def handlers_for(obj: object) -> list[tuple[str, Handler]]:
    """The handlers that apply to ``obj``, base classes first."""
    found = []
    for cls in reversed(type(obj).__mro__):
        handler = _HANDLERS.get(handler_key(cls))
        if handler is not None:
            found.append((handler_key(cls), handler))
    return found


def handlers_below(obj, key: str) -> list[tuple[str, Handler]]:
    """The handlers of ``obj``'s classes more derived than the class of ``key``."""
    found = handlers_for(obj)
    keys = [k for k, _ in found]
    return found[keys.index(key) + 1:] if key in keys else found


def owned_attributes(obj, key: str) -> set:
    """Attributes that handlers more derived than ``key``'s capture themselves."""
    return {name for _, handler in handlers_below(obj, key) for name in handler.attributes}


def writable_copy(value):
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


def capture(obj: Any, ctx: Any) -> dict[str, Any]:
    """The state of ``obj``: ``{handler key: state}`` (empty if no handler applies)."""
    return {key: handler.capture(obj, ctx) for key, handler in handlers_for(obj)}


def restore(obj: Any, state: dict[str, Any], ctx: Any, what: str,
            partial: bool = False) -> None:
    """Restore ``state`` (from :func:`capture`) into ``obj``, a freshly built component.

    With ``partial``, handlers without state in ``state`` are left out.
    """
    handlers = dict(handlers_for(obj))
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


def prepare(obj: Any, state: dict[str, Any] | None) -> None:
    """Run the ``prepare`` hooks of ``obj``'s handlers, before rlpyt's startup.

    ``state`` is what the checkpoint holds for ``obj`` (from :func:`capture`),
    or None when the run starts from scratch.
    """
    for key, handler in handlers_for(obj):
        if handler.prepare is not None:
            handler.prepare(obj, None if state is None else state.get(key))


def check(obj: Any, ctx: Any) -> list[str]:
    """Reasons why ``obj`` cannot be resumed exactly; empty when it can."""
    reasons = []
    if not handlers_for(obj):
        reasons.append(f"{handler_key(type(obj))}: no state handler; its state is not saved "
                       "(register one with namedschema.rlpyt.register_handler)")
    for _, handler in handlers_for(obj):
        if handler.check is not None:
            reasons.extend(handler.check(obj, ctx))
    return reasons
