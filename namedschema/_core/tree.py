"""Nested data as trees, and the optional packages it may hold.

The walk over nested containers (tuples, lists, dicts, named tuples, schema instances)
that the checkpoint format, the pickling of array views and the replay buffers share,
the memory extent of arrays, and how an optional package (torch, zstandard, ...) is
found, with the hint that names the extra installing it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import types
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np

from .schema import is_named, is_named_class

__all__ = ["extra_hint", "import_torch", "is_tensor", "torch_if_loaded", "attributes", "byte_span",
           "CONTAINERS", "DICT", "extent", "FROZENSET", "is_named", "is_named_class", "join_path",
           "LIST", "map_structure", "MEMBER", "memory_owner", "NAMED", "Node", "node_of", "OPAQUE",
           "overlap", "overlap_groups", "SET", "TUPLE"]


# ---------------------------------------- optional
#
# Optional dependencies: torch used only where loaded, and how to install an extra.
#
# Standard library only.
#
# torch, where loaded
# -------------------
#
# torch, used only where it is already loaded: namedschema never imports it to look.
#
# A tensor can exist only once something imported torch, so "is this a tensor?"
# never needs to import it: :func:`torch_if_loaded` reads ``sys.modules``. Code
# that must have torch (to make a tensor) calls :func:`import_torch`.
#
# torch_if_loaded   the torch module if something imported it already, else None
# is_tensor         whether a value is a torch tensor (a subclass such as a Parameter too)
# import_torch      the torch module, imported now (ImportError if it is not installed)
#
# Installing an extra
# -------------------
#
# How to install an optional extra, said for the way this namedschema was installed.
#
# ``pip install 'namedschema[torch]'`` only works once namedschema is on a package index; a
# user who installed from a clone needs ``pip install -e '/their/clone[torch]'``, and one who
# runs from a source tree without installing needs the requirement itself. Messages about a
# missing optional dependency end with :func:`extra_hint`.
#
# extra_hint   "install the torch extra: pip install -e '/path/to/clone[torch]' ..."

# --------------------------------------------------------------------------
# torch, where loaded
# --------------------------------------------------------------------------

def torch_if_loaded() -> Any:
    """The torch module if something imported it already, else None."""
    return sys.modules.get("torch")


def is_tensor(value: Any) -> bool:
    """Whether ``value`` is a ``torch.Tensor`` (or a subclass); never imports torch."""
    torch = torch_if_loaded()
    return torch is not None and isinstance(value, torch.Tensor)


def import_torch() -> Any:
    """The torch module, imported on first use (torch is optional)."""
    import torch
    return torch


# --------------------------------------------------------------------------
# Installing an extra
# --------------------------------------------------------------------------

# Used only when namedschema runs without being installed (no metadata to read).
_FALLBACK = {"torch": ["torch>=2.0"], "plot": ["matplotlib>=3.7"], "ray": ["ray>=2.9"],
             "optree": ["optree>=0.11"], "docs": ["sphinx>=7"]}

_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # project


def _distribution() -> metadata.Distribution | None:
    """The installed distribution this very copy of namedschema belongs to, if any."""
    try:
        dist = metadata.distribution("namedschema")
    except metadata.PackageNotFoundError:
        return None
    source = _local_source(dist)
    if source is not None:
        return dist if os.path.realpath(source) == os.path.realpath(_HERE) else None
    located = dist.locate_file("namedschema")
    return dist if os.path.realpath(str(located)) == os.path.realpath(
        os.path.join(_HERE, "namedschema")) else None


def _local_source(dist: metadata.Distribution) -> str | None:
    """The folder pip installed ``dist`` from (PEP 610 direct_url.json), if a folder."""
    try:
        info = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        return None
    if not isinstance(info, dict) or "dir_info" not in info:
        return None
    url = urlparse(str(info.get("url", "")))
    return unquote(url.path) if url.scheme == "file" else None


def _editable(dist: metadata.Distribution) -> bool:
    try:
        info = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        return False
    return bool(isinstance(info, dict) and info.get("dir_info", {}).get("editable"))


def _requirements(dist: metadata.Distribution | None, extra: str) -> list[str]:
    if dist is None:
        return _FALLBACK.get(extra, [])
    found = []
    for requirement in dist.requires or []:
        spec, _, marker = requirement.partition(";")
        if re.search(rf"""extra\s*==\s*['"]{re.escape(extra)}['"]""", marker):
            found.append(spec.strip().replace(" ", ""))
    return found


