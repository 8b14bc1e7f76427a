"""Installing and removing the rlpyt patch."""

from __future__ import annotations

import csv
import importlib
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import IO, Any, Protocol, TypeGuard, cast

from ..._core import schema as _factories
from ..._core.attrdict import reduce_attrdict, setstate_attrdict
from ..._core.instance import NamedArrayTuple, NamedTuple
from ..._core.schema import NamedArrayTupleSchema, NamedTupleSchema, build_schema
from ...errors import MissingModuleError, RlpytImportError
from ...integrations import import_hooks
from . import pickling
from .pickling import GLOBALS_KEY, assign_lazy_globals, used_lazy_globals

__all__ = ["continue_tabular_logs", "open_tabular_logs", "patch_rlpyt", "unpatch_rlpyt",
           "is_patched", "RlpytPatch", "RlpytImportError"]


# ---------------------------------------- tabular_logs
#
# A resumed rlpyt run continues its ``progress.csv`` instead of erasing it.
#
# rlpyt's logger opens every tabular output with mode ``'w'``
# (``rlpyt.utils.logging.logger.add_tabular_output``), so a resumed run that
# calls ``logger_context`` again would erase the rows of the run it continues.
# While a resume is set up (:func:`continue_tabular_logs`), ``add_tabular_output``
# of a file that already has rows instead:
#
# * drops the rows of iterations at or after the resumed one (the resumed run
#   logs them again: they were logged after the checkpoint, before the kill),
#   replacing the file atomically;
# * opens it for appending, with rlpyt's header bookkeeping set from the
#   file's header, so no second header is written.
#
# The file then reads as the uninterrupted run's would. Nothing of rlpyt's code
# on disk changes; the function is swapped in rlpyt's logger module and put
# back by the returned callable.
#
# continue_tabular_logs   make add_tabular_output continue existing files; returns the undo
# open_tabular_logs       the tabular files rlpyt's logger has open now

ITERATION = "Iteration"   # the column every rlpyt runner logs (after a prefix such as
                          # "Diagnostics/")


class _Logger(Protocol):
    """What is used here of rlpyt's logger module (``rlpyt.utils.logging.logger``)."""

    add_tabular_output: Callable[[str], object]
    _add_output: Callable[..., object]
    _tabular_outputs: list[str]
    _tabular_fds: dict[str, IO[str]]
    _tabular_fds_hold: dict[str, IO[str]]
    _tabular_header_written: set[str]
    _tabular_headers: dict[str, list[str]]


def _logger() -> _Logger:
    from rlpyt.utils.logging import logger
    module: _Logger = logger
    return module


def open_tabular_logs() -> list[str]:
    """The tabular (csv) files rlpyt's logger has open now."""
    return list(getattr(_logger(), "_tabular_outputs", []))


def continue_tabular_logs(resumed_itr: int) -> Callable[[], None]:
    """Until the returned callable is called, rlpyt's ``add_tabular_output`` continues a
    file that has rows (keeping those of iterations before ``resumed_itr``)."""
    logger = _logger()
    original = logger.add_tabular_output

    def add_tabular_output(file_name: str) -> object:
        header = None
        if file_name not in logger._tabular_fds_hold and file_name not in logger._tabular_fds:
            header = _keep_rows_before(file_name, resumed_itr)
        if header is None:
            return original(file_name)
        logger._add_output(file_name, logger._tabular_outputs, logger._tabular_fds, mode="a")
        logger._tabular_header_written.add(file_name)
        logger._tabular_headers[file_name] = header
        return None

    add_tabular_output.__wrapped__ = original  # type: ignore[attr-defined]
    logger.add_tabular_output = add_tabular_output

    def undo() -> None:
        if logger.add_tabular_output is add_tabular_output:
            logger.add_tabular_output = original
    return undo


