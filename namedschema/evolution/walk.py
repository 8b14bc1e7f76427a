"""Schema evolution over a structure: the walk that finds and rebuilds instances.

:class:`Walk` visits containers and objects once each (cycles and shared
objects kept), first dry (checks, no change) then building; :func:`check_aliases`
refuses casts that views of the cast arrays would not follow.
"""

from __future__ import annotations

import types

import numpy as np

from .._core.factories import is_namedarraytuple_class
from .._core.strides import byte_span
from ..errors import SchemaEvolutionError, short_repr
from .conversion import Plan, Upgrader, all_tensors, dtype_text, is_tensor
from .reports import KeptField, is_named_class, stored_typename

__all__ = ["Walk", "check_aliases"]

_ATOMS = (type(None), bool, int, float, complex, str, bytes, bytearray, range, slice,
          type(Ellipsis), type(NotImplemented))
# Objects that are never walked into: code, classes and modules.
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType, types.CodeType, types.FrameType, types.GeneratorType,
           types.CoroutineType, types.AsyncGeneratorType, memoryview)


def _path_join(path, key):
    if isinstance(key, int):
        return f"{path}[{key}]"
    if isinstance(key, str) and key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{short_repr(key)}]"


class Walk:
    """One pass over the structure; the dry pass checks, the build pass rebuilds."""

    def __init__(self, up: Upgrader, dry: bool, casts: dict):
        self.up, self.dry = up, dry
        self.casts = casts          # id(array) -> [array, dtype, path] (filled when dry)
        self.leaves: list = []      # (array, path) of every array met (dry)
        self.memo: dict = {}        # id(obj) -> result
        self.busy: set = set()      # ids of immutables being rebuilt (cycles)
        self.cycled: set = set()
        self.writes: list = []      # deferred in-place updates of mutable containers

    def convert(self, obj, path, hint=None):
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
        if isinstance(obj, (np.generic, *_OPAQUE)):
            return obj
        if isinstance(obj, tuple):
            if is_named_class(type(obj)):
                return self.immutable(obj, path, lambda o, p: self.instance(o, p, hint))
            if type(obj) is tuple:
                return self.immutable(obj, path, self.plain_tuple)
            return obj  # other tuple subclasses: unknown constructors, left alone
        if isinstance(obj, frozenset):
            return self.immutable(obj, path, self.frozen_set)
        if isinstance(obj, list):
            self.memo[key] = obj
            for i, v in enumerate(obj):
                self.assign(obj, i, v, self.convert(v, _path_join(path, i)))
        elif isinstance(obj, dict):
            self.memo[key] = obj
            for k, v in list(obj.items()):
                self.assign(obj, k, v, self.convert(v, _path_join(path, k)))
        elif isinstance(obj, set):
            self.memo[key] = obj
            items = list(obj)
            new = [self.convert(v, f"{path}{{...}}") for v in items]
            if not self.dry and any(a is not b for a, b in zip(items, new, strict=True)):
                self.writes.append(lambda s=obj, n=new: (s.clear(), s.update(n)))
        else:
            self.memo[key] = obj
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict) and attrs is not obj and not isinstance(obj, _OPAQUE):
            base = path or type(obj).__name__
            for k, v in list(attrs.items()):
                self.assign(attrs, k, v, self.convert(v, _path_join(base, k)))
        return obj

    def assign(self, container, key, old, new):
        if new is not old and not self.dry:
            self.writes.append(lambda c=container, k=key, n=new: c.__setitem__(k, n))

    def immutable(self, obj, path, rebuild):
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

    def plain_tuple(self, obj, path):
        new = [self.convert(v, _path_join(path, i)) for i, v in enumerate(obj)]
        return obj if all(a is b for a, b in zip(obj, new, strict=True)) else tuple(new)

    def frozen_set(self, obj, path):
        items = list(obj)
        new = [self.convert(v, f"{path}{{...}}") for v in items]
        return obj if all(a is b for a, b in zip(items, new, strict=True)) else frozenset(new)

    def array(self, arr, path):
        if self.dry:
            self.leaves.append((arr, path))
            self.memo[id(arr)] = arr
            return arr
        entry = self.casts.get(id(arr))
        result = arr if entry is None else self.up.cast(arr, *entry[1:])
        self.memo[id(arr)] = result
        return result

    def schema_class(self, cls, path):
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
            new = [self.convert(v, f"{base}.{f}", leading)
                   for f, v in zip(cls._fields, values, strict=True)]
            if all(a is b for a, b in zip(values, new, strict=True)):
                return obj
            return cls._make(new)
        rec = None if self.dry else up.record(plan, base)
        tensors = plan.array and not self.dry and plan.fills and all_tensors(values)
        out = []
        for j, src in enumerate(plan.sources):
            name = plan.target._fields[j]
            fpath = f"{base}.{name}"
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
                value = self.convert(values[i], f"{base}.{name}", leading)
                if not self.dry:
                    up.kept.append(KeptField(base, stored_typename(cls), name, value))
        if rec is None:  # the dry pass builds nothing
            return obj
        rec.instances += 1
        if plan.identity and all(a is b for a, b in zip(values, out, strict=True)):
            return obj
        return plan.target._make(out)

    def note_cast(self, arr, dtype, path, schema=None, field=None):
        entry = self.casts.get(id(arr))
        if entry is None:
            self.casts[id(arr)] = [arr, dtype, path, schema, field]
        elif entry[1] != dtype:
            raise SchemaEvolutionError(
                f"{path}: this array is also at {entry[2]}, where it would be cast to "
                f"{dtype_text(entry[1])}, not {dtype_text(dtype)}; one array cannot "
                "take two dtypes", path=path)


def _root(arr):
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr.base if arr.base is not None else arr


def _address_range(x):
    """``(lowest, one past highest)`` address of an array's or tensor's elements, or None."""
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


def check_aliases(casts, leaves):
    """Refuse casts of arrays that other arrays or torch tensors in the structure view.

    A cast makes a new array; the identical array elsewhere is replaced by it,
    but a view (say ``samples_return_ = samples.reward[...]``, or a tensor
    made with ``torch.from_numpy``) would keep pointing at the old memory and
    the two would silently drift apart. Arrays are compared by their base
    and ``np.may_share_memory``; tensors by the addresses their elements span.
    """
    if not casts:
        return
    roots: dict = {}
    spans = []
    for arr, _dtype, path, *_where in casts.values():
        roots.setdefault(id(_root(arr)), []).append((arr, path))
        span = _address_range(arr)
        if span is not None:
            spans.append((span, path))
    for leaf, leaf_path in leaves:
        if id(leaf) in casts:
            continue
        if is_tensor(leaf):
            span = _address_range(leaf)
            hit = None if span is None else next(
                (path for (lo, hi), path in spans if lo < span[1] and span[0] < hi), None)
            if hit is not None:
                _refuse(hit, leaf_path, "a torch tensor")
            continue
        for arr, path in roots.get(id(_root(leaf)), ()):
            if np.may_share_memory(leaf, arr):
                _refuse(path, leaf_path, "a view of it")


def _refuse(path, leaf_path, what):
    raise SchemaEvolutionError(
        f"{path}: casting would copy this array, but {leaf_path} shares its memory "
        f"({what}) and would keep the old data; save the checkpoint with the new dtype "
        "instead, or drop the view", path=path)

