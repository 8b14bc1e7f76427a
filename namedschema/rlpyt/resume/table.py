"""The handler table of rlpyt's components, and the data its handlers move.

A component's state is ``{handler key: captured dict}`` for every class in its
method resolution order that has a handler, so mixins compose. What is not
rlpyt's own (a torch module, an optimizer, a scheduler, an Atari emulator) is
captured and restored by its row of the one table of state kinds,
``namedschema.training.state_kinds``, through :meth:`ResumeContext.capture_kind`
and :meth:`ResumeContext.restore_kind`: the handlers of rlpyt's classes
(``namedschema.rlpyt.resume.handlers``) hold only what rlpyt forces on us.

Handler         how to capture and restore the state one class adds
HandlerTable    handler key -> Handler, and capture / restore / check / prepare over it
ResumeContext   what the handlers of one capture, check, restore or prepare share (``ctx``)
StateMismatchError  (re-exported from namedschema.errors) the state does not fit the component
data_state / restore_data_state   attribute-wise state: arrays written in place, scalars
copy_into / fresh_copy            one array, tensor or array tuple in place / copied
traj_infos_state / make_traj_infos  rlpyt's trajectory infos as plain dicts, and back
portable / retype / unsavable     rlpyt's run-time named tuples saved as schemas

Captured state is data wherever it can be (arrays, tensors, numbers, array
tuples), so a checkpoint stores it raw; restoring writes arrays *into* the
objects a freshly built run made (``np.copyto``), which keeps views as views
and shared memory shared.

rlpyt makes its sample types at run time (``namedarraytuple_like``: classes
that no module holds, so pickle cannot name them) or assigns them to module
globals lazily (``BufferSamples``: a fresh interpreter has ``None`` there).
In the state a resume checkpoint holds, every such named tuple of a
class-per-type kind (rlpyt's ``namedarraytuple``, ``collections.namedtuple``)
is replaced by an instance of a namedschema schema with the same name and
fields (:func:`portable`), which the checkpoint stores by value; restoring
writes field by field into the objects the freshly built run made, so their
own classes stay.
"""

from __future__ import annotations

import io
import pickle
import sys
import weakref
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from ..._core.schema import (
    NamedArrayTupleSchema,
    NamedTupleSchema,
    is_classic_namedtuple_class,
    is_classic_nat_class,
)
from ..._core.tree import import_torch, is_named, is_tensor
from ...checkpoint._storage import copy_from_map
from ...errors import StateMismatchError
from ...training import state_kinds as _kinds
from ..patch.pickling import LAZY_GLOBALS, refuse_unloadable

__all__ = ["Handler", "HandlerTable", "ResumeContext", "StateMismatchError", "handler_key",
           "writable_copy", "say_on_stderr", "CaptureFunction", "RestoreFunction",
           "CheckFunction", "PrepareFunction", "ASYNC_SAMPLER", "is_async_sampler",
           "data_state", "restore_data_state", "copy_into", "fresh_copy",
           "traj_infos_state", "make_traj_infos", "portable", "retype", "dry_pickle",
           "unsavable"]


# -- the table ------------------------------------------------------------------------

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


ASYNC_SAMPLER = "rlpyt.samplers.async_.base.AsyncSamplerMixin"


def is_async_sampler(sampler: object) -> bool:
    """Whether ``sampler`` is one of rlpyt's async samplers (its own process)."""
    return any(handler_key(c) == ASYNC_SAMPLER for c in type(sampler).__mro__)


def say_on_stderr(message: str) -> None:
    """How a context without a resume to tell says a note (sampler workers, tests)."""
    print(f"namedschema.rlpyt: {message}", file=sys.stderr)