def extra_hint(extra: str) -> str:
    """The command that installs the optional extra ``extra`` where namedschema is.

    >>> hint = extra_hint("torch")
    >>> hint.startswith("install the torch extra") and "pip install" in hint
    True
    """
    dist = _distribution()
    requirements = _requirements(dist, extra)
    plain = " ".join(shlex.quote(r) for r in requirements)
    source = _local_source(dist) if dist is not None else None
    if dist is not None and source is not None:
        flag = "-e " if _editable(dist) else ""
        target = shlex.quote(f"{source}[{extra}]")
        command = f"pip install {flag}{target}"
        return (f"install the {extra} extra: {command} (namedschema was installed from "
                f"that folder)" + (f", or pip install {plain}" if plain else ""))
    if dist is None:
        return (f"install the {extra} extra's requirements: pip install {plain} "
                "(namedschema runs here from a source tree, not installed)")
    return (f"install the {extra} extra: pip install {shlex.quote(f'namedschema[{extra}]')}"
            + (f" (or pip install {plain})" if plain else ""))


# ---------------------------------------- tree
#
# Structures and memory: container kinds, paths, and where arrays lie in memory.
#
# Needs numpy (the memory half).
#
# Memory
# ------
#
# Where an array's elements lie in memory, and which arrays overlap: computed in one place.
#
# Checkpoint layout and header validation, shared memory, rlpyt buffer pickling
# and schema evolution all need the bytes a strided view touches, the object that
# owns an array's memory, and which arrays share memory. Negative strides reach
# below the first element.
#
# byte_span       (lowest, highest) byte offset of an element of a non-empty view
# extent          (start, end) addresses of an array's or CPU tensor's elements, None if empty
# memory_owner    the object at the end of an array's ``.base`` chain (owns its memory)
# overlap         whether two extents share a byte
# overlap_groups  indices of arrays grouped where their memory overlaps (transitively)
#
# Structures
# ----------
#
# The structure model: container kinds, their children, how to rebuild them, and paths.
#
# Every walker of the package (checkpoint encoding and array naming, rlpyt's
# view pickling, buffer helpers, schema evolution, the torch helpers) takes its
# containers from here, so one structure is walked and named one way: a save
# error, an upgrade error and ``inspect`` name a field alike. What a walker does
# at a node (encode, cast, pack it) stays in its own layer, and so does its
# choice of the kinds it enters.
#
# A node kind (:class:`Node`) gives a container's children as ``(key, child)``
# pairs and makes a container of the same kind from new children:
#
# ``DICT``       keys (OrderedDict and other subclasses kept as their type)
# ``LIST``       indexes (rebuilt as a plain list)
# ``TUPLE``      indexes (a tuple subclass rebuilt by calling it with the values)
# ``NAMED``      field names: schemas, stdlib and typing named tuples, rlpyt's
#                classic named array tuples (rebuilt with ``_make``)
# ``SET``, ``FROZENSET``  members, under the key ``MEMBER``
#
# Objects are not a kind: walkers that go into them read :func:`attributes`.
#
# Paths: ``a.b`` for a field, an attribute or an identifier key, ``a[0]`` for
# an index or int key, ``a['x y']`` for any other key (its repr), ``a{...}``
# for a set member. The walker names the root (a schema's typename,
# ``<root>``). Array names of the pickle path also read state_dict-style keys
# (``conv.0.weight``) as dotted names (``dotted=True``): files store those names.
#
# is_named_class   whether a class is a named tuple class (schema or classic)
# is_named         the same for an instance
# node_of          the kind of a container, among the kinds a walker enters
# attributes       an object's attribute dict, unless it is never walked into
# join_path        the path of a child
# map_structure    a copy of a structure with a function applied to its leaves
# OPAQUE           types never walked into: classes, modules, functions, code

# --------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------

Extent = tuple[int, int]