def _keep_rows_before(file_name: str, itr: int) -> list[str] | None:
    """Cut ``file_name`` to its header and rows of iterations before ``itr``; its header,
    or None if the file does not exist or has no header (rlpyt then starts it anew)."""
    try:
        with open(file_name, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if not rows or not rows[0]:
        return None
    header, body = rows[0], rows[1:]
    column = next((i for i, name in enumerate(header)
                   if name == ITERATION or name.endswith("/" + ITERATION)), None)
    if column is None:
        return header
    kept = [row for row in body if not _at_or_after(row, column, itr)]
    if len(kept) != len(body):
        tmp = f"{file_name}.namedschema-{os.getpid()}.tmp"
        with open(tmp, "w", newline="") as f:
            csv.writer(f).writerows([header, *kept])
        os.replace(tmp, file_name)
    return header


def _at_or_after(row: list[str], column: int, itr: int) -> bool:
    try:
        return float(row[column]) >= itr
    except (IndexError, ValueError):
        return False


# ---------------------------------------- install
#
# Make an installed rlpyt build its named tuples and buffers with namedschema.
#
# rlpyt makes its sample types at run time with ``namedarraytuple``, some of
# them as module globals that stay ``None`` until a constructor assigns them, so
# pickles of its replay buffers do not load in a fresh interpreter. After
# :func:`patch_rlpyt`, rlpyt makes schemas instead, and those pickle by value;
# its replay buffers, sum trees, ``RWLock`` and ``AttrDict`` also get pickling
# methods that keep array views, locks and ``__dict__ is self`` right
# (:mod:`namedschema.rlpyt.patch.pickling`).
#
# patch_rlpyt       swap rlpyt's factories and buffer functions for namedschema's
# unpatch_rlpyt     undo everything patch_rlpyt did
# is_patched        whether the patch is active in this process
# RlpytPatch        what one call of patch_rlpyt changed (returned by it)
# RlpytImportError  old name of the MissingModuleError raised when rlpyt cannot be imported

# Names replaced in rlpyt.utils.collections, with their namedschema versions.
_COLLECTIONS_NAMES = {
    "namedtuple": _factories.namedtuple,
    "namedarraytuple": _factories.namedarraytuple,
    "namedarraytuple_like": _factories.namedarraytuple_like,
    "NamedArrayTupleSchema_like": _factories.NamedArrayTupleSchema_like,
    "is_namedtuple": _factories.is_namedtuple,
    "is_namedtuple_class": _factories.is_namedtuple_class,
    "is_namedarraytuple": _factories.is_namedarraytuple,
    "is_namedarraytuple_class": _factories.is_namedarraytuple_class,
    "NamedTupleSchema": NamedTupleSchema,
    "NamedArrayTupleSchema": NamedArrayTupleSchema,
    "NamedTuple": NamedTuple,
    "NamedArrayTuple": NamedArrayTuple,
}

def _buffer_getstate(self: object) -> dict[str, Any]:
    """A replay buffer's attributes plus the lazily assigned sample types it uses.

    They ride under ``GLOBALS_KEY``, which pickling's reduction takes out
    again and assigns on load (patched or not): see ``_lazy_globals``.
    """
    state = dict(self.__dict__)
    used = used_lazy_globals(type(self))
    if used:
        state[GLOBALS_KEY] = used
    return state


def _buffer_setstate(self: object, state: Mapping[str, Any]) -> None:
    """Restore the attributes; assign rlpyt's lazy globals as the constructor does."""
    state = dict(state)
    used = state.pop(GLOBALS_KEY, None) or {}
    self.__dict__.update(state)
    assign_lazy_globals(used)


# Methods given to rlpyt classes (with their subclasses) so that plain pickle
# is right: (module, class) -> {attribute: function}.
_CLASS_METHODS: dict[tuple[str, str], dict[str, Any]] = {
    ("rlpyt.utils.collections", "AttrDict"): {
        "__reduce_ex__": reduce_attrdict, "__setstate__": setstate_attrdict},
    ("rlpyt.replays.base", "BaseReplayBuffer"): {
        "__reduce_ex__": pickling.reduce_keeping_views,
        "__getstate__": _buffer_getstate, "__setstate__": _buffer_setstate},
    ("rlpyt.replays.sum_tree", "SumTree"): {
        "__reduce_ex__": pickling.reduce_keeping_views},
    ("rlpyt.utils.synchronize", "RWLock"): {"__reduce_ex__": pickling.reduce_fresh},
}
_MISSING = object()

# Names replaced in rlpyt.utils.buffer when namedschema.buffer provides them.
_BUFFER_NAMES = (
    "buffer_from_example", "build_array", "np_mp_array", "torchify_buffer",
    "numpify_buffer", "buffer_to", "buffer_method", "buffer_func",
    "get_leading_dims",
)


@dataclass(frozen=True)
class RlpytPatch:
    """What a call of :func:`patch_rlpyt` changed.

    Attributes:
        rebound: ``"module.name"`` of every rlpyt global that now refers to a
            namedschema function or class (the two utility modules included).
        recreated: ``"module.name"`` of every module-level rlpyt
            namedarraytuple class replaced by a schema of the same name and
            fields.
        already_patched: the patch was active before this call, which then
            only handled rlpyt modules imported since.
        methods: ``"module.Class.method"`` of every method given to an rlpyt
            class (pickling of replay buffers, sum trees, ``RWLock``,
            ``AttrDict``), for the classes imported so far.
    """

    rebound: tuple[str, ...] = ()
    recreated: tuple[str, ...] = ()
    already_patched: bool = False
    methods: tuple[str, ...] = ()


class _State:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Back to the unpatched state."""
        self.active = False
        # (module, name, original value, value we set), in the order applied.
        self.records: list[tuple[ModuleType, str, object, object]] = []
        # (class, attribute, original own value or _MISSING, value we set).
        self.class_records: list[tuple[type, str, object, object]] = []
        self.pickling = True
        # id(original object) -> (original, replacement); the original is kept
        # so its id cannot be reused while the patch is active.
        self.replacements: dict[int, tuple[object, object]] = {}
        self.classic_nat_codes: frozenset[Any] = frozenset()
        self.hook: _ImportHook | None = None


_state = _State()
# Re-entrant: patching imports rlpyt modules, which runs the import hook.
_lock = threading.RLock()


class _ClassicNat(Protocol):
    """A class made by rlpyt's own ``namedarraytuple`` (what the patch recreates)."""

    _fields: tuple[str, ...]


def _is_rlpyt_module(name: str) -> bool:
    return name == "rlpyt" or name.startswith("rlpyt.")


def _import_rlpyt() -> tuple[ModuleType, ModuleType]:
    try:
        collections_mod = importlib.import_module("rlpyt.utils.collections")
        buffer_mod = importlib.import_module("rlpyt.utils.buffer")
    except ImportError as exc:
        raise MissingModuleError(
            "patch_rlpyt: rlpyt is not importable (rlpyt.utils.collections and "
            "rlpyt.utils.buffer are needed); install rlpyt or put its source tree "
            f"on sys.path. Cause: {type(exc).__name__}: {exc}",
            module=exc.name or "rlpyt") from exc
    return collections_mod, buffer_mod


def _buffer_replacements() -> dict[str, Any]:
    from ... import buffer as ns_buffer  # numpy: imported only when patching
    return {name: getattr(ns_buffer, name) for name in _BUFFER_NAMES}


def _classic_nat_codes(namedarraytuple_func: object) -> frozenset[Any]:
    """Code objects of the methods rlpyt's namedarraytuple puts in its classes.

    A class whose ``__getitem__`` runs one of these codes was made by that
    factory, which is how module-level rlpyt types are recognised safely.
    """
    code = getattr(namedarraytuple_func, "__code__", None)
    if code is None:
        return frozenset()
    return frozenset(c for c in code.co_consts if hasattr(c, "co_code"))


def _is_classic_rlpyt_nat(obj: object) -> TypeGuard[type[_ClassicNat]]:
    if not isinstance(obj, type) or isinstance(obj, NamedTupleSchema):
        return False
    getitem = obj.__dict__.get("__getitem__")
    code = getattr(getitem, "__code__", None)
    return code is not None and code in _state.classic_nat_codes


def _set(module: ModuleType, name: str, new: object) -> str:
    old = module.__dict__[name]
    setattr(module, name, new)
    _state.records.append((module, name, old, new))
    return f"{module.__name__}.{name}"


def _replacement_for_type(cls: type[_ClassicNat]) -> object:
    """The schema standing in for a classic rlpyt namedarraytuple class."""
    entry = _state.replacements.get(id(cls))
    if entry is not None:
        return entry[1]
    # Made as if by the module's own top-level code, so the id matches the one
    # a process gets when it patches before importing that module (spawn workers).
    # (build_schema returns a class of the metaclass it is given)
    schema = cast(NamedArrayTupleSchema,
                  build_schema(NamedArrayTupleSchema, cls.__name__, tuple(cls._fields),
                               module=cls.__module__, module_level=True))
    _state.replacements[id(cls)] = (cls, schema)
    return schema


def _patch_classes(module: ModuleType, methods: list[str]) -> None:
    """Give the rlpyt classes defined in ``module`` their pickling methods."""
    for (module_name, class_name), attrs in _CLASS_METHODS.items():
        if module.__name__ != module_name:
            continue
        cls = vars(module).get(class_name)
        if not isinstance(cls, type):
            continue
        for attr, func in attrs.items():
            if cls.__dict__.get(attr) is func:
                continue
            _state.class_records.append((cls, attr, cls.__dict__.get(attr, _MISSING), func))
            setattr(cls, attr, func)
            methods.append(f"{module_name}.{class_name}.{attr}")


def _rebind_module(module: ModuleType, rebound: list[str], recreated: list[str],
                   recreate_types: bool, methods: list[str] | None = None) -> None:
    """Point ``module``'s globals at the replacements of what they refer to."""
    if _state.pickling:
        _patch_classes(module, [] if methods is None else methods)
    for name, value in list(vars(module).items()):
        if name.startswith("__"):
            continue
        entry = _state.replacements.get(id(value))
        if entry is not None and entry[0] is value:
            into = recreated if _is_classic_rlpyt_nat(value) else rebound
            into.append(_set(module, name, entry[1]))
        elif recreate_types and _is_classic_rlpyt_nat(value):
            recreated.append(_set(module, name, _replacement_for_type(value)))


def _record_patched_imports(module: ModuleType) -> None:
    """Note globals that a module imported while patched got from the patch.

    ``from rlpyt.utils.buffer import buffer_to`` run under the patch binds the
    replacement directly; recording it lets unpatch_rlpyt put the original
    back there too.
    """
    originals = {id(new): old for old, new in _state.replacements.values()}
    for name, value in list(vars(module).items()):
        old = originals.get(id(value))
        if old is not None and not name.startswith("__") \
                and not _is_classic_rlpyt_nat(old):
            _state.records.append((module, name, old, value))


def _walk_loaded(rebound: list[str], recreated: list[str], recreate_types: bool,
                 methods: list[str] | None) -> None:
    for name, module in sorted(list(sys.modules.items())):
        if module is not None and _is_rlpyt_module(name):
            _rebind_module(module, rebound, recreated, recreate_types, methods)


class _ImportHook:
    """Applies the patch to each rlpyt module imported after patch_rlpyt() (run by
    :mod:`namedschema.integrations.import_hooks` right after the module executed)."""

    def __init__(self, recreate_types: bool) -> None:
        self.recreate_types = recreate_types

    def __call__(self, module: ModuleType) -> None:
        with _lock:
            if _state.active:
                _record_patched_imports(module)
                _rebind_module(module, [], [], self.recreate_types)


def patch_rlpyt(*, stdlib_namedtuple: bool = True,
                recreate_types: bool = True, pickling: bool = True) -> RlpytPatch:
    """Make an installed rlpyt build named tuples and buffers with namedschema.

    Call it first thing, before importing or constructing rlpyt agents,
    samplers, algorithms and replay buffers::

        import namedschema
        namedschema.patch_rlpyt()
        from rlpyt.replays.non_sequence.frame import UniformReplayFrameBuffer

    It replaces, in ``rlpyt.utils.collections``, the factories and helpers
    (``namedtuple``, ``namedarraytuple``, ``namedarraytuple_like``,
    ``NamedArrayTupleSchema_like``, ``is_namedtuple[_class]``,
    ``is_namedarraytuple[_class]``) and the schema classes
    (``NamedTupleSchema``, ``NamedArrayTupleSchema``, ``NamedTuple``,
    ``NamedArrayTuple``) by namedschema's, and, in ``rlpyt.utils.buffer``,
    the buffer functions by those of ``namedschema.buffer``. Then it
    rebinds every global of an imported ``rlpyt.*`` module that refers to one
    of the originals (``from rlpyt.utils.buffer import buffer_from_example``
    made such copies), and installs an import hook that does the same for
    rlpyt modules imported later.

    Types rlpyt made before the patch are classes, not schemas. With
    ``recreate_types`` (the default), every module-level class made by
    rlpyt's ``namedarraytuple`` (``SamplesFromReplay``, ``AgentInputs``, ...)
    is replaced, in every rlpyt module that holds it, by a schema with the
    same name and fields. That is safe for rlpyt's own code, which builds
    and indexes these types but never tests ``isinstance`` against them.

    What it cannot reach:

    * instances made before the patch, and references to the old classes
      held anywhere but in a module global (class attributes, closures,
      containers, your own modules' globals);
    * module-level types made with the standard library's ``namedtuple``
      (``OptInfo``, ``AgentInfo``...): they stay classes, which pickle by
      reference and so load wherever rlpyt is importable;
    * a module global assigned lazily before the patch (``BufferSamples`` in
      ``rlpyt.replays.frame``) keeps its class until the next constructor
      assigns it again.

    With ``pickling`` (the default), plain ``pickle`` of rlpyt objects is
    made right (:mod:`namedschema.rlpyt.patch.pickling`): replay buffers and sum
    trees (every subclass of ``BaseReplayBuffer`` and ``SumTree``) pickle
    their array views as views and their locks and shared values as new ones
    holding the same values; a buffer also carries the sample types rlpyt
    assigns lazily (``BufferSamples``, ``SamplesToBuffer``) and sets them
    when it loads, as its constructor would, so a process that only loads it
    can append to it; ``RWLock`` pickles as a new lock, and
    ``AttrDict`` (``TrajInfo`` included) stays its own ``__dict__``. Their
    pickles then load in any process where namedschema and rlpyt import,
    patched or not.

    With ``stdlib_namedtuple``, rlpyt globals bound to
    ``collections.namedtuple`` are rebound too, so the types rlpyt makes at
    run time (the env-info and space namedtuples of its gym wrappers) become
    schemas; code that already ran at import time is unaffected.

    Calling it again is harmless: it only handles rlpyt modules imported
    since. :func:`unpatch_rlpyt` undoes all of it.

    Args:
        stdlib_namedtuple: also rebind rlpyt's references to
            ``collections.namedtuple``.
        recreate_types: replace module-level classic namedarraytuple classes
            by schemas.
        pickling: give rlpyt's replay buffers, sum trees, ``RWLock`` and
            ``AttrDict`` the pickling methods described above.

    Returns:
        An :class:`RlpytPatch` listing what was changed.

    Raises:
        MissingModuleError: (a ``ModuleNotFoundError`` and a ``NamedSchemaError``;
            ``RlpytImportError`` is its old name) rlpyt cannot be imported.
    """
    with _lock:
        if _state.active:
            rebound: list[str] = []
            recreated: list[str] = []
            methods: list[str] = []
            recreate = _state.hook.recreate_types if _state.hook is not None else True
            _walk_loaded(rebound, recreated, recreate, methods)
            return RlpytPatch(tuple(rebound), tuple(recreated), True, tuple(methods))

        collections_mod, buffer_mod = _import_rlpyt()
        buffer_new = _buffer_replacements()
        _state.classic_nat_codes = _classic_nat_codes(
            vars(collections_mod).get("namedarraytuple"))
        import collections
        replacements, direct = {}, []
        targets = [(collections_mod, _COLLECTIONS_NAMES),
                   (buffer_mod, buffer_new)]
        for module, names in targets:
            for name, new in names.items():
                old = vars(module).get(name)
                if old is None or old is new:
                    continue
                if old is collections.namedtuple and not stdlib_namedtuple:
                    # Only this one global: other modules' own imports of
                    # the stdlib function stay as they are.
                    direct.append((module, name, new))
                else:
                    replacements[id(old)] = (old, new)
        _state.replacements = replacements
        _state.pickling = pickling
        _state.active = True
        rebound, recreated, methods = [], [], []
        try:
            for module, name, new in direct:
                rebound.append(_set(module, name, new))
            _walk_loaded(rebound, recreated, recreate_types, methods)
            _state.hook = _ImportHook(recreate_types)
            import_hooks.after_each_import("rlpyt", _state.hook)
        except BaseException:
            _undo()
            raise
        return RlpytPatch(tuple(rebound), tuple(recreated), False, tuple(methods))


def _undo() -> None:
    if _state.hook is not None:
        import_hooks.stop_each_import("rlpyt", _state.hook)
    for module, name, old, new in reversed(_state.records):
        # Leave alone a global that someone (or rlpyt itself, such as a
        # lazily assigned BufferSamples) has set since.
        if module.__dict__.get(name) is new:
            setattr(module, name, old)
    for cls, attr, old, new in reversed(_state.class_records):
        if cls.__dict__.get(attr) is new:
            if old is _MISSING:
                delattr(cls, attr)
            else:
                setattr(cls, attr, old)
    _state.reset()


def unpatch_rlpyt() -> bool:
    """Undo :func:`patch_rlpyt`: every global it changed gets its original back.

    Globals changed since the patch by anyone else, and objects created while
    the patch was active (schemas assigned to lazily initialised globals,
    buffers), are left as they are. rlpyt modules whose loading went through
    the import hook keep working as ordinary modules.

    Returns:
        True if a patch was undone, False if none was active.
    """
    with _lock:
        if not _state.active:
            return False
        _undo()
        return True


def is_patched() -> bool:
    """True while :func:`patch_rlpyt` is in effect in this process."""
    return _state.active
