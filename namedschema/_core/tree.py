"""The structure model: container kinds, their children, how to rebuild them, and paths.

Every walker of the package (checkpoint encoding and array naming, rlpyt's
view pickling, buffer helpers, schema evolution, the torch helpers) takes its
containers from here, so one structure is walked and named one way: a save
error, an upgrade error and ``inspect`` name a field alike. What a walker does
at a node (encode, cast, pack it) stays in its own layer, and so does its
choice of the kinds it enters.

A node kind (:class:`Node`) gives a container's children as ``(key, child)``
pairs and makes a container of the same kind from new children:

``DICT``       keys (OrderedDict and other subclasses kept as their type)
``LIST``       indexes (rebuilt as a plain list)
``TUPLE``      indexes (a tuple subclass rebuilt by calling it with the values)
``NAMED``      field names: schemas, stdlib and typing named tuples, rlpyt's
               classic named array tuples (rebuilt with ``_make``)
``SET``, ``FROZENSET``  members, under the key ``MEMBER``

Objects are not a kind: walkers that go into them read :func:`attributes`.

Paths: ``a.b`` for a field, an attribute or an identifier key, ``a[0]`` for
an index or int key, ``a['x y']`` for any other key (its repr), ``a{...}``
for a set member. The walker names the root (a schema's typename,
``<root>``). Array names of the pickle path also read state_dict-style keys
(``conv.0.weight``) as dotted names (``dotted=True``): files store those names.

is_named_class   whether a class is a named tuple class (schema or classic)
is_named         the same for an instance
node_of          the kind of a container, among the kinds a walker enters
attributes       an object's attribute dict, unless it is never walked into
join_path        the path of a child
map_structure    a copy of a structure with a function applied to its leaves
OPAQUE           types never walked into: classes, modules, functions, code
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from .factories import is_classic_namedtuple_class
from .schema import NamedTupleSchema

__all__ = ["is_named_class", "is_named", "Node", "DICT", "LIST", "TUPLE", "NAMED", "SET",
           "FROZENSET", "MEMBER", "CONTAINERS", "node_of", "attributes", "join_path",
           "map_structure", "OPAQUE"]

#: Objects never walked into: code, classes, modules and their kin.
OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
          types.MethodType, types.CodeType, types.FrameType, types.GeneratorType,
          types.CoroutineType, types.AsyncGeneratorType, memoryview)


def is_named_class(cls: Any) -> bool:
    """Whether ``cls`` is a named tuple class: a schema (array tuple or not), a
    stdlib or ``typing`` named tuple, or rlpyt's classic ``namedarraytuple``."""
    return isinstance(cls, NamedTupleSchema) or is_classic_namedtuple_class(cls)


def is_named(obj: Any) -> bool:
    """Whether ``obj`` is an instance of a named tuple class (see :func:`is_named_class`)."""
    return isinstance(obj, tuple) and is_named_class(type(obj))


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


def _named_items(obj: tuple) -> Iterable[tuple[Any, Any]]:
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


def attributes(obj: Any) -> dict | None:
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
