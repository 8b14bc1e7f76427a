"""Schema evolution over a structure: the walk that finds and rebuilds instances.

:class:`Walk` visits containers and objects once each (cycles and shared
objects kept), first dry (checks, no change) then building; :func:`check_aliases`
refuses casts that views of the cast arrays would not follow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core import tree
from .._core.optional import is_tensor
from .._core.schema import is_namedarraytuple_class
from .._core.tree import extent, is_named_class, join_path, memory_owner, overlap
from ..errors import SchemaEvolutionError
from .conversion import Plan, Upgrader, all_tensors, dtype_text
from .reports import KeptField, stored_typename

__all__ = ["Walk", "check_aliases"]

_ATOMS = (type(None), bool, int, float, complex, str, bytes, bytearray, range, slice,
          type(Ellipsis), type(NotImplemented))
# Containers updated in place (subclasses too); tuples and frozensets are rebuilt.
_IN_PLACE = (tree.LIST, tree.DICT, tree.SET)


class Walk:
    """One pass over the structure; the dry pass checks, the build pass rebuilds."""

    def __init__(self, up: Upgrader, dry: bool, casts: dict[int, Any]) -> None:
        self.up, self.dry = up, dry
        self.casts = casts          # id(array) -> [array, dtype, path] (filled when dry)
        self.leaves: list[Any] = []      # (array, path) of every array met (dry)
        self.memo: dict[int, Any] = {}        # id(obj) -> result
        self.busy: set[Any] = set()      # ids of immutables being rebuilt (cycles)
        self.cycled: set[Any] = set()
        self.writes: list[Any] = []      # deferred in-place updates of mutable containers

    def convert(self, obj, path, hint=None):
        """``obj`` converted (memoised by identity; cycles refused)."""
        if type(obj) in _ATOMS:
            return obj
        key = id(obj)
        if key in self.memo:
            return self.memo[key]
        if key in self.busy:
            self.cycled.add(key)
            return obj
        if isinstance(obj, np.ndarray):
            return self.array(obj, path)
        if self.dry and is_tensor(obj):
            self.leaves.append((obj, path))  # a tensor may view an array being cast
        if isinstance(obj, type):
            result = self.schema_class(obj, path) if is_named_class(obj) else obj
            self.memo[key] = result
            return result
        if isinstance(obj, (np.generic, *tree.OPAQUE)):
            return obj
        if isinstance(obj, tuple):
            if tree.is_named(obj):
                return self.immutable(obj, path, lambda o, p: self.instance(o, p, hint))
            if type(obj) is tuple:
                return self.immutable(obj, path, lambda o, p: self.rebuilt(o, p, tree.TUPLE))
            return obj  # other tuple subclasses: unknown constructors, left alone
        if isinstance(obj, frozenset):
            return self.immutable(obj, path, lambda o, p: self.rebuilt(o, p, tree.FROZENSET))
        self.memo[key] = obj
        node = tree.node_of(obj, _IN_PLACE, subclasses=True)
        if node is tree.SET:
            items = list(obj)
            new = [self.convert(v, join_path(path, tree.MEMBER)) for v in items]
            if not self.dry and any(a is not b for a, b in zip(items, new, strict=True)):
                self.writes.append(lambda s=obj, n=new: (s.clear(), s.update(n)))
        elif node is not None:
            for k, v in list(node.items(obj)):
                self.assign(obj, k, v, self.convert(v, join_path(path, k)))
        attrs = tree.attributes(obj)
        if attrs is not None:
            base = path or type(obj).__name__
            for k, v in list(attrs.items()):
                self.assign(attrs, k, v, self.convert(v, join_path(base, k)))
        return obj

    def assign(self, container, key, old, new) -> None:
        """Queue writing ``new`` into ``container[key]`` if it differs from ``old``."""
        if new is not old and not self.dry:
            self.writes.append(lambda c=container, k=key, n=new: c.__setitem__(k, n))

    def immutable(self, obj, path, rebuild):
        """``obj`` rebuilt by ``rebuild``, guarded against cycles through it."""
        key = id(obj)
        self.busy.add(key)
        try:
            result = rebuild(obj, path)
        finally:
            self.busy.discard(key)
        if key in self.cycled and result is not obj:
            raise SchemaEvolutionError(
                f"{path or '<root>'}: a {type(obj).__name__} refers back to itself "
                "through its contents and would change; such cycles cannot be rebuilt",
                path=path)
        self.memo[key] = result
        return result

    def rebuilt(self, obj, path, node):
        """A tuple or frozenset of converted items (``obj`` itself if none changed)."""
        items = list(node.items(obj))
        new = [self.convert(v, join_path(path, k)) for k, v in items]
        if all(a is b for a, (_k, b) in zip(new, items, strict=True)):
            return obj
        return node.rebuild(obj, new)

    def array(self, arr, path):
        """The array at ``path``: recorded on a dry pass, cast as planned otherwise."""
        if self.dry:
            self.leaves.append((arr, path))
            self.memo[id(arr)] = arr
            return arr
        entry = self.casts.get(id(arr))
        result = arr if entry is None else self.up.cast(arr, *entry[1:])
        self.memo[id(arr)] = result
        return result

    def schema_class(self, cls, path):
        """The target class of saved schema class ``cls``, or ``cls`` when unmatched."""
        up = self.up
        plan_target = up.targets.lookup(stored_typename(cls), path or stored_typename(cls))
        if plan_target is None:
            if not self.dry:
                up.unmatched.setdefault(stored_typename(cls), path or "<root>")
            return cls
        if self.dry:
            return plan_target
        rec = up.records.get(id(cls))
        if rec is None:
            # A class reference met before (or without) any instance: the
            # fields are reported as the plan would map them, without checks.
            try:
                plan = up.plan(cls, path or stored_typename(cls))
            except SchemaEvolutionError:
                plan = Plan(cls, plan_target, (), {}, (), {})
            rec = up.record(plan, path or stored_typename(cls))
        rec.classes += 1
        return plan_target

    def instance(self, obj, path, hint=None):
        """Schema instance ``obj`` converted to its target schema."""
        up = self.up
        cls = type(obj)
        base = path or stored_typename(cls)
        plan = up.plan(cls, base)
        values = tuple(obj)
        leading = None
        if is_namedarraytuple_class(cls if plan is None else plan.target):
            leading = up.leading_shape(plan, values, hint)
        if plan is None:
            if not self.dry:
                up.unmatched.setdefault(stored_typename(cls), base)
            new = [self.convert(v, join_path(base, f), leading)
                   for f, v in zip(cls._fields, values, strict=True)]
            if all(a is b for a, b in zip(values, new, strict=True)):
                return obj
            return cls._make(new)
        rec = None if self.dry else up.record(plan, base)
        tensors = plan.array and not self.dry and plan.fills and all_tensors(values)
        out = []
        for j, src in enumerate(plan.sources):
            name = plan.target._fields[j]
            fpath = join_path(base, name)
            if src is None:
                out.append(None if self.dry else
                           up.fill(plan, j, leading, base, tensors))
                continue
            value = values[src]
            if j in plan.declared:
                cast_to = up.check_declared(plan, j, value, fpath, leading)
                if cast_to is not None:
                    if isinstance(value, np.ndarray):
                        if self.dry:
                            self.note_cast(value, cast_to, fpath,
                                           stored_typename(plan.target), name)
                    elif not self.dry:
                        value = up.cast(value, cast_to, fpath, stored_typename(plan.target),
                                        name)
                    if rec is not None:
                        rec.cast[(name, dtype_text(values[src].dtype),
                                  dtype_text(cast_to))] = None
            out.append(self.convert(value, fpath, leading))
        for i, name in plan.extras:
            if up.extra == "keep":
                value = self.convert(values[i], join_path(base, name), leading)
                if not self.dry:
                    up.kept.append(KeptField(base, stored_typename(cls), name, value))
        if rec is None:  # the dry pass builds nothing
            return obj
        rec.instances += 1
        if plan.identity and all(a is b for a, b in zip(values, out, strict=True)):
            return obj
        return plan.target._make(out)

    def note_cast(self, arr, dtype, path, schema=None, field=None):
        """Plan casting ``arr`` to ``dtype``; refuse two different casts of one array."""
        entry = self.casts.get(id(arr))
        if entry is None:
            self.casts[id(arr)] = [arr, dtype, path, schema, field]
        elif entry[1] != dtype:
            raise SchemaEvolutionError(
                f"{path}: this array is also at {entry[2]}, where it would be cast to "
                f"{dtype_text(entry[1])}, not {dtype_text(dtype)}; one array cannot "
                "take two dtypes", path=path)


def check_aliases(casts, leaves) -> None:
    """Refuse casts of arrays that other arrays or torch tensors in the structure view.

    A cast makes a new array; the identical array elsewhere is replaced by it,
    but a view (say ``samples_return_ = samples.reward[...]``, or a tensor
    made with ``torch.from_numpy``) would keep pointing at the old memory and
    the two would silently drift apart. Arrays are compared by the object
    that owns their memory and the bytes they span; tensors by the bytes alone.
    """
    if not casts:
        return
    owners: dict[int, Any] = {}
    spans = []
    for arr, _dtype, path, *_where in casts.values():
        span = extent(arr)
        owners.setdefault(id(memory_owner(arr)), []).append((span, path))
        spans.append((span, path))
    for leaf, leaf_path in leaves:
        if id(leaf) in casts:
            continue
        span = extent(leaf)
        if is_tensor(leaf):
            hit = next((path for cast, path in spans if overlap(cast, span)), None)
            if hit is not None:
                _refuse(hit, leaf_path, "a torch tensor")
            continue
        for cast, path in owners.get(id(memory_owner(leaf)), ()):
            if overlap(cast, span):
                _refuse(path, leaf_path, "a view of it")


def _refuse(path, leaf_path, what):
    raise SchemaEvolutionError(
        f"{path}: casting would copy this array, but {leaf_path} shares its memory "
        f"({what}) and would keep the old data; save the checkpoint with the new dtype "
        "instead, or drop the view", path=path)

