"""The object graph a checkpoint stores: nodes, arrays, names and pickled leaves.

How a nested state becomes the header's node table and a list of arrays (and back):
array and scalar leaves, folding of views onto their bases, names for every array,
leaves that are pickled where that is allowed, and the encode/decode entry points.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import re
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

from .._core import pickling as _pickle
from .._core import tree
from .._core.instance import printable
from .._core.pickling import keeping_arrays_apart
from .._core.schema import is_classic_namedtuple_class, is_classic_nat_class
from .._core.tree import is_tensor, join_path, torch_if_loaded
from ..errors import (
    FormatError,
    MissingClassError,
    MissingModuleError,
    NotDataError,
    StructureMismatchError,
)
from ._header import (
    ALLOWED_DTYPES,
    TORCH_DTYPES,
    TORCH_VIA,
    ArrayEntry,
    SchemaEntry,
    fail,
    torch_alignment,
)

__all__ = ["array_paths", "ArrayNames", "fold", "LONG"]


# ---------------------------------------- naming
#
# Names for the arrays of a pickled graph: the attribute path that reaches each one.
#
# The pickle path stores arrays out of band, but the pickler only sees each
# array, not where it sits. Before pickling, :func:`array_paths` walks the
# graph the way a reader would name things (dict keys, list indexes, named
# tuple fields, object attributes, a torch module's parameters, buffers and
# submodules by their ``state_dict`` names) and gives every array the first,
# shortest path that reaches it, such as ``replay.samples.observation`` or
# ``agent.model.conv.0.weight``. Arrays it does not reach keep the positional
# name ``pickled[i]``.
#
# array_paths   the names of the arrays reachable in a graph (an ArrayNames)
# ArrayNames    path lookup by array object, or by the memory a new array views

# Bounds on the walk: a graph of many small Python objects is named only in part.
MAX_VISITS = 200_000
MAX_DEPTH = 64

def _module_items(obj: Any) -> Iterator[tuple[str, Any]]:
    """A torch module's parameters, buffers and submodules under their own names."""
    for slot in ("_parameters", "_buffers", "_modules"):
        table = obj.__dict__.get(slot)
        if isinstance(table, dict):
            yield from table.items()
    for key, value in obj.__dict__.items():
        if key not in ("_parameters", "_buffers", "_modules"):
            yield key, value


def _children(obj: Any) -> Iterable[tuple[Any, Any]]:
    node = tree.node_of(obj, tree.CONTAINERS, subclasses=True)
    if node is not None:
        return node.items(obj)
    attrs = tree.attributes(obj)
    if attrs is None:
        return ()
    if isinstance(attrs.get("_modules"), dict) and isinstance(attrs.get("_parameters"), dict):
        return _module_items(obj)
    return attrs.items()


def _memory_key(obj: Any) -> tuple[Any, ...] | None:
    """Where an array's elements are: equal for two objects that view the same elements."""
    if isinstance(obj, np.ndarray):
        return ("np", obj.__array_interface__["data"][0], obj.shape, obj.strides, obj.dtype.str)
    if is_tensor(obj):
        try:
            return ("torch", obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()),
                    str(obj.dtype))
        except Exception:  # sparse, meta and other odd tensors
            return None
    return None


class ArrayNames:
    """The paths of a graph's arrays, looked up by object or by the memory it views.

    Arrays the pickler is handed are usually the graph's own objects (found
    by id). Some are made during pickling from an object of the graph, such as
    the plain tensor torch pickles for an ``nn.Parameter``: those are found
    by the memory they view, among the array-like objects of the graph that
    are not themselves stored.
    """

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[str, Any]] = {}
        self._by_memory: dict[tuple[Any, ...], str] = {}

    def add(self, obj: Any, path: str, stored: bool) -> None:
        """Record ``path`` as the name of ``obj`` (by identity when stored, else by memory)."""
        if stored:
            self._by_id[id(obj)] = (path, obj)  # obj kept: its id stays unique
            return
        key = _memory_key(obj)
        if key is not None:
            self._by_memory.setdefault(key, path)

    def name_of(self, obj: Any) -> str | None:
        """The path recorded for ``obj`` (or for the memory it views), None when none."""
        entry = self._by_id.get(id(obj))
        if entry is not None and entry[1] is obj:
            return entry[0]
        if not self._by_memory:
            return None
        key = _memory_key(obj)
        return None if key is None else self._by_memory.get(key)


def array_paths(root: Any, is_array: Callable[[Any], bool]) -> ArrayNames:
    """The first shortest path from ``root`` to each array of the graph (breadth first).

    ``is_array`` tells the arrays that will be stored; they and every other
    array-like object (tensor subclasses, other ndarrays) are leaves.
    """
    names = ArrayNames()
    seen: set[int] = set()
    keep: list[Any] = []  # containers made on the fly by odd .items() stay alive
    queue: deque[Any] = deque([(root, "", 0)])
    visits = 0
    while queue and visits < MAX_VISITS:
        obj, path, depth = queue.popleft()
        key = id(obj)
        if key in seen:
            continue
        seen.add(key)
        keep.append(obj)
        visits += 1
        if is_array(obj) or isinstance(obj, np.ndarray) or is_tensor(obj):
            names.add(obj, path or "root", is_array(obj))
            continue
        if depth >= MAX_DEPTH or obj is None or isinstance(obj, (str, bytes, int, float)):
            continue
        try:
            items = list(_children(obj))
        except Exception:  # an odd container is just not named into
            continue
        for name, child in items:
            if id(child) not in seen:
                queue.append((child, tree.join_path(path, name, dotted=True), depth + 1))
    return names