@dataclass
class ResumeContext:
    """What the handlers of one capture, check, restore or prepare share: their ``ctx``.

    Handlers recurse through it (``ctx.capture(obj.collector)``), so they reach
    the very table the resume uses, the handlers users registered included; and
    they hand what is not rlpyt's own to its row of the state-kind table
    (``ctx.capture_kind(optimizer, "algo.optim")``).
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

    def kind_context(self, where: str) -> _kinds.KindContext:
        """The context a state-kind row gets for the part ``where`` of a component:
        pickling allowed (resume checkpoints pickle), refusals as StateMismatchError."""
        return _kinds.KindContext(where, "", allow_pickle=True,
                                  warn_once=lambda key, message: self.note_once(message),
                                  fail=lambda message: StateMismatchError(f"{where}: {message}",
                                                                         where=where))

    def capture_kind(self, obj: Any, where: str) -> Any:
        """``obj``'s state, captured by its row of the state-kind table."""
        return _kinds.kind_of(obj).capture(obj, self.kind_context(where))

    def restore_kind(self, obj: Any, state: Any, where: str) -> None:
        """Check ``state`` with ``obj``'s row (StateMismatchError, nothing changed), then
        put it in."""
        kind, kctx = _kinds.kind_of(obj), self.kind_context(where)
        if kind.check is not None:
            try:
                kind.check(obj, state, kctx)
            except (TypeError, ValueError, KeyError, IndexError, AttributeError,
                    OverflowError, RuntimeError) as exc:
                if _kinds.names_its_component(exc):
                    raise
                raise StateMismatchError(f"{where}: {exc}", where=where) from None
        kind.apply(obj, state, kctx)


def writable_copy(value: Any) -> Any:
    """``value`` with every array in its dicts, lists and tuples copied (writable)."""
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

    def __init__(self, entries: Iterable[tuple[str, Handler]] = ()) -> None:
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


# -- attribute-wise data state ----------------------------------------------------------

_Info = TypeVar("_Info", bound=MutableMapping[str, Any])   # rlpyt's TrajInfo, an AttrDict

_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)


def _is_shared_value(value: object) -> bool:
    # multiprocessing RawValue (a ctypes scalar) or Value (a Synchronized wrapper).
    from multiprocessing.sharedctypes import Synchronized
    return isinstance(value, Synchronized) or \
        (hasattr(type(value), "_type_") and hasattr(value, "value"))


def _is_replay_part(value: object) -> bool:
    # Objects a replay buffer is made of (its SumTree): their state is recursed into.
    module = getattr(type(value), "__module__", "") or ""
    return module.startswith("rlpyt.replays.") and hasattr(value, "__dict__") \
        and not isinstance(value, type)


def _data_value(value: Any) -> tuple[str, Any] | None:
    """``(kind, data)`` for a storable attribute value, or None to skip it."""
    if isinstance(value, np.ndarray) or is_tensor(value):
        return ("array", value)
    if isinstance(value, _SCALARS):
        return ("value", value)
    if is_named(value):
        return ("tuple", value)
    if _is_shared_value(value):
        return ("shared", value.value)
    if _is_replay_part(value):
        return ("object", data_state(value))
    return None


def data_state(obj: Any, names: Iterable[str] | None = None,
               skip: Iterable[str] = ()) -> dict[str, Any]:
    """Attribute-wise state: arrays, tensors, scalars, array tuples, shared values.

    Nested parts of replay buffers (a ``SumTree``) are recursed into. Attributes of
    other kinds (locks, functions, classes) are not state and are left out.
    """
    out = {}
    items = vars(obj).items() if names is None else \
        ((n, getattr(obj, n)) for n in names if hasattr(obj, n))
    for name, value in items:
        if name in skip:
            continue
        item = _data_value(value)
        if item is not None:
            out[name] = [item[0], item[1]]
    return out


