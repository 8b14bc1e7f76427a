"""Pickling for rlpyt's replay buffers that keeps array views as views."""

from __future__ import annotations

import copyreg
import ctypes
import importlib
import mmap
import operator
import pickle
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from multiprocessing import context as mp_context
from multiprocessing import sharedctypes
from multiprocessing import synchronize as mp_sync
from typing import TYPE_CHECKING, Any, SupportsIndex, TypeVar

import numpy as np
from numpy.typing import NDArray

from ..._core import tree
from ..._core.pickling import arrays_kept_apart
from ..._core.schema import NamedTupleSchema
from ..._core.tree import Extent, byte_span, extent, memory_owner, overlap_groups
from ...buffer import is_shared_memory, np_mp_array
from ...errors import UnpicklableError

if TYPE_CHECKING:
    from typing import TypeAlias

    # The ctypes objects multiprocessing's shared values are made of.
    _CTypesData: TypeAlias = (ctypes._SimpleCData[Any] | ctypes.Array[Any] | ctypes.Structure
                              | ctypes.Union)

__all__ = ["LAZY_GLOBALS", "GLOBALS_KEY", "used_lazy_globals", "assign_lazy_globals",
           "refuse_unloadable", "reduce_keeping_views", "reduce_fresh", "restore_state",
           "restore_with_globals"]


# ---------------------------------------- lazy_globals
#
# rlpyt's sample types that no fresh interpreter can find by name (rlpyt issue #111).
#
# rlpyt assigns some module globals only when a buffer is built
# (``BufferSamples`` in ``rlpyt.replays.frame``, ``SamplesToBuffer`` in
# ``rlpyt.replays.sequence.n_step``: ``None`` until then), and makes others at
# run time in no module at all (``namedarraytuple_like``: an ``EnvInfo`` "of"
# ``rlpyt.utils.collections``). A pickle that names them loads nowhere but in
# the process that wrote it. This module knows them:
#
# LAZY_GLOBALS        the lazily assigned globals, ``(module, name)``
# GLOBALS_KEY         the key under which a patched buffer's state carries their schemas
# used_lazy_globals   the lazily assigned schemas a replay buffer of this class uses
# assign_lazy_globals set them, as the buffer's constructor would, when a buffer loads
# refuse_unloadable   raise for a class a pickle would name but a fresh process not find

LAZY_GLOBALS = (("rlpyt.replays.frame", "BufferSamples"),
                ("rlpyt.replays.sequence.n_step", "SamplesToBuffer"))
GLOBALS_KEY = "_namedschema_rlpyt_globals"


def used_lazy_globals(cls: type) -> dict[str, Any]:
    """``{"module:name": schema}`` of the lazy globals that ``cls``'s modules hold as schemas."""
    modules = {c.__module__ for c in cls.__mro__}
    used: dict[str, Any] = {}
    for module_name, name in LAZY_GLOBALS:
        value = getattr(sys.modules.get(module_name), name, None)
        if module_name in modules and isinstance(value, NamedTupleSchema):
            used[f"{module_name}:{name}"] = value
    return used


def assign_lazy_globals(used: dict[str, Any]) -> None:
    """Assign rlpyt's lazy globals (as the buffer constructor does) from :func:`used_lazy_globals`.

    As in rlpyt, the buffer built (here: loaded) last sets them.
    """
    for key, schema in used.items():
        module_name, _, name = key.partition(":")
        if (module_name, name) not in LAZY_GLOBALS:
            continue
        module = sys.modules.get(module_name)
        if module is None:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
        setattr(module, name, schema)