# ---------------------------------------- arrays
#
# Arrays in and out: the table of arrays a graph holds, and arrays rebuilt from blocks.
#
# ArrayTable        one entry per array object found while encoding (numpy or torch)
# is_storable       whether an object is an array the file stores raw
# make_arrays       numpy arrays / torch tensors rebuilt as views of loaded blocks
# aligned_empty     a new byte array starting at a multiple of 64 (blocks are read into it)
#
# torch is never imported to save (a graph holding tensors has loaded it) and
# only imported to load when the file holds tensors.

def _is_plain_tensor(obj: Any) -> bool:
    """A ``torch.Tensor`` itself: subclasses (``nn.Parameter``) go the pickle path."""
    torch = torch_if_loaded()
    return torch is not None and type(obj) is torch.Tensor


def is_storable(obj: Any) -> bool:
    """A numpy array of an allowed dtype, or a torch tensor (checked further when added)."""
    return (type(obj) in (np.ndarray, np.memmap) and obj.dtype.str in ALLOWED_DTYPES) \
        or _is_plain_tensor(obj)


def _tensor_view(tensor: Any, path: str) -> tuple[np.ndarray, str]:
    """(numpy view, torch dtype name) of a CPU tensor, sharing its memory."""
    torch = torch_if_loaded()
    if tensor.device.type != "cpu":
        raise StructureMismatchError(path or "<root>", "a CPU tensor",
                                     f"a tensor on {tensor.device}",
                                     "move it with .cpu() before saving")
    if tensor.layout is not torch.strided:
        raise StructureMismatchError(path or "<root>", "a strided (dense) tensor",
                                     f"layout {tensor.layout}")
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in TORCH_DTYPES:
        raise StructureMismatchError(path or "<root>", "a tensor of a numeric or bool "
                                     "dtype numpy can view", f"dtype {name}")
    for bit, what, how in (("is_conj", "a conjugate view (from .conj())", "resolve_conj"),
                           ("is_neg", "a negative view (from a conjugate's .imag)",
                            "resolve_neg")):
        if getattr(tensor, bit, lambda: False)():
            raise StructureMismatchError(
                path or "<root>", "a tensor whose memory holds its values", what,
                f"its memory holds other values than it shows; save tensor.{how}() "
                "(a copy), or the tensor it is a view of")
    tensor = tensor.detach()
    if name in TORCH_VIA:
        tensor = tensor.view(getattr(torch, TORCH_VIA[name]))
    return tensor.numpy(), name


@dataclass(frozen=True)
class StoredArray:
    """An array found in the graph: the object itself and the numpy view to write."""

    obj: Any                    # the numpy array or torch tensor
    view: np.ndarray            # its memory as numpy sees it
    torch: str | None           # torch dtype name for tensors
    path: str                   # where it was found, for messages and block names

    @property
    def requires_grad(self) -> bool:
        """Whether the entry is a torch tensor that requires grad."""
        return self.torch is not None and bool(self.obj.requires_grad)


class ArrayTable:
    """The arrays of a graph, one entry per object (identity kept), in encounter order."""

    def __init__(self) -> None:
        self.entries: list[StoredArray] = []
        self._index: dict[int, int] = {}    # id(object) -> index; entries keep it alive

    def add(self, obj: Any, path: str) -> int:
        """The index of ``obj``, adding it first if new."""
        index = self._index.get(id(obj))
        if index is not None:
            return index
        if isinstance(obj, np.ndarray):
            view, torch_dtype = obj, None
        else:
            view, torch_dtype = _tensor_view(obj, path)
        index = len(self.entries)
        self.entries.append(StoredArray(obj, view, torch_dtype, path))
        self._index[id(obj)] = index
        return index


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------

_BLOCK_ALIGN = 64  # as in the file: every dtype's alignment divides it


def aligned_empty(nbytes: int) -> np.ndarray:
    """A new uint8 array of ``nbytes`` whose data starts at a multiple of 64.

    Blocks are read into these, so that an array keeps in memory the
    alignment its block gives it in the file (whatever malloc returns).
    """
    raw = np.empty(nbytes + _BLOCK_ALIGN, np.uint8)
    start = -raw.__array_interface__["data"][0] % _BLOCK_ALIGN
    return raw[start:start + nbytes]

def _import_torch(name: str, entry: ArrayEntry) -> Any:
    try:
        import torch
    except ImportError as exc:
        fail(name, f"field {entry.path!r} is a torch tensor, and torch cannot be "
             f"imported here ({exc}); install torch to load this file", exc)
    return torch


def make_arrays(entries: tuple[ArrayEntry, ...], blocks_data: list[Any], name: str = "",
                deferred: dict[int, Any] | None = None) -> list[Any]:
    """Every array of the table as a view of its loaded block (tensors share storages).

    A tensor views its block only where torch's alignment for its dtype is
    met (see ``_header.torch_alignment``); files written by this version
    always meet it, and a tensor of an older or crafted file that does not
    is loaded as an aligned copy instead, since torch's kernels may crash on
    misaligned data. The array of a block in ``deferred`` (a restore's compressed
    blocks left compressed, each holding one numpy array) is that block's object.
    """
    torch: Any = None
    storages: dict[int, Any] = {}  # block -> untyped storage, so tensors of one block share
    result: list[Any] = []
    for a in entries:
        if deferred is not None and a.block in deferred:
            result.append(deferred[a.block])
            continue
        if a.block is None:
            arr = np.empty(a.shape, np.dtype(a.dtype))
        else:
            arr = np.ndarray(a.shape, np.dtype(a.dtype), buffer=blocks_data[a.block],
                             offset=a.offset, strides=a.strides)
        if a.torch is not None:
            if torch is None:  # the file holds tensors: torch is needed to rebuild them
                torch = _import_torch(name, a)
            tensor = _make_tensor(torch, arr, a, a.torch, blocks_data, storages)
            if a.requires_grad:
                tensor.requires_grad_(True)
            result.append(tensor)
        else:
            result.append(arr)
    return result


