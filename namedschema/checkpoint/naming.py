"""Names for the arrays of a pickled graph: the attribute path that reaches each one.

The pickle path stores arrays out of band, but the pickler only sees each
array, not where it sits. Before pickling, :func:`array_paths` walks the
graph the way a reader would name things (dict keys, list indexes, named
tuple fields, object attributes, a torch module's parameters, buffers and
submodules by their ``state_dict`` names) and gives every array the first,
shortest path that reaches it, such as ``replay.samples.observation`` or
``agent.model.conv.0.weight``. Arrays it does not reach keep the positional
name ``pickled[i]``.

array_paths   the names of the arrays reachable in a graph (an ArrayNames)
ArrayNames    path lookup by array object, or by the memory a new array views
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core import tree
from .._core.optional import is_tensor

__all__ = ["array_paths", "ArrayNames"]

# Bounds on the walk: a graph of many small Python objects is named only in part.
MAX_VISITS = 200_000
MAX_DEPTH = 64

def _module_items(obj: Any):
    """A torch module's parameters, buffers and submodules under their own names."""
    for slot in ("_parameters", "_buffers", "_modules"):
        table = obj.__dict__.get(slot)
        if isinstance(table, dict):
            yield from table.items()
    for key, value in obj.__dict__.items():
        if key not in ("_parameters", "_buffers", "_modules"):
            yield key, value


def _children(obj: Any):
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