def refuse_unloadable(cls: object) -> None:
    """Raise UnpicklableError if pickling class ``cls`` by name would make an unloadable file.

    Called for rlpyt's classes by :func:`namedschema.save`'s pickler. Schemas
    (rlpyt patched by :func:`namedschema.rlpyt.patch.patch_rlpyt`) pickle by value and pass.
    """
    module_name = getattr(cls, "__module__", None) or ""
    if isinstance(cls, NamedTupleSchema) or not (module_name == "rlpyt"
                                                 or module_name.startswith("rlpyt.")):
        return
    name = getattr(cls, "__qualname__", "?")
    where = f"{module_name}.{name}"
    if (module_name, name) in LAZY_GLOBALS:
        why = ("rlpyt assigns this class to a module global only when it builds a buffer, "
               "so a fresh interpreter would not find it and could not load the file "
               "(rlpyt issue #111)")
    elif getattr(sys.modules.get(module_name), name, None) is not cls:
        why = (f"rlpyt made this class at run time; {module_name} does not hold it, so "
               "no process could load it by name")
    else:
        return
    raise UnpicklableError(where, f"class {where}",
                           why + ": call namedschema.patch_rlpyt() before rlpyt builds its "
                           "objects (its types then pickle by value), or checkpoint the "
                           "run with namedschema.rlpyt.resumable")


# ---------------------------------------- pickling
#
# Pickling for rlpyt's replay buffers that keeps array views as views.
#
# Plain pickle copies each array object on its own. rlpyt's buffers hold views
# (a frame buffer's ``samples_new_frames`` is ``samples_frames[n_frames - 1:]``,
# a sum tree's ``priorities`` a reshaped slice of ``tree``), so after a round
# trip the view is a copy that no longer sees writes to its base: the buffer
# loads, uses twice the memory and trains silently wrong. Async buffers hold
# locks and ``multiprocessing`` shared values, which plain pickle refuses
# (``cannot pickle 'mmap.mmap' object``, with no hint of where).
#
# ``patch_rlpyt()`` gives rlpyt's replay-buffer and sum-tree base classes
# :func:`reduce_keeping_views` as ``__reduce_ex__``. Its state is an ordinary
# dict of the attributes (so ``copy.copy`` stays a shallow copy), whose own
# reduction records, at pickling time:
#
# * every group of arrays that overlap in memory: one C-contiguous member that
#   spans the group is stored as it is, the others as (offset, shape, strides,
#   dtype) views of it; a group no member spans is stored as one byte block;
# * which arrays lived in shared memory, so they are shared again on load;
# * locks, semaphores, events, conditions (``multiprocessing`` and
#   ``threading``) and ``multiprocessing`` shared values and arrays (``Value``,
#   ``RawValue``, ``Array``, ``RawArray``), which are made anew on load with
#   the values they held.
#
# Under :func:`namedschema.save`, which stores arrays raw and keeps their
# aliasing itself, arrays outside shared memory are handed over as they are
# (so ``inspect`` lists each view by name). Loading needs namedschema
# importable, not the patch. Arrays are rebuilt as plain ``np.ndarray``
# views, so indexing costs what it did. Anything else that
# cannot be pickled is reported before pickling starts, by an
# :class:`~namedschema.errors.UnpicklableError` that names the attribute path.
# While ``multiprocessing`` is starting a child (``spawn``/``forkserver``), the
# default reduction is used instead: shared memory and locks then travel by
# handle, as rlpyt expects.
#
# reduce_keeping_views  ``__reduce_ex__`` for objects whose ``__dict__`` holds arrays
# reduce_fresh          ``__reduce_ex__`` for objects made only of locks: a new one on load
# restore_state         what the pickles call to rebuild a state (keep the name stable)
# restore_with_globals  the same for a buffer that carries rlpyt's lazy globals (stable name)

# Containers nested deeper than this are left to pickle as they are.
_MAX_DEPTH = 100
# Alignment kept for byte blocks: a cache line, more than any dtype needs.
_ALIGN = 64