def byte_span(offset: int, shape: Iterable[int], strides: Iterable[int]) -> tuple[int, int]:
    """(lowest, highest) byte offset at which an element of the view starts.

    Add the item size to the second value for one past the last byte. Meant for
    non-empty views: a zero-length dimension gives a meaningless span.
    """
    lo = hi = offset
    for n, s in zip(shape, strides, strict=True):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi


def extent(x: Any) -> Extent | None:
    """``(lowest, one past highest)`` address of the elements of a numpy array or tensor.

    None for an empty one (it touches no memory) and for a tensor that is not
    on the CPU (its addresses are not host memory).
    """
    if is_tensor(x):
        if x.numel() == 0 or x.device.type != "cpu":
            return None
        size = x.element_size()
        lo, hi = byte_span(x.data_ptr(), x.shape, [s * size for s in x.stride()])
        return lo, hi + size
    if x.size == 0:
        return None
    lo, hi = byte_span(x.__array_interface__["data"][0], x.shape, x.strides)
    return lo, hi + x.itemsize


def memory_owner(arr: np.ndarray) -> Any:
    """What owns ``arr``'s memory: the outermost array's ``base`` (an mmap, a
    ctypes array, bytes...), or that array itself when it owns its data.
    Views of one array have the same owner."""
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr.base if arr.base is not None else arr