def copy_into(target: Any, value: Any, where: str) -> None:
    """Write ``value`` into the existing array/tensor/array tuple ``target``."""
    if is_named(target):
        if not is_named(value) or tuple(target._fields) != tuple(value._fields):
            raise StateMismatchError(f"{where}: fields differ: checkpoint "
                                     f"{getattr(value, '_fields', type(value).__name__)}, "
                                     f"built {tuple(target._fields)}")
        for field, t, v in zip(target._fields, target, value, strict=True):
            copy_into(t, v, f"{where}.{field}")
        return
    if target is None or isinstance(target, _SCALARS):
        if not (value is None or isinstance(value, _SCALARS)):
            raise StateMismatchError(f"{where}: the built run has {target!r} where "
                                     f"the checkpoint has {type(value).__name__}")
        return
    if is_tensor(target):
        torch = import_torch()
        src = value if is_tensor(value) else torch.as_tensor(np.asarray(value))
        if tuple(src.shape) != tuple(target.shape) or src.dtype != target.dtype:
            raise StateMismatchError(
                f"{where}: checkpoint has {src.dtype} {tuple(src.shape)}, the built run "
                f"{target.dtype} {tuple(target.shape)}")
        with torch.no_grad():
            target.copy_(src)
        return
    src = value.numpy() if is_tensor(value) else np.asarray(value)
    if src.shape != target.shape or src.dtype != target.dtype:
        raise StateMismatchError(
            f"{where}: checkpoint has {src.dtype} {src.shape}, the built run "
            f"{target.dtype} {target.shape} (was it built with other sizes?)")
    # In pieces, releasing a mapped checkpoint's pages behind them: a resume
    # holds the buffer once, not once in memory and once as mapped file.
    copy_from_map(target, src)


def restore_data_state(obj: Any, state: dict[str, Any], where: str,
                       _written: Any = None) -> None:
    """Put a :func:`data_state` back: arrays in place, scalars assigned.

    An array that views memory already written in this call, from a saved
    array that viewed the same saved memory, is not copied twice (the frame
    buffer's ``samples_new_frames``, the sum tree's ``priorities``).
    """
    written: list[tuple[np.ndarray[Any, Any], Any]] = [] if _written is None else _written
    # Arrays that own their memory first, so that their views can be skipped.
    items = sorted(state.items(), key=lambda item: _is_view(getattr(obj, item[0], None)))
    for name, (kind, data) in items:
        path = f"{where}.{name}"
        current = getattr(obj, name, None)
        if kind == "value":
            setattr(obj, name, data)
        elif kind == "shared":
            if current is None or not _is_shared_value(current):
                raise StateMismatchError(f"{path}: expected a shared value in the built run")
            current.value = data
        elif kind == "object":
            if current is None or not hasattr(current, "__dict__"):
                raise StateMismatchError(f"{path}: the built run has no object here")
            restore_data_state(current, data, path, written)
        elif kind in ("array", "tuple"):
            if current is None or isinstance(current, _SCALARS):
                # Made lazily (first sample_batch, say): take the checkpoint's.
                setattr(obj, name, fresh_copy(data))
            elif not _already_written(current, data, written):
                copy_into(current, data, path)
                if isinstance(current, np.ndarray):
                    written.append((current, data))
        else:
            raise StateMismatchError(f"{path}: unknown state kind {kind!r}")


def _is_view(value: object) -> bool:
    return isinstance(value, np.ndarray) and value.base is not None


def _already_written(target: object, source: object,
                     written: list[tuple[np.ndarray[Any, Any], Any]]) -> bool:
    if not (isinstance(target, np.ndarray) and isinstance(source, np.ndarray)):
        return False
    if target.shape != source.shape or target.dtype != source.dtype:
        return False
    for t, s in written:
        if np.may_share_memory(target, t) and np.may_share_memory(source, s):
            # Both sides view the same offsets only if the layout matches.
            offset_t = _offset(target, t)
            offset_s = _offset(source, s)
            if offset_t is not None and offset_t == offset_s \
                    and target.strides == source.strides:
                return True
    return False


def _offset(view: np.ndarray[Any, Any], base: np.ndarray[Any, Any]) -> int | None:
    try:
        offset: int = (view.__array_interface__["data"][0]
                       - base.__array_interface__["data"][0])
        return offset
    except (AttributeError, KeyError, TypeError):
        return None


def fresh_copy(value: Any) -> Any:
    """A copy of an array, tensor or array tuple (others are returned as they are)."""
    if is_named(value):
        return type(value)(*(fresh_copy(v) for v in value))
    if is_tensor(value):
        return value.clone()
    if isinstance(value, np.ndarray):
        out = np.empty_like(value)
        copy_from_map(out, value)   # as copy_into: the mapped pages are released
        return out
    return value


# -- trajectory infos (AttrDicts) are stored as plain dicts -------------------------