# What the default reduction uses to make an instance: ``cls.__new__(cls)``.
_NEWOBJ = copyreg.__newobj__  # type: ignore[attr-defined]
_THREAD_LOCK = type(threading.Lock())
_THREAD_RLOCK = type(threading.RLock())
_CTYPES_DATA = (ctypes._SimpleCData, ctypes.Array, ctypes.Structure, ctypes.Union)
# A packed state's table entry: a tuple whose first item names its kind (see _make).
_Entry = tuple[Any, ...]
_T = TypeVar("_T")


def _spawning() -> bool:
    """True while multiprocessing pickles a child's start-up data."""
    return mp_context.get_spawning_popen() is not None


# --------------------------------------------------------------------------
# Reductions installed by the patch
# --------------------------------------------------------------------------

def reduce_keeping_views(self: object, protocol: SupportsIndex) -> str | tuple[Any, ...]:
    """``__reduce_ex__`` that pickles the instance's state with ``_State`` (a dict).

    A class further down that defines its own ``__reduce__`` or
    ``__getstate__`` is respected.
    """
    cls = type(self)
    if cls.__reduce__ is not object.__reduce__:
        return self.__reduce__()
    state = (self.__getstate__()
             if cls.__getstate__ is not object.__getstate__
             else self.__dict__)
    if not isinstance(state, dict):
        return _NEWOBJ, (cls,), state
    return _NEWOBJ, (cls,), _State(state, cls.__name__)


def _new_instance(cls: Callable[[], _T]) -> _T:
    return cls()


def reduce_fresh(self: object, protocol: SupportsIndex) -> str | tuple[Any, ...]:
    """``__reduce_ex__`` of a lock-only object (rlpyt's ``RWLock``): load a new one.

    A process that loads a pickle holds none of the saver's locks, so a new,
    released lock is the faithful copy.
    """
    if _spawning():
        return object.__reduce_ex__(self, protocol)
    return _new_instance, (type(self),)


class _State(dict[str, Any]):
    """An object's attributes; pickles through :func:`restore_state`.

    Used directly (``copy.copy``), it is just the attribute dict.
    """

    __slots__ = ("owner",)

    def __init__(self, items: Mapping[str, Any], owner: str) -> None:
        super().__init__(items)
        self.owner = owner

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        state = dict(self)
        # rlpyt's lazily assigned sample types, set when the pickle loads,
        # patched or not (never left behind as an attribute).
        used = state.pop(GLOBALS_KEY, None)
        if _spawning():
            return (dict, (state,)) if not used else (restore_with_globals,
                                                      (state, None, used))
        skeleton, table = _pack(state)
        _probe(skeleton, table, self.owner, protocol)
        if used:
            return restore_with_globals, (skeleton, table or None, used)
        if not table:
            return dict, (skeleton,)
        return restore_state, (skeleton, table)


# --------------------------------------------------------------------------
# Packing
# --------------------------------------------------------------------------

class _Ref:
    """Placeholder in a packed state for the value at ``table[index]``."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> tuple[type[_Ref], tuple[int]]:
        return _Ref, (self.index,)


def _is_candidate(x: Any) -> bool:
    return type(x) in (np.ndarray, np.memmap) and x.size > 0 and not x.dtype.hasobject


def _walk(x: Any, visit: Callable[[Any], Any]) -> Any:
    """Copy of ``x`` with ``visit`` applied to its leaves; unchanged parts kept.

    Walked: dicts, lists, tuples and named tuples (their exact types: other
    objects pickle as they are), shared ones once, to ``_MAX_DEPTH``.
    """
    return tree.map_structure(x, lambda leaf, _path: visit(leaf), max_depth=_MAX_DEPTH)


def _in_shared_memory(a: NDArray[Any]) -> bool:
    if is_shared_memory(a):
        return True
    root = memory_owner(a)
    # rlpyt's own np_mp_array (multiprocessing.RawArray) or any mmap'ed memory.
    return isinstance(root, mmap.mmap) or (isinstance(root, _CTYPES_DATA)
                                           and hasattr(root, "_wrapper"))


class _Span:
    """A byte range of live memory as an array interface; keeps its owner alive."""

    def __init__(self, address: int, nbytes: int, owner: object) -> None:
        self.owner = owner
        self.__array_interface__ = {"data": (address, False), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}


def _group(arrays: Sequence[NDArray[Any]]) -> list[tuple[list[NDArray[Any]], Extent]]:
    """(arrays, (lo, hi)) for each set of arrays whose memory overlaps (transitively).

    Groups in address order, and the arrays of a group by (start, end, index).
    """
    extents = [extent(a) for a in arrays]
    groups = []
    for members, span in overlap_groups(extents):
        members.sort(key=lambda i: (extents[i] or span, i))
        groups.append(([arrays[i] for i in members], span))
    return sorted(groups, key=lambda g: g[1])


def _view_entry(a: NDArray[Any], base_index: int, base_lo: int) -> _Entry:
    """A view of ``table[base_index]``: offset of a's data pointer from its start."""
    return ("view", base_index, a.__array_interface__["data"][0] - base_lo,
            a.shape, a.strides, a.dtype, bool(a.flags.writeable))