def _make_tensor(torch: Any, arr: np.ndarray, a: ArrayEntry, torch_dtype: str,
                 blocks_data: list[Any], storages: dict[int, Any]) -> Any:
    tdtype = getattr(torch, torch_dtype)
    itemsize = torch_alignment(torch_dtype)  # = torch's element size
    # The header check guarantees strides in whole, non-negative elements.
    if arr.size and arr.__array_interface__["data"][0] % itemsize:
        # Misaligned for torch (numpy's alignment may be smaller): copy.
        copy = aligned_empty(arr.nbytes).view(arr.dtype).reshape(arr.shape)
        copy[...] = arr
        tensor = torch.from_numpy(copy)
        return tensor.view(tdtype) if torch_dtype in TORCH_VIA else tensor
    with warnings.catch_warnings():
        # Read-only maps give read-only tensors; torch warns about that.
        warnings.simplefilter("ignore", UserWarning)
        if (a.block is not None and a.offset % itemsize == 0
                and blocks_data[a.block].__array_interface__["data"][0] % itemsize == 0):
            storage = storages.get(a.block)
            if storage is None:
                storage = storages[a.block] = torch.from_numpy(
                    blocks_data[a.block]).untyped_storage()
            tensor = torch.empty(0, dtype=tdtype)
            tensor.set_(storage, a.offset // itemsize, arr.shape,
                        [s // itemsize for s in a.strides])
            return tensor
        tensor = torch.from_numpy(arr)
    if torch_dtype in TORCH_VIA:
        tensor = tensor.view(tdtype)
    return tensor


# ---------------------------------------- folding
#
# Fold the long, unreadable parts of an ``inspect`` tree into one line each.
#
# A checkpoint of a training run holds generator states (Python's ``random``
# is a tuple of 625 ints, numpy's a key array and counters) and other long
# tuples of numbers: printed in full they bury the structure a reader looks
# for under a thousand lines. ``fold`` keeps every line of the tree but:
#
# * a generator state (Python ``random``, numpy ``Generator`` and legacy
#   ``RandomState``, as namedschema stores them) becomes one line naming it;
# * a tuple or list of more than ``LONG`` plain values becomes one line with
#   its first values.
#
# ``namedschema inspect --full`` prints the tree unfolded.
#
# fold   ``(folded text, number of lines folded away)``

LONG = 8                # a tuple or list of more plain values than this is folded
_SHOWN = 3              # values shown of a folded tuple or list
_CONTAINER = re.compile(r"(tuple|list) of ([0-9]+)$")
_KEY = re.compile(r"^('(?:[^'\\]|\\.)*'|\[[0-9]+\]): ")


class _Node:
    __slots__ = ("text", "children")

    def __init__(self, text: str) -> None:
        self.text = text
        self.children: list[_Node] = []

    def key_and_value(self) -> tuple[str, str]:
        match = _KEY.match(self.text)
        return (match.group(1), self.text[match.end():]) if match else ("", self.text)

    def size(self) -> int:
        return 1 + sum(child.size() for child in self.children)


def _parse(lines: list[str]) -> list[_Node]:
    roots: list[_Node] = []
    stack: list[tuple[int, _Node]] = []
    for line in lines:
        depth = len(line) - len(line.lstrip(" "))
        node = _Node(line.strip())
        while stack and stack[-1][0] >= depth:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((depth, node))
    return roots


def _values(node: _Node) -> dict[str, str]:
    """The children as ``{key: value text}``, keys unquoted (``'pos'`` -> ``pos``)."""
    return {key.strip("'"): value for key, value in
            (child.key_and_value() for child in node.children)}


def _generator(node: _Node) -> str | None:
    """What generator state ``node`` is, or None."""
    if not node.children:
        return None
    values = _values(node)
    if {"bit_generator", "state"} <= values.keys():
        return f"numpy {values['bit_generator'].strip(chr(34))} generator state"
    if {"kind", "keys", "pos"} <= values.keys():
        return f"numpy RandomState ({values['kind'].strip(chr(34))}) state"
    if values.keys() == {"version", "internal", "gauss"}:
        return "Python random state (MT19937)"
    if values.keys() == {"[0]", "[1]", "[2]"} and values["[1]"] == "tuple of 625":
        return "Python random state (MT19937, 625 words)"
    return None


def _long_values(node: _Node) -> str | None:
    """One line for a tuple or list of many plain values, or None."""
    _key, value = node.key_and_value()
    match = _CONTAINER.search(value)
    if not match or int(match.group(2)) <= LONG or len(node.children) <= LONG:
        return None
    if any(child.children for child in node.children):
        return None
    shown = ", ".join(child.key_and_value()[1] for child in node.children[:_SHOWN])
    return f"{shown}, ..."


def _render(node: _Node, depth: int, out: list[str]) -> int:
    """Append ``node``'s lines to ``out``; return how many lines were folded away."""
    pad = "  " * depth
    what = _generator(node)
    if what is not None:
        key, _value = node.key_and_value()
        out.append(f"{pad}{key + ': ' if key else ''}{what}")
        return node.size() - 1
    values = _long_values(node)
    if values is not None:
        out.append(f"{pad}{node.text}: {values}")
        return node.size() - 1
    out.append(pad + node.text)
    return sum(_render(child, depth + 1, out) for child in node.children)


def fold(tree: str) -> tuple[str, int]:
    """``tree`` (an inspect tree) with generator states and long tuples on one line each.

    Returns the folded text and how many lines it left out.

    >>> text = "dict of 1\\n  'xs': tuple of 10\\n" + "".join(
    ...     f"    [{i}]: {i}\\n" for i in range(10))
    >>> folded, left_out = fold(text)
    >>> print(folded)
    dict of 1
      'xs': tuple of 10: 0, 1, 2, ...
    >>> left_out
    10
    """
    out: list[str] = []
    folded = sum(_render(root, 0, out) for root in _parse(tree.splitlines()))
    return "\n".join(out), folded


# ---------------------------------------- nodes
#
# The structure's node kinds, each defined once: encode, decode and describe.
#
# A structure is a tree of JSON nodes (the grammar is in the package
# documentation, generated from ``KINDS``). Each kind below gives, in one place,
#
# ``encode``    the node for a Python object (``save``)
# ``parse``     the node's checked operands: the single validation of untrusted
#               nodes, shared by decoding and describing so load and inspect
#               accept exactly the same files
# ``decode``    the Python object for a parsed node (``load``)
# ``describe``  the node's lines in ``inspect``'s tree
#
# A new kind (say, for a later feature) is one new class added to ``KINDS``.
# Kinds with ``refs`` point into the array or schema tables and are not allowed
# in schema defaults.

_MAX_INT_BITS = 10_000      # beyond what json.loads will parse back
_TREE_LINES = 2000          # inspect's tree stops after this many lines


class NotData(Exception):
    """The graph holds an object the data path cannot describe (so it needs pickle)."""

    def __init__(self, path: str, obj: Any, why: str = "") -> None:
        cls = type(obj)
        self.path = path or "<root>"
        self.type_name = f"{cls.__module__}.{cls.__qualname__}"
        self.why = why
        super().__init__(f"{self.path}: {self.type_name}" + (f" ({why})" if why else ""))


def _why_not_data(obj: Any) -> str:
    """For arrays and numpy scalars: the dtype that keeps them off the data path."""
    dtype = getattr(obj, "dtype", None)
    if isinstance(obj, np.ndarray | np.generic) and isinstance(dtype, np.dtype):
        if dtype.str not in ALLOWED_DTYPES:
            return (f"dtype {dtype} is not one of the bool, integer, float and complex "
                    "dtypes a checkpoint stores as data")
        return f"a {type(obj).__qualname__}, not a plain numpy array"
    return ""


def _is_schema_class(cls: Any) -> bool:
    return _pickle.is_registered_schema(cls)


def _stored_as_instance(cls: type) -> bool:
    """The format's policy: which named tuple classes an instance node stores.

    Registered schemas, classes made by ``namedtuple()`` itself and rlpyt's
    classic named array tuples; other named tuple classes (subclasses with
    their own code) need pickle.
    """
    return _is_schema_class(cls) or (
        is_classic_namedtuple_class(cls)
        and (cls.__bases__ == (tuple,) or is_classic_nat_class(cls)))


# --------------------------------------------------------------------------
# The three walkers the kinds are called from
# --------------------------------------------------------------------------

class Encoder:
    """Describe a graph as nodes, or raise NotData at the first non-data object."""

    def __init__(self) -> None:
        self.arrays = ArrayTable()
        self.schemas: list[SchemaEntry] = []
        self._schema_index: dict[int, int] = {}  # id(class) -> index (classes compare by value)
        self._classes: list[type] = []           # keeps classes alive so ids stay unique

    def encode(self, obj: Any, path: str = "") -> Any:
        """The structure node of ``obj`` at ``path`` (NotData if it is not data)."""
        kind = _ENCODE_BY_TYPE.get(type(obj))
        if kind is None:
            kind = next((k for k in _ENCODE_BY_TEST if k.encodes(obj)), None)
            if kind is None:
                raise NotData(path, obj, _why_not_data(obj))
        return kind.encode(self, obj, path)

    def schema(self, cls: type, path: str) -> int:
        """The index of schema ``cls`` in the schema table, adding it first if new."""
        index = self._schema_index.get(id(cls))
        if index is not None:
            return index
        defaults_enc = Encoder()
        defaults = [_NUMPY.encode(defaults_enc, v, path) if _NUMPY.encodes(v)
                    else defaults_enc.encode(v, f"{path}<defaults>")
                    for v in cls._field_defaults.values()]  # type: ignore[attr-defined]
        if defaults_enc.arrays.entries or defaults_enc.schemas:
            raise NotData(path, cls, "schema defaults that are arrays or schemas")
        module = cls.__module__ if isinstance(cls.__module__, str) else None
        fields = tuple(cls._fields)  # type: ignore[attr-defined]
        if _is_schema_class(cls):
            entry = SchemaEntry(type(cls).__name__, cls._typename,  # type: ignore[attr-defined]
                                fields, cls._schema_id, tuple(defaults), module)  # type: ignore[attr-defined]
        else:
            kind = ("NamedArrayTupleSchema" if is_classic_nat_class(cls)
                    else "NamedTupleSchema")
            # A stable id per definition (the one derivation, _pickle's), so every
            # load of it is one class; "classic-" keeps it apart from the id of a
            # module-level schema of the same definition, which is another class.
            derived = _pickle.derived_schema_id(kind, module, cls.__name__, fields, defaults)
            entry = SchemaEntry(kind, cls.__name__, fields, f"classic-{derived}",
                                tuple(defaults), module)
        index = len(self.schemas)
        self.schemas.append(entry)
        self._schema_index[id(cls)] = index
        self._classes.append(cls)
        return index


class _Walker:
    """What decoding and describing share: the file's name and tables, and ``fail``."""

    def __init__(self, name: str, schemas: Sequence[SchemaEntry],
                 entries: Sequence[ArrayEntry]) -> None:
        self.name, self.schemas, self.entries = name, schemas, entries

    def fail(self, message: str, cause: BaseException | None = None) -> NoReturn:
        fail(self.name, f"structure: {message}", cause)

    def parse(self, node: Any, allow_refs: bool = True) -> tuple[NodeKind, Any]:
        """(kind, checked operands) of ``node``; FormatError for anything else."""
        if node is None or type(node) in (bool, int, float, str):
            return _PLAIN, node
        kind = _DECODE_BY_KEYS.get(frozenset(node)) if type(node) is dict else None
        if kind is None or (kind.refs and not allow_refs):
            self.fail(f"unknown node {node!r:.60}")
        return kind, kind.parse(self, node)

    def index(self, value: Any, count: int, what: str) -> int:
        if type(value) is not int or not 0 <= value < count:
            self.fail(f"refers to {what} {value!r}, which does not exist")
        return value


class Decoder(_Walker):
    """Rebuild the graph from checked nodes, the loaded arrays and the schema table."""

    def __init__(self, name: str, schemas: Sequence[SchemaEntry],
                 entries: Sequence[ArrayEntry], arrays: list[Any]) -> None:
        super().__init__(name, schemas, entries)
        self.arrays = arrays
        self._classes: list[Any] = [None] * len(schemas)

    def decode(self, node: Any, allow_refs: bool = True) -> Any:
        """The object a structure node stands for."""
        kind, operands = self.parse(node, allow_refs)
        return kind.decode(self, operands, allow_refs)

    def schema_class(self, index: int) -> Any:
        """Schema class ``index`` of the file, rebuilt once and then reused."""
        cls = self._classes[index]
        if cls is None:
            entry = self.schemas[index]
            try:
                defaults = tuple(self.decode(d, allow_refs=False) for d in entry.defaults)
                cls = _pickle.rebuild_schema(entry.kind, entry.id, entry.typename,
                                             entry.fields, defaults, entry.module)
            except FormatError:
                raise
            except (ValueError, TypeError) as exc:
                self.fail(f"schema {index} is invalid: {exc}", exc)
            self._classes[index] = cls
        return cls


class Describer(_Walker):
    """Lines of ``inspect``'s tree: one per node, children indented.

    ``array_text[i]`` is the text for array ``i`` (dtype, shape, size).
    """

    def __init__(self, name: str, schemas: Sequence[SchemaEntry],
                 entries: Sequence[ArrayEntry], array_text: Sequence[str]) -> None:
        super().__init__(name, schemas, entries)
        self.array_text = array_text
        self.lines: list[str] = []

    def describe(self, node: Any, label: str = "", depth: int = 0) -> None:
        """Add the lines describing ``node`` (labelled ``label``) at ``depth``."""
        if len(self.lines) >= _TREE_LINES:
            if len(self.lines) == _TREE_LINES:
                self.lines.append("  " * depth + "...")
            return
        kind, operands = self.parse(node)
        kind.describe(self, operands, label, depth)

    def line(self, depth: int, text: str) -> None:
        """Add one line of text at ``depth``, its control characters escaped."""
        # Names, keys and values come from the file: escape control characters.
        self.lines.append("  " * depth + printable(text))


# --------------------------------------------------------------------------
# The node kinds
# --------------------------------------------------------------------------

class NodeKind:
    """One node kind: its JSON keys, its spec line, and its four operations."""

    keys: frozenset[str] = frozenset()   # the node is a JSON object with exactly these keys
    refs = False                         # refers to the array or schema table
    spec = ""                            # the grammar line in the package documentation

    def encodes(self, obj: Any) -> bool:
        """Whether this kind stores ``obj`` (for types not in the exact-type table)."""
        return False

    def encode(self, enc: Encoder, obj: Any, path: str) -> Any:
        """The node of ``obj`` (one of this kind) at ``path``."""
        raise NotImplementedError

    def parse(self, walker: _Walker, node: dict[str, Any]) -> Any:
        """The operands of a node of this kind, checked."""
        raise NotImplementedError

    def decode(self, dec: Decoder, operands: Any, allow_refs: bool) -> Any:
        """The object a node of this kind stands for, from its operands."""
        raise NotImplementedError

    def describe(self, desc: Describer, operands: Any, label: str, depth: int) -> None:
        """Describe a node of this kind through ``desc``."""
        raise NotImplementedError


class _Plain(NodeKind):
    spec = "JSON ``null``/``true``/``false``/numbers/strings: None, bool, int, float, str"

    def encode(self, enc: Encoder, obj: Any, path: str) -> Any:
        if type(obj) is int and obj.bit_length() > _MAX_INT_BITS:
            raise NotData(path, obj, "an int too large for JSON")
        return obj

    def parse(self, walker: _Walker, node: Any) -> Any:  # pragma: no cover - plain nodes are parsed by _Walker
        return node

    def decode(self, dec: Decoder, operands: Any, allow_refs: bool) -> Any:
        return operands

    def describe(self, desc: Describer, operands: Any, label: str, depth: int) -> None:
        desc.line(depth, f"{label}{json.dumps(operands)[:60]}")


class _Float(NodeKind):
    keys = frozenset({"float"})
    spec = '``{"float": "nan"|"inf"|"-inf"}``: a float that is not finite'

    def encode(self, enc: Encoder, obj: float, path: str) -> float | dict[str, str]:
        return obj if math.isfinite(obj) else {"float": repr(obj)}

    def parse(self, walker: _Walker, node: dict[str, Any]) -> float:
        if node["float"] not in ("nan", "inf", "-inf"):
            walker.fail(f"unknown node {node!r:.60}")
        return float(node["float"])

    def decode(self, dec: Decoder, operands: float, allow_refs: bool) -> float:
        return operands

    def describe(self, desc: Describer, operands: float, label: str, depth: int) -> None:
        desc.line(depth, f"{label}{operands!r}")


class _Sequence(NodeKind):
    """``{"list": [...]}`` and ``{"tuple": [...]}``."""

    def __init__(self, python_type: type[list[Any]] | type[tuple[Any, ...]]) -> None:
        self.python_type = python_type
        self.key = python_type.__name__
        self.keys = frozenset({self.key})
        self.spec = f'``{{"{self.key}": [node, ...]}}``: a {self.key}'

    def encode(self, enc: Encoder, obj: Sequence[Any], path: str) -> dict[str, list[Any]]:
        return {self.key: [enc.encode(v, join_path(path, i)) for i, v in enumerate(obj)]}

    def parse(self, walker: _Walker, node: dict[str, Any]) -> list[Any]:
        items = node[self.key]
        if type(items) is not list:
            walker.fail(f"unknown node {node!r:.60}")
        return items

    def decode(self, dec: Decoder, operands: list[Any],
               allow_refs: bool) -> list[Any] | tuple[Any, ...]:
        return self.python_type(dec.decode(v, allow_refs) for v in operands)

    def describe(self, desc: Describer, operands: list[Any], label: str, depth: int) -> None:
        desc.line(depth, f"{label}{self.key} of {len(operands)}")
        for i, item in enumerate(operands):
            desc.describe(item, f"[{i}]: ", depth + 1)


class _Dict(NodeKind):
    keys = frozenset({"dict"})
    spec = ('``{"dict": [[key, node], ...]}``: a dict with str keys, in order')

    def encode(self, enc: Encoder, obj: dict[Any, Any], path: str) -> dict[str, list[list[Any]]]:
        items = []
        for key, value in obj.items():
            if type(key) is not str:
                raise NotData(path, key, "dict key that is not a str")
            items.append([key, enc.encode(value, join_path(path, key))])
        return {"dict": items}

    def parse(self, walker: _Walker, node: dict[str, Any]) -> list[list[Any]]:
        items = node["dict"]
        if type(items) is not list:
            walker.fail(f"unknown node {node!r:.60}")
        for item in items:
            if type(item) is not list or len(item) != 2 or type(item[0]) is not str:
                walker.fail("malformed dict item")
        return items

    def decode(self, dec: Decoder, operands: list[list[Any]], allow_refs: bool) -> dict[str, Any]:
        return {key: dec.decode(value, allow_refs) for key, value in operands}

    def describe(self, desc: Describer, operands: list[list[Any]], label: str, depth: int) -> None:
        desc.line(depth, f"{label}dict of {len(operands)}")
        for key, value in operands:
            desc.describe(value, f"{key!r}: ", depth + 1)


class _Array(NodeKind):
    keys = frozenset({"array"})
    refs = True
    spec = ('``{"array": i}``: entry ``i`` of ``arrays`` (a numpy array or torch '
            'tensor; one object stored once is one object after loading)')

    def encodes(self, obj: Any) -> bool:
        return is_storable(obj)

    def encode(self, enc: Encoder, obj: Any, path: str) -> dict[str, int]:
        return {"array": enc.arrays.add(obj, path)}

    def parse(self, walker: _Walker, node: dict[str, Any]) -> int:
        return walker.index(node["array"], len(walker.entries), "array")

    def decode(self, dec: Decoder, operands: int, allow_refs: bool) -> Any:
        return dec.arrays[operands]

    def describe(self, desc: Describer, operands: int, label: str, depth: int) -> None:
        desc.line(depth, f"{label}{desc.array_text[operands]}")


class _Scalar(NodeKind):
    keys = frozenset({"scalar"})
    refs = True
    spec = ('``{"scalar": i}``: a numpy scalar (``np.float32(1.5)``), stored as the '
            '0-d array ``i`` of ``arrays`` and loaded as ``array[()]``')

    def encodes(self, obj: Any) -> bool:
        return isinstance(obj, np.generic) and obj.dtype.str in ALLOWED_DTYPES

    def encode(self, enc: Encoder, obj: Any, path: str) -> dict[str, int]:
        return {"scalar": enc.arrays.add(np.asarray(obj), path)}

    def parse(self, walker: _Walker, node: dict[str, Any]) -> int:
        index = walker.index(node["scalar"], len(walker.entries), "scalar")
        if walker.entries[index].torch is not None:
            walker.fail(f"refers to scalar {index!r}, which does not exist")
        return index

    def decode(self, dec: Decoder, operands: int, allow_refs: bool) -> Any:
        return dec.arrays[operands][()]

    def describe(self, desc: Describer, operands: int, label: str, depth: int) -> None:
        desc.line(depth, f"{label}{np.dtype(desc.entries[operands].dtype).name} scalar")


class _Schema(NodeKind):
    keys = frozenset({"schema"})
    refs = True
    spec = '``{"schema": s}``: the schema class ``s`` of ``schemas`` itself'

    def encodes(self, obj: Any) -> bool:
        return isinstance(obj, type)

    def encode(self, enc: Encoder, obj: type, path: str) -> dict[str, int]:
        if not _is_schema_class(obj):
            raise NotData(path, obj, f"the class {obj.__qualname__}")
        return {"schema": enc.schema(obj, path)}

    def parse(self, walker: _Walker, node: dict[str, Any]) -> int:
        return walker.index(node["schema"], len(walker.schemas), "schema")

    def decode(self, dec: Decoder, operands: int, allow_refs: bool) -> Any:
        return dec.schema_class(operands)

    def describe(self, desc: Describer, operands: int, label: str, depth: int) -> None:
        entry = desc.schemas[operands]
        desc.line(depth, f"{label}class {entry.typename} ({entry.kind})")


class _Instance(NodeKind):
    keys = frozenset({"nt", "values"})
    refs = True
    spec = ('``{"nt": s, "values": [node, ...]}``: an instance of schema ``s`` '
            '(a schema, a stdlib namedtuple or an rlpyt namedarraytuple)')

    def encodes(self, obj: Any) -> bool:
        return _stored_as_instance(type(obj))

    def encode(self, enc: Encoder, obj: Any, path: str) -> dict[str, Any]:
        cls = type(obj)
        index = enc.schema(cls, path)
        base = path or (cls._typename if _is_schema_class(cls) else cls.__name__)
        return {"nt": index, "values": [enc.encode(v, join_path(base, f))
                                        for f, v in zip(cls._fields, obj, strict=True)]}

    def parse(self, walker: _Walker, node: dict[str, Any]) -> tuple[int, list[Any]]:
        values = node["values"]
        if type(values) is not list:
            walker.fail(f"malformed schema instance node {node!r:.60}")
        index = walker.index(node["nt"], len(walker.schemas), "schema")
        entry = walker.schemas[index]
        if len(values) != len(entry.fields):
            walker.fail(f"{entry.typename} has {len(entry.fields)} fields, the file "
                        f"gives {len(values)} values")
        return index, values

    def decode(self, dec: Decoder, operands: tuple[int, list[Any]], allow_refs: bool) -> Any:
        index, values = operands
        cls = dec.schema_class(index)
        return cls._make([dec.decode(v, allow_refs) for v in values])

    def describe(self, desc: Describer, operands: tuple[int, list[Any]],
                 label: str, depth: int) -> None:
        index, values = operands
        entry = desc.schemas[index]
        desc.line(depth, f"{label}{entry.typename} ({entry.kind})")
        for fname, value in zip(entry.fields, values, strict=True):
            desc.describe(value, f"{fname}: ", depth + 1)


# A numpy node's operands: its dtype, shape and values (C order).
_NumpyOperands = tuple[np.dtype[Any], tuple[int, ...], list[Any]]


class _Numpy(NodeKind):
    """A numpy scalar or small array held in the node itself (schema defaults)."""

    keys = frozenset({"numpy"})
    spec = ('``{"numpy": [dtype, shape, [value, ...]]}``: a numpy scalar (shape '
            '``[]``) or array of at most 4096 elements held in the node, values in C '
            'order (``"nan"``/``"inf"``/``"-inf"`` for such floats, ``[re, im]`` for '
            'complex); used for schema defaults such as ``np.float32(0)``, which '
            'declare a dtype, and listed as the feature ``"numpy-defaults"``')
    max_elements = 4096

    def encodes(self, obj: Any) -> bool:
        return ((type(obj) is np.ndarray or isinstance(obj, np.generic))
                and obj.dtype.str in ALLOWED_DTYPES and obj.size <= self.max_elements)

    def encode(self, enc: Encoder, obj: Any, path: str) -> dict[str, list[Any]]:
        arr = np.asarray(obj)
        values: list[Any]
        if arr.dtype.kind == "c":
            values = [[_float_value(v.real), _float_value(v.imag)] for v in arr.ravel().tolist()]
        elif arr.dtype.kind == "f":
            values = [_float_value(v) for v in arr.ravel().tolist()]
        else:
            values = arr.ravel().tolist()
        return {"numpy": [arr.dtype.str, list(arr.shape), values]}

    def parse(self, walker: _Walker, node: dict[str, Any]) -> _NumpyOperands:
        operands = node["numpy"]
        if type(operands) is not list or len(operands) != 3:
            walker.fail(f"malformed numpy node {node!r:.60}")
        dtype_str, shape, values = operands
        if type(dtype_str) is not str or dtype_str not in ALLOWED_DTYPES:
            walker.fail(f"numpy node has a dtype that is not allowed: {dtype_str!r:.40}")
        if (type(shape) is not list or len(shape) > 64
                or not all(type(n) is int and 0 <= n <= self.max_elements for n in shape)
                or math.prod(shape) > self.max_elements):
            walker.fail(f"numpy node has an invalid shape {shape!r:.60}")
        if type(values) is not list or len(values) != math.prod(shape):
            walker.fail("numpy node's values do not match its shape")
        dtype = np.dtype(dtype_str)
        check = _NUMPY_VALUE_CHECKS[dtype.kind]
        if not all(check(v, dtype) for v in values):
            walker.fail(f"numpy node holds a value that is not a {dtype.name}")
        if dtype.kind == "c":
            values = [complex(float(re), float(im)) for re, im in values]
        elif dtype.kind == "f":
            values = [float(v) for v in values]
        return dtype, tuple(shape), values

    def decode(self, dec: Decoder, operands: _NumpyOperands, allow_refs: bool) -> Any:
        dtype, shape, values = operands
        arr = np.array(values, dtype=dtype).reshape(shape)
        return arr[()] if not shape else arr

    def describe(self, desc: Describer, operands: _NumpyOperands, label: str, depth: int) -> None:
        dtype, shape, _values = operands
        desc.line(depth, f"{label}numpy {dtype.name} {shape}")


def _float_value(v: float) -> float | str:
    return v if math.isfinite(v) else repr(v)


def _is_float_value(v: Any, dtype: np.dtype) -> bool:
    return (type(v) in (int, float) and math.isfinite(v)) or v in ("nan", "inf", "-inf")


def _is_int_value(v: Any, dtype: np.dtype) -> bool:
    info = np.iinfo(dtype)
    return type(v) is int and info.min <= v <= info.max


_NUMPY_VALUE_CHECKS: dict[str, Callable[[Any, np.dtype[Any]], bool]] = {
    "b": lambda v, dtype: type(v) is bool,
    "i": _is_int_value,
    "u": _is_int_value,
    "f": _is_float_value,
    "c": lambda v, dtype: (type(v) is list and len(v) == 2
                           and all(_is_float_value(x, dtype) for x in v)),
}


_PLAIN = _Plain()
_FLOAT = _Float()
_LIST, _TUPLE = _Sequence(list), _Sequence(tuple)
_DICT = _Dict()
_ARRAY, _SCALAR, _SCHEMA, _INSTANCE = _Array(), _Scalar(), _Schema(), _Instance()
_NUMPY = _Numpy()

#: Every node kind, in the order the spec lists them.
KINDS: tuple[NodeKind, ...] = (_PLAIN, _FLOAT, _LIST, _TUPLE, _DICT, _ARRAY, _SCALAR,
                               _SCHEMA, _INSTANCE, _NUMPY)

#: The feature a file lists when a schema default is a ``numpy`` node.
NUMPY_DEFAULTS_FEATURE = "numpy-defaults"


def features_of(schemas: Sequence[SchemaEntry]) -> tuple[str, ...]:
    """The features a file with this schema table must list (readers refuse unknown ones)."""
    if any(isinstance(d, dict) and _NUMPY.keys == frozenset(d)
           for entry in schemas for d in entry.defaults):
        return (NUMPY_DEFAULTS_FEATURE,)
    return ()
# Encoding: exact builtin types first (subclasses such as IntEnum are not
# data), then the kinds that test the object, in this order.
_ENCODE_BY_TYPE: dict[type, NodeKind] = {
    type(None): _PLAIN, bool: _PLAIN, int: _PLAIN, str: _PLAIN, float: _FLOAT,
    list: _LIST, tuple: _TUPLE, dict: _DICT}
_ENCODE_BY_TEST: tuple[NodeKind, ...] = (_ARRAY, _SCALAR, _SCHEMA, _INSTANCE)
_DECODE_BY_KEYS: dict[frozenset[Any], NodeKind] = {k.keys: k for k in KINDS if k.keys}


# ---------------------------------------- pickled
#
# The pickle path: a whole graph that is not data, with its arrays kept out of the pickle.
#
# Arrays the file can store raw are sent to the array table as persistent
# references ``("array", i)``, so they are written once, raw, and loaded as
# views of their blocks like those of a data graph. Each is named by the path
# that reaches it in the graph (:mod:`.naming`), so ``inspect`` can tell them
# apart. An import that fails while unpickling raises MissingModuleError or
# MissingClassError: a problem of this process, not of the file.

class _Pickler(pickle.Pickler):
    """Protocol-5 pickler sending every storable array to the array table."""

    def __init__(self, file: io.BytesIO, arrays: ArrayTable, names: ArrayNames) -> None:
        super().__init__(file, protocol=5)
        self._arrays = arrays
        self._names = names

    def reducer_override(self, obj: Any) -> Any:
        # Classes are pickled by name: refuse rlpyt's that no fresh process can
        # find (rlpyt issue #111), rather than write a file that cannot load.
        if isinstance(obj, type) and (getattr(obj, "__module__", None) or "").startswith(
                "rlpyt"):
            from ..rlpyt.patch.pickling import refuse_unloadable
            refuse_unloadable(obj)
        return NotImplemented

    def persistent_id(self, obj: Any) -> Any:
        if not is_storable(obj):
            return None
        name = self._names.name_of(obj) or f"pickled[{len(self._arrays.entries)}]"
        try:
            return ("array", self._arrays.add(obj, name))
        except StructureMismatchError:
            return None  # e.g. a CUDA tensor: let torch pickle it itself


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, arrays: list[Any]) -> None:
        super().__init__(file)
        self._arrays = arrays

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except ImportError as exc:
            raise MissingModuleError(module, name, f"{type(exc).__name__}: {exc}") from exc
        except AttributeError as exc:
            raise MissingClassError(module, name, f"{type(exc).__name__}: {exc}") from exc

    def persistent_load(self, pid: Any) -> Any:
        if (type(pid) is tuple and len(pid) == 2 and pid[0] == "array"
                and type(pid[1]) is int and 0 <= pid[1] < len(self._arrays)):
            return self._arrays[pid[1]]
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def dumps(obj: Any, arrays: ArrayTable) -> bytes:
    """A protocol-5 pickle of ``obj`` whose storable arrays are added to ``arrays``."""
    buffer = io.BytesIO()
    # Reductions that turn views into offsets for plain pickle (rlpyt's buffers under
    # the patch) hand the arrays over as they are: the array table keeps views.
    with keeping_arrays_apart():
        _Pickler(buffer, arrays, array_paths(obj, is_storable)).dump(obj)
    return buffer.getvalue()


def loads(data: Any, arrays: list[Any]) -> Any:
    """Unpickle ``data`` (a buffer), resolving array references into ``arrays``."""
    try:
        return _Unpickler(io.BytesIO(memoryview(data)), arrays).load()
    except ModuleNotFoundError as exc:  # an import inside a reduce function
        if isinstance(exc, MissingModuleError):
            raise
        raise MissingModuleError(exc.name or "?", "<import>", f"{type(exc).__name__}: "
                                 f"{exc}") from exc


# ---------------------------------------- graph
#
# A graph as the file stores it: structure nodes, or a pickle, plus its array table.
#
# Both ways of saving (whole files and incremental saves) start here, so the
# rule for when pickle is needed, and the error when it is not allowed, exist once.

@dataclass(frozen=True)
class EncodedGraph:
    """An encoded graph: its arrays and schemas (``encoder``) and structure or pickle."""

    encoder: Encoder
    structure: Any                  # the root node; None when pickled
    not_data: NotData | None        # the first value that is not data, if pickled
    pickle_bytes: bytes | None
    metadata: dict[str, str] = field(default_factory=dict)  # the caller's, stored as data


def encode_graph(obj: Any, path: str, allow_pickle: bool,
                 metadata: dict[str, str] | None = None) -> EncodedGraph:
    """Encode ``obj`` as data, or pickle it if that is allowed (else NotDataError)."""
    metadata = metadata or {}
    encoder = Encoder()
    structure, not_data = None, None
    try:
        structure = encoder.encode(obj)
    except NotData as exc:
        # Kept for its message only: its traceback would keep the caller's frames alive.
        not_data = exc.with_traceback(None)
    except RecursionError:
        not_data = NotData("", obj, "nested too deeply for the data path")
    if not_data is None:
        return EncodedGraph(encoder, structure, None, None, metadata)
    if not allow_pickle:
        raise NotDataError(path, not_data.path, not_data.type_name, not_data.why) from None
    encoder = Encoder()  # start again: the pickle holds the whole graph
    return EncodedGraph(encoder, None, not_data, dumps(obj, encoder.arrays), metadata)