def overlap(a: Extent | None, b: Extent | None) -> bool:
    """Whether two extents share at least one byte (an empty one shares none)."""
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def overlap_groups(extents: Sequence[Extent | None], owners: Sequence[Hashable] | None = None
                   ) -> list[tuple[list[int], Extent]]:
    """The indices of ``extents`` grouped by shared memory, with each group's whole extent.

    Two indices are in one group when their extents overlap, or (given
    ``owners``) their owners are equal, or through a chain of such pairs.
    Indices whose extent is None are in no group. Members are in index
    order, groups in the order of their smallest index.
    """
    parent = list(range(len(extents)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    spans = {i: e for i, e in enumerate(extents) if e is not None}
    present = list(spans)
    if owners is not None:
        first: dict[Hashable, int] = {}
        for i in present:
            j = first.setdefault(owners[i], i)
            if j != i:
                parent[find(i)] = find(j)
    # Sweep by start address: an extent that starts before the furthest end
    # reached so far overlaps the extent that reached it.
    reach, last = None, -1
    for i in sorted(present, key=lambda i: spans[i][0]):
        lo, hi = spans[i]
        if reach is not None and lo < reach:
            parent[find(i)] = find(last)
        if reach is None or hi > reach:
            reach, last = hi, i
    groups: dict[int, list[int]] = {}
    for i in present:
        groups.setdefault(find(i), []).append(i)
    return [(g, (min(spans[i][0] for i in g), max(spans[i][1] for i in g)))
            for g in sorted(groups.values(), key=lambda g: g[0])]


# --------------------------------------------------------------------------
# Structures
# --------------------------------------------------------------------------

#: Objects never walked into: code, classes, modules and their kin.
OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
          types.MethodType, types.CodeType, types.FrameType, types.GeneratorType,
          types.CoroutineType, types.AsyncGeneratorType, memoryview)


@dataclass(frozen=True, eq=False)
class Node:
    """A container kind: its children as ``(key, child)`` pairs, and its rebuild."""

    name: str
    items: Callable[[Any], Iterable[tuple[Any, Any]]]
    rebuild: Callable[[Any, list[Any]], Any]

    def __repr__(self) -> str:
        return f"<node kind {self.name}>"


class _Member:
    """The key of a set's members (they have no key of their own)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MEMBER"


MEMBER = _Member()


def _named_items(obj: tuple[Any, ...]) -> Iterable[tuple[Any, Any]]:
    fields = type(obj)._fields  # type: ignore[attr-defined]
    return zip(fields, obj, strict=True) if len(fields) == len(obj) else enumerate(obj)


def _members(obj: Any) -> Iterable[tuple[Any, Any]]:
    return ((MEMBER, v) for v in obj)


DICT = Node("dict", lambda d: d.items(),
            lambda d, values: (dict if type(d) is dict else type(d))(
                zip(d.keys(), values, strict=True)))
LIST = Node("list", enumerate, lambda _l, values: list(values))
TUPLE = Node("tuple", enumerate,
             lambda t, values: tuple(values) if type(t) is tuple else type(t)(values))
NAMED = Node("named tuple", _named_items, lambda t, values: type(t)._make(values))
SET = Node("set", _members, lambda s, values: (set if type(s) is set else type(s))(values))
FROZENSET = Node("frozenset", _members,
                 lambda s, values: (frozenset if type(s) is frozenset else type(s))(values))

#: The kinds most walkers enter: dicts, lists, tuples and named tuples.
CONTAINERS: frozenset[Node] = frozenset({DICT, LIST, TUPLE, NAMED})

_EXACT: dict[type, Node] = {dict: DICT, list: LIST, tuple: TUPLE, set: SET, frozenset: FROZENSET}
_BASES = ((dict, DICT), (list, LIST), (tuple, TUPLE), (set, SET), (frozenset, FROZENSET))


def node_of(obj: Any, kinds: Collection[Node] = CONTAINERS,
            subclasses: bool = False) -> Node | None:
    """The kind of container ``obj`` is, if it is one of ``kinds``, else None.

    Named tuples are ``NAMED`` whatever their class; other subclasses of the
    built-in containers count only with ``subclasses`` (a walker that
    rebuilds them must know how to call them).
    """
    cls = type(obj)
    node = _EXACT.get(cls)
    if node is None:
        if isinstance(obj, tuple) and is_named_class(cls):
            node = NAMED
        elif subclasses:
            node = next((n for base, n in _BASES if isinstance(obj, base)), None)
    return node if node in kinds else None


def attributes(obj: Any) -> dict[str, Any] | None:
    """``obj.__dict__`` for an object a walker may go into, else None (see ``OPAQUE``)."""
    if isinstance(obj, OPAQUE):
        return None
    attrs = getattr(obj, "__dict__", None)
    return attrs if isinstance(attrs, dict) and attrs is not obj else None


_DOTTED = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*\Z")


def join_path(path: str, key: Any, dotted: bool = False) -> str:
    """The path of the child ``key`` of the value at ``path`` (see the module docstring).

    >>> join_path('', 'samples'), join_path('samples', 'reward'), join_path('x', 0)
    ('samples', 'samples.reward', 'x[0]')
    >>> join_path('opt', 'a b'), join_path('s', MEMBER), join_path('m', '0.weight', dotted=True)
    ("opt['a b']", 's{...}', 'm.0.weight')
    """
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key is MEMBER:
        return f"{path}{{...}}"
    if isinstance(key, str) and (_DOTTED.match(key) if dotted else key.isidentifier()):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def map_structure(obj: Any, fn: Callable[[Any, str | None], Any], *,
                  kinds: Collection[Node] = CONTAINERS, subclasses: bool = False,
                  path: str | None = None, shared: bool = True,
                  max_depth: int | None = None) -> Any:
    """A copy of ``obj`` with ``fn(leaf, path)`` in place of every leaf.

    Containers of ``kinds`` (see :func:`node_of`) are entered; everything
    else is a leaf. ``path`` names the root; with None no paths are made and
    ``fn`` gets None. With ``shared`` (a graph), a container met again (shared,
    or in a cycle) gives its first result, and one whose children all come
    back unchanged is kept, not copied; without it (a tree), every container
    is rebuilt at each place it stands. Containers at ``max_depth`` are kept
    as they are.
    """
    memo: dict[int, Any] | None = {} if shared else None

    def visit(x: Any, where: str | None, depth: int) -> Any:
        node = node_of(x, kinds, subclasses)
        if node is None:
            return fn(x, where)
        if memo is not None and id(x) in memo:
            return memo[id(x)]
        if max_depth is not None and depth >= max_depth:
            return x
        if memo is not None:
            memo[id(x)] = x  # met again while being walked (a cycle): stays as is
        items = list(node.items(x))
        values = [visit(v, None if where is None else join_path(where, k), depth + 1)
                  for k, v in items]
        if memo is not None and all(new is old for new, (_k, old) in
                                    zip(values, items, strict=True)):
            result = x
        else:
            result = node.rebuild(x, values)
        if memo is not None:
            memo[id(x)] = result
        return result

    return visit(obj, path, 0)