def _pack_arrays(arrays: Sequence[NDArray[Any]], table: list[_Entry],
                 refs: dict[int, _Ref]) -> None:
    saving = arrays_kept_apart()  # namedschema.save: it stores arrays raw, views as views
    for group, (lo, hi) in _group(arrays):
        shared = any(_in_shared_memory(a) for a in group)
        if (len(group) == 1 or saving) and not shared:
            continue  # pickled as usual (the checkpoint keeps views of its own)
        base = next((a for a in group if a.flags.c_contiguous
                     and extent(a) == (lo, hi)), None)
        base_index = len(table)
        if base is not None:
            table.append(("array", base, shared))
            refs[id(base)] = _Ref(base_index)
        else:
            align = max(a.dtype.alignment for a in group)
            block = np.asarray(_Span(lo, hi - lo, group))
            table.append(("span", block, lo % _ALIGN, align, shared))
        for a in group:
            if a is not base:
                refs[id(a)] = _Ref(len(table))
                table.append(_view_entry(a, base_index, lo))


def _ctypes_entry(raw: _CTypesData, synchronized: bool) -> _Entry:
    kind = type(raw)
    spec = (raw._type_, raw._length_) if isinstance(raw, ctypes.Array) else (kind, None)
    data = ctypes.string_at(ctypes.addressof(raw), ctypes.sizeof(raw))
    return ("ctype", spec, data, synchronized)


def _fresh_entry(x: object) -> _Entry | None:
    """A table entry that recreates a lock or shared value, or None."""
    if isinstance(x, mp_sync.Lock):
        return ("mp", "Lock", ())
    if isinstance(x, mp_sync.RLock):
        return ("mp", "RLock", ())
    if isinstance(x, mp_sync.Semaphore):  # BoundedSemaphore too
        kind = "BoundedSemaphore" if isinstance(x, mp_sync.BoundedSemaphore) else "Semaphore"
        try:
            value = x.get_value()
        except NotImplementedError:  # macOS
            value = 1
        return ("mp", kind, (value,))
    if isinstance(x, mp_sync.Event):
        return ("event", x.is_set())
    if isinstance(x, mp_sync.Condition):
        return ("mp", "Condition", ())
    if isinstance(x, sharedctypes.SynchronizedBase):
        return _ctypes_entry(x.get_obj(), True)
    if isinstance(x, _CTYPES_DATA) and hasattr(x, "_wrapper"):
        return _ctypes_entry(x, False)
    if isinstance(x, _THREAD_LOCK):
        return ("thread", "Lock")
    if isinstance(x, _THREAD_RLOCK):
        return ("thread", "RLock")
    return None