def traj_infos_state(infos: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Trajectory infos (rlpyt ``AttrDict``s) as plain dicts, for a checkpoint."""
    return [dict(info) for info in infos]


def make_traj_infos(states: Iterable[Mapping[str, Any]], cls: Callable[[], _Info]
                    ) -> list[_Info]:
    """Trajectory infos of class ``cls`` again, from :func:`traj_infos_state`."""
    out = []
    for state in states:
        info = cls()
        info.clear()
        for key, value in state.items():
            info[key] = value
        out.append(info)
    return out


# -- rlpyt's run-time named tuples by value --------------------------------------------

_SCHEMAS: weakref.WeakKeyDictionary[type, NamedTupleSchema] = weakref.WeakKeyDictionary()

# The class tests of _core.schema, as called here.
_is_classic_nat_class: Callable[[object], bool] = is_classic_nat_class
_is_classic_namedtuple_class: Callable[[object], bool] = is_classic_namedtuple_class


class _NamedTuple(Protocol):
    """An instance of a class-per-type named tuple (stdlib ``namedtuple``, rlpyt's)."""

    _fields: tuple[str, ...]


def _schema_for(cls: type[_NamedTuple]) -> NamedTupleSchema:
    schema = _SCHEMAS.get(cls)
    if schema is None:
        factory = NamedArrayTupleSchema if _is_classic_nat_class(cls) else NamedTupleSchema
        schema = factory(cls.__name__, tuple(cls._fields))
        _SCHEMAS[cls] = schema
    return schema


def _findable(cls: type) -> bool:
    """Whether pickle finds ``cls`` by name in any process (else it goes by value)."""
    module_name, name = cls.__module__, cls.__qualname__
    return (module_name, name) not in LAZY_GLOBALS and \
        getattr(sys.modules.get(module_name), name, None) is cls


def portable(value: Any, _memo: dict[int, Any] | None = None) -> Any:
    """``value`` with the classic named tuples pickle cannot find by name made schemas.

    Those of classes a module holds (rlpyt's ``AgentInputs``, your own) stay
    as they are, in dicts, lists and tuples. Containers that hold none of the
    others are returned as they are; arrays and other objects are never copied.
    """
    memo = {} if _memo is None else _memo
    key = id(value)
    if key in memo:
        return memo[key]
    kind = type(value)
    if kind is dict:
        items = {k: portable(v, memo) for k, v in value.items()}
        result = value if all(items[k] is value[k] for k in value) else items
    elif kind is list:
        values = [portable(v, memo) for v in value]
        result = value if all(a is b for a, b in zip(values, value, strict=True)) else values
    elif isinstance(value, tuple):
        values = [portable(v, memo) for v in value]
        same = all(a is b for a, b in zip(values, value, strict=True))
        if _is_classic_namedtuple_class(kind) and not _findable(kind):
            result = _schema_for(kind)(*values)
        elif same:
            result = value
        elif is_named(value):
            result = kind(*values)
        else:
            result = kind(values)
    else:
        result = value
    memo[key] = result
    return result


def retype(value: Any, like: Any) -> Any:
    """``value`` (a named tuple) rebuilt with the classes of ``like``, where fields match."""
    if not (is_named(value) and is_named(like)
            and tuple(value._fields) == tuple(like._fields)):
        return value
    return type(like)(*(retype(v, w) for v, w in zip(value, like, strict=True)))


class _ArraysLeftOut(pickle.Pickler):
    def reducer_override(self, obj: object) -> Any:  # a reduce value, or NotImplemented
        # What namedschema.save refuses: rlpyt classes no fresh process finds.
        if isinstance(obj, type):
            refuse_unloadable(obj)
        return NotImplemented

    def persistent_id(self, obj: object) -> int | None:
        module = type(obj).__module__ or ""
        if module == "numpy" or module.startswith("torch"):
            return id(obj)
        return None


def dry_pickle(value: object) -> None:
    """Pickle ``value`` with its arrays and tensors left out; raise what pickle raises."""
    _ArraysLeftOut(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(value)


def unsavable(state: object) -> str | None:
    """Why ``state`` (captured by the handlers) could not be checkpointed; None if it can."""
    try:
        dry_pickle(portable(state))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