def _pack(state: dict[str, Any]) -> tuple[Any, list[_Entry]]:
    """(skeleton, table): ``state`` with views, shared arrays and locks as _Refs."""
    arrays: list[NDArray[Any]] = []
    seen: set[int] = set()

    def collect(x: Any) -> Any:
        if _is_candidate(x) and id(x) not in seen:
            seen.add(id(x))
            arrays.append(x)
        return x

    _walk(state, collect)
    table: list[_Entry] = []
    refs: dict[int, _Ref] = {}
    _pack_arrays(arrays, table, refs)

    def replace(x: Any) -> Any:
        ref = refs.get(id(x))
        if ref is not None:
            return ref
        entry = _fresh_entry(x)
        if entry is None:
            return x
        refs[id(x)] = ref = _Ref(len(table))
        table.append(entry)
        return ref

    return _walk(state, replace), table


# --------------------------------------------------------------------------
# Restoring
# --------------------------------------------------------------------------

def _view(base: NDArray[Any], offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
          dtype: np.dtype[Any], writeable: bool) -> NDArray[Any]:
    """An ndarray view of ``base``'s memory, checked to lie inside it."""
    dtype = np.dtype(dtype)
    lo, hi = byte_span(offset, shape, strides)
    if lo < 0 or hi + dtype.itemsize > base.nbytes:
        raise ValueError(f"a saved view (offset {offset}, shape {tuple(shape)}, strides "
                         f"{tuple(strides)}) does not fit its base of {base.nbytes} bytes")
    if all(s >= 0 for s in strides):
        view = np.ndarray(shape, dtype, buffer=base, offset=offset, strides=strides)
    else:  # np.ndarray refuses negative strides with a buffer; bounds checked above
        first = np.ndarray((1,), dtype, buffer=base, offset=offset)
        view = np.lib.stride_tricks.as_strided(first, shape, strides,
                                               writeable=bool(first.flags.writeable))
    if not writeable and view.flags.writeable:
        view.flags.writeable = False
    return view


def _as_shared(a: NDArray[Any]) -> NDArray[Any]:
    copy = np_mp_array(a.shape, a.dtype)
    copy[...] = a
    return copy


def _placed(block: NDArray[Any], phase: int, align: int, shared: bool) -> NDArray[Any]:
    """``block``, or a copy of it at the saved alignment and/or in shared memory.

    Views are aligned again when the block starts at the same address modulo
    the largest alignment their dtypes need.
    """
    aligned = block.ctypes.data % align == phase % align
    if aligned and block.flags.writeable and (not shared or is_shared_memory(block)):
        return block
    size = block.nbytes + _ALIGN
    room = np_mp_array((size,), np.uint8) if shared else np.empty(size, np.uint8)
    start = (phase - room.ctypes.data) % _ALIGN
    placed = room[start:start + block.nbytes]
    placed[...] = block
    return placed


def _make_ctype(spec: tuple[Any, int | None], data: bytes, synchronized: bool) -> object:
    elem, length = spec
    raw = (sharedctypes.RawValue(elem) if length is None
           else sharedctypes.RawArray(elem, length))
    if len(data) != ctypes.sizeof(raw):
        raise ValueError(f"a saved shared value of {len(data)} bytes does not fit "
                         f"{type(raw).__name__}")
    ctypes.memmove(ctypes.addressof(raw), data, len(data))
    return sharedctypes.synchronized(raw) if synchronized else raw


def _make(entry: _Entry, made: list[Any]) -> object:
    kind = entry[0]
    if kind == "array":
        _, arr, shared = entry
        return _as_shared(arr) if shared and not is_shared_memory(arr) else arr
    if kind == "span":
        return _placed(*entry[1:])
    if kind == "view":
        _, base_index, offset, shape, strides, dtype, writeable = entry
        return _view(made[base_index], offset, shape, strides, dtype, writeable)
    if kind == "mp":
        import multiprocessing
        return getattr(multiprocessing, entry[1])(*entry[2])
    if kind == "event":
        import multiprocessing
        event = multiprocessing.Event()
        if entry[1]:
            event.set()
        return event
    if kind == "thread":
        return getattr(threading, entry[1])()
    if kind == "ctype":
        return _make_ctype(*entry[1:])
    raise ValueError(f"unknown entry kind {kind!r} in a saved object state")


def restore_state(skeleton: Any, table: Iterable[_Entry]) -> Any:
    """The attribute dict a packed state stands for (called by unpickling)."""
    made: list[Any] = []
    for entry in table:
        made.append(_make(entry, made))

    def fill(x: Any) -> Any:
        return made[x.index] if type(x) is _Ref else x

    return _walk(skeleton, fill)


def restore_with_globals(skeleton: Any, table: Iterable[_Entry] | None,
                         used: dict[str, Any]) -> Any:
    """:func:`restore_state` (or the plain dict) that also assigns rlpyt's lazy globals."""
    state = skeleton if table is None else restore_state(skeleton, table)
    assign_lazy_globals(used)
    return state


# --------------------------------------------------------------------------
# Unpicklable values: fail early, name the attribute
# --------------------------------------------------------------------------

class _Sink:
    def write(self, data: bytes) -> int:
        return len(data)


class _Probe(pickle.Pickler):
    """Pickles an object graph to nowhere, skipping array data."""

    def persistent_id(self, obj: object) -> int | None:
        return 0 if type(obj) is np.ndarray else None


def _fails(obj: object, protocol: int) -> Exception | None:
    """The exception pickling ``obj`` raises (array data skipped), or None."""
    try:
        _Probe(_Sink(), protocol).dump(obj)
    except Exception as exc:  # whatever pickle raises for this value
        return exc
    return None


def _is_stdlib(kind: type) -> bool:
    return str(kind.__module__).partition(".")[0] in sys.stdlib_module_names


def _attributes(x: object) -> list[tuple[Any, Any]]:
    """(key, value) pairs to search for the unpicklable part of ``x``."""
    node = tree.node_of(x, tree.CONTAINERS, subclasses=True)
    if node is not None:
        return list(node.items(x))
    kind = type(x)
    if not hasattr(x, "__dict__") or _is_stdlib(kind):
        return []  # the object itself is the answer: a Thread, not its inner lock
    if (kind.__reduce_ex__ is object.__reduce_ex__
            and kind.__reduce__ is object.__reduce__):
        return list(vars(x).items())
    return []


def _probe(skeleton: Any, table: list[_Entry], owner: str, protocol: SupportsIndex) -> None:
    """Raise UnpicklableError naming the attribute if a packed state cannot be pickled.

    The search goes down the packed state, so values that packing replaces
    (locks, shared values) are never blamed; an object below with this same
    reduction reports its own path, which is prefixed with ours.
    """
    protocol = min(max(operator.index(protocol), 0), pickle.HIGHEST_PROTOCOL)
    error = _fails((skeleton, table), protocol)
    if error is None:
        return
    path, value = owner, skeleton
    for _depth in range(_MAX_DEPTH):
        for key, child in _attributes(value):
            child_error = _fails(child, protocol)
            if isinstance(child_error, UnpicklableError):
                # A nested object with this reduction found it: prefix our path.
                inner = child_error.path.partition(".")[2]
                raise UnpicklableError(tree.join_path(path, key) + ("." + inner if inner else ""),
                                       child_error.what, child_error.reason) from None
            if child_error is not None:
                path, value, error = tree.join_path(path, key), child, child_error
                break
        else:
            break
    kind = type(value)
    raise UnpicklableError(path, f"{kind.__module__}.{kind.__qualname__}",
                           f"{type(error).__name__}: {error}") from error


# Pickles name these as ``namedschema.rlpyt.pickling.*`` (their home before the
# rlpyt patch became a folder); that module re-exports them, so pickles stay
# byte-identical and older ones load.
for _wired in (restore_state, restore_with_globals, _Ref, _Span):
    _wired.__module__ = "namedschema.rlpyt.pickling"
del _wired
