"""Schema evolution, per class: how one saved class becomes its current schema.

:class:`Plan` maps fields by name (sources, fills, dropped extras, declared
dtypes); :class:`Upgrader` makes the plans, checks and casts field values
and builds instances. ``_evolution_walk`` drives it over a structure.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._core.optional import is_tensor, torch_if_loaded
from .._core.schema import is_namedarraytuple_class
from .._core.tree import is_named
from .._core.writes import cast_checked, describe_change, quiet_cast
from ..errors import FillLimitError, SchemaEvolutionError
from .reports import MISSING, MappingRecord, field_dtype, stored_typename

__all__ = ["Plan", "Upgrader", "all_tensors", "dtype_text"]

_NUMBERS = (bool, int, float, complex)


# --------------------------------------------------------------------------
# The plan for one saved class
# --------------------------------------------------------------------------

class Plan:
    """How instances of one saved class become instances of its target."""

    def __init__(self, saved, target, sources, fills, extras, declared) -> None:
        self.saved, self.target = saved, target
        self.sources = sources      # per target field: saved index, or None (fill)
        self.fills = fills          # target field index -> default
        self.extras = extras        # (saved index, name) of saved fields dropped
        self.declared = declared    # target field index -> (dtype, element shape)
        self.added = tuple(target._fields[j] for j in sorted(fills))
        self.array = is_namedarraytuple_class(target)
        self.identity = (saved is target and not fills and not extras)


def _tensor_dtype(tensor):
    """The numpy dtype of a tensor's dtype, or None (bfloat16 has none)."""
    try:
        return np.dtype(str(tensor.dtype).removeprefix("torch."))
    except TypeError:
        return None


def _array_leaves(values, out, depth=0) -> None:
    for v in values:
        if isinstance(v, np.ndarray) or is_tensor(v):
            out.append(v)
        elif depth < 50 and is_named(v):
            _array_leaves(v, out, depth + 1)


def all_tensors(values) -> bool:
    """Whether the array leaves of an instance are torch tensors (at least one, no ndarray)."""
    leaves: list[Any] = []
    _array_leaves(values, leaves)
    return bool(leaves) and all(is_tensor(v) for v in leaves)


def _leaf_shape(value):
    if isinstance(value, np.ndarray | np.generic) or is_tensor(value):
        return tuple(value.shape)
    if type(value) in _NUMBERS:
        return ()
    return None


def _leaf_shapes(values, out, depth=0) -> None:
    for v in values:
        shape = _leaf_shape(v)
        if shape is not None:
            out.append(shape)
        elif depth < 50 and is_named(v):
            _leaf_shapes(v, out, depth + 1)


def _common_prefix(shapes):
    if not shapes:
        return None
    ndim = min(len(s) for s in shapes)
    prefix = []
    for i in range(ndim):
        if any(s[i] != shapes[0][i] for s in shapes):
            break
        prefix.append(shapes[0][i])
    return tuple(prefix)


def dtype_text(dtype) -> str:
    """A dtype's name as reports show it (byte order only where it matters)."""
    dtype = np.dtype(dtype)
    return dtype.name if dtype.isnative or dtype.itemsize == 1 else dtype.str


class Upgrader:
    """The conversion plans of one upgrade: saved schema classes to their targets."""

    def __init__(self, targets, extra, casting, defaults, fill_budget=None) -> None:
        self.targets, self.extra, self.casting = targets, extra, casting
        self.defaults = defaults
        self.fill_budget = fill_budget  # bytes all new fields may take (None: unbounded)
        self.plans: dict[int, Any] = {}       # id(saved class) -> Plan or None
        self._alive: list[Any] = []      # keeps saved classes alive while ids are keys
        self.records: dict[int, Any] = {}     # id(saved class) -> MappingRecord
        self.unmatched: dict[str, Any] = {}
        self.kept: list[Any] = []

    # -- plans -------------------------------------------------------------

    def plan(self, cls, path):
        """The plan for saved class ``cls`` (met at ``path``), made once; None if unmatched."""
        key = id(cls)
        if key in self.plans:
            return self.plans[key]
        self._alive.append(cls)
        saved_name = stored_typename(cls)
        target = self.targets.lookup(saved_name, path)
        if target is None:
            self.plans[key] = None
            return None
        target_name = stored_typename(target)
        saved_fields = tuple(cls._fields)
        index = {name: i for i, name in enumerate(saved_fields)}
        sources: list[int | None] = []
        fills: dict[int, Any] = {}
        declared: dict[int, Any] = {}
        for j, name in enumerate(target._fields):
            decl = field_dtype(target, name)
            if decl is not None:
                declared[j] = decl
            if name in index:
                sources.append(index[name])
                continue
            sources.append(None)
            default = self.defaults.get(f"{target_name}.{name}", MISSING)
            if default is MISSING:
                default = target._field_defaults.get(name, MISSING)
            if default is MISSING:
                raise SchemaEvolutionError(
                    f"{path}: the saved {saved_name} ({', '.join(saved_fields)}) has no "
                    f"field {name!r}, and the current {target_name} gives it no default; "
                    f"give the schema a default for it or pass "
                    f"defaults={{'{target_name}.{name}': ...}}",
                    schema=target_name, field=name, path=path)
            fills[j] = default
        wanted = set(target._fields)
        extras = tuple((i, n) for i, n in enumerate(saved_fields) if n not in wanted)
        if extras and self.extra == "error":
            names = ", ".join(repr(n) for _i, n in extras)
            raise SchemaEvolutionError(
                f"{path}: the saved {saved_name} has field{'s' * (len(extras) > 1)} "
                f"{names} that the current {target_name} ({', '.join(target._fields)}) "
                f"lacks; pass extra='ignore' to drop {'them' if len(extras) > 1 else 'it'} "
                f"or extra='keep' to get the values back in the report",
                schema=target_name, field=extras[0][1], path=path)
        plan = Plan(cls, target, tuple(sources), fills, extras, declared)
        self.plans[key] = plan
        return plan

    def record(self, plan, path):
        """The report record of ``plan``, made on first use."""
        rec = self.records.get(id(plan.saved))
        if rec is None:
            rec = self.records[id(plan.saved)] = MappingRecord(plan, path)
        return rec

    # -- declared dtypes ---------------------------------------------------

    def check_declared(self, plan, j, value, path, leading):
        """Check a saved value against its declared dtype and element shape.

        Returns the dtype to cast to, or None. ``leading`` is the array
        tuple's leading shape (None for plain named tuples).
        """
        dtype, shape = plan.declared[j]
        target_name, name = stored_typename(plan.target), plan.target._fields[j]
        if value is None or type(value) in _NUMBERS:
            return None  # carries no dtype of its own
        tensor = is_tensor(value)
        if isinstance(value, np.ndarray | np.generic) or tensor:
            saved_dtype = _tensor_dtype(value) if tensor else value.dtype
            saved_shape = tuple(value.shape)
        else:
            raise SchemaEvolutionError(
                f"{path}: {target_name}.{name} is declared as {dtype_text(dtype)}"
                f"{'' if shape is None else f' with element shape {shape}'}, but the "
                "saved value is a "
                f"{type(value).__qualname__}", schema=target_name, field=name, path=path,
                saved=type(value).__qualname__, expected=f"{dtype_text(dtype)} {shape}")
        if shape is None:  # an annotation declares no shape
            ok, saved_element = True, saved_shape
        elif leading is not None:
            ok = saved_shape == leading + shape
            saved_element = saved_shape[len(leading):] if \
                saved_shape[:len(leading)] == leading else saved_shape
        else:  # no leading shape to go by: the element shape must end the saved one
            ok = len(saved_shape) >= len(shape) and \
                saved_shape[len(saved_shape) - len(shape):] == shape
            saved_element = saved_shape
        if not ok:
            lead = "" if leading is None else f" (leading shape {leading})"
            raise SchemaEvolutionError(
                f"{path}: {target_name}.{name} has saved shape {saved_shape}{lead}, but "
                f"the current schema declares element shape {shape}; shapes are never "
                "changed", schema=target_name, field=name, path=path,
                saved=saved_element, expected=shape)
        if saved_dtype == dtype:
            return None
        if tensor:
            saved_text = str(value.dtype)
            raise SchemaEvolutionError(
                f"{path}: {target_name}.{name} is a tensor of {saved_text}, but the "
                f"current schema declares {dtype_text(dtype)}; tensors are not cast "
                "(their storage may be shared with arrays elsewhere): convert the "
                "saved data with namedschema.buffer.numpify_buffer first, or cast it "
                "yourself", schema=target_name, field=name, path=path,
                saved=saved_text, expected=dtype_text(dtype))
        if not np.can_cast(saved_dtype, dtype, casting=self.casting):
            raise SchemaEvolutionError(
                f"{path}: {target_name}.{name} has saved dtype "
                f"{dtype_text(saved_dtype)}, but the current schema declares "
                f"{dtype_text(dtype)}; casting={self.casting!r} does not allow "
                f"{dtype_text(saved_dtype)} -> {dtype_text(dtype)}"
                + ("" if np.can_cast(saved_dtype, dtype, "same_kind") else
                   " (pass casting='unsafe' to force it)"),
                schema=target_name, field=name, path=path,
                saved=dtype_text(saved_dtype), expected=dtype_text(dtype))
        return dtype

    def cast(self, value, dtype, path, schema=None, field=None):
        """``value`` cast to ``dtype``; SchemaEvolutionError if a value would change.

        Under ``casting="unsafe"`` values may change (the explicit opt-in);
        under every other rule a cast must keep each value (``_casting``):
        ``int64 -> int16`` of 70000, or ``float64 -> float32`` of 1e300, is
        refused, naming the first value that would change.
        """
        src = np.asarray(value)
        if self.casting == "unsafe" or np.can_cast(src.dtype, dtype, "safe"):
            with quiet_cast():  # "unsafe" was asked for; a safe cast warns of nothing
                out = src.astype(dtype)
        else:
            out, where = cast_checked(src, dtype)
            if where is not None:
                saved = dtype_text(src.dtype)
                raise SchemaEvolutionError(
                    f"{path}: casting {saved} -> {dtype_text(dtype)} would change values "
                    f"({describe_change(src, dtype, where)}); casting={self.casting!r} "
                    "allows only casts that keep every value: pass casting='unsafe' to "
                    "accept changed values", schema=schema, field=field, path=path, saved=saved, expected=dtype_text(dtype))
        return out if isinstance(value, np.ndarray) else out[()]

    # -- filling new fields ------------------------------------------------

    def fill(self, plan, j, leading, path, tensors=False):
        """The value of new field ``j``; ``tensors``: the buffer holds torch tensors."""
        value = self._fill(plan, j, leading, path)
        if tensors and isinstance(value, np.ndarray):
            return torch_if_loaded().from_numpy(value)   # like the buffer's other fields
        return value

    def _spend(self, nbytes, where, target_name, name):
        """Count ``nbytes`` of new fields against the budget; FillLimitError beyond it."""
        if self.fill_budget is None:
            return
        self.fill_budget -= nbytes
        if self.fill_budget < 0:
            raise FillLimitError(
                f"{where}: filling it would allocate {nbytes:,} bytes, more than the file "
                "justifies (new fields may take at most the file's size, or 64 MiB); its "
                "leading shape comes from the file. Load without schemas= and call "
                "namedschema.upgrade on data you trust", schema=target_name, field=name,
                path=where.split(":")[0])

    def _fill(self, plan, j, leading, path):
        default = plan.fills[j]
        target_name, name = stored_typename(plan.target), plan.target._fields[j]
        if not plan.array or default is None:
            return default
        where = f"{path}: new field {target_name}.{name}"
        if callable(default) and not isinstance(default, type | np.ndarray | np.generic):
            if leading is not None:  # at least a byte per element, before the call
                self._spend(math.prod(leading), where, target_name, name)
            if leading is None:
                raise SchemaEvolutionError(
                    f"{where}: its default is a callable, but the saved instance holds "
                    "no array or number to take the leading shape from",
                    schema=target_name, field=name, path=path)
            try:
                value = default(leading)
            except Exception as exc:
                raise SchemaEvolutionError(
                    f"{where}: the default callable failed for leading shape "
                    f"{leading}: {type(exc).__name__}: {exc}",
                    schema=target_name, field=name, path=path) from exc
            shape = _leaf_shape(value)
            if shape is not None and shape[:len(leading)] != leading:
                raise SchemaEvolutionError(
                    f"{where}: the default callable returned shape {shape} for "
                    f"leading shape {leading}", schema=target_name, field=name,
                    path=path, saved=shape, expected=leading)
            return value
        if leading is None or not isinstance(default, (*_NUMBERS, np.ndarray, np.generic)):
            return default
        element = np.asarray(default)
        if element.dtype.hasobject:
            return default
        if not leading:
            return default if not isinstance(default, np.ndarray) else element.copy()
        full_shape = leading + element.shape
        self._spend(math.prod(full_shape) * element.dtype.itemsize, where, target_name, name)
        if not element.any():  # zeros: let the kernel hand out zero pages lazily
            return np.zeros(full_shape, dtype=element.dtype)
        return np.full(full_shape, element, dtype=element.dtype)

    def leading_shape(self, plan, saved_values, hint):
        """The saved array tuple's leading shape (None when nothing tells it).

        Every array (and number) of an array tuple starts with the leading
        shape, so it is a prefix of ``common``, the longest common prefix of
        their shapes (nested instances included, no longer than the fewest
        dimensions). A field whose current schema declares an element shape
        that its saved shape ends with implies the rest as leading shape.
        Taken in order: the enclosing array tuple's (``hint``); the one most
        such fields imply (the longest on a tie); ``common`` itself.
        """
        shapes: list[Any] = []
        _leaf_shapes(saved_values, shapes)
        common = _common_prefix(shapes)
        if common is None:
            return hint
        if hint is not None and common[:len(hint)] == hint:
            return hint
        implied = []
        for j, (_dtype, shape) in (plan.declared.items() if plan else ()):
            src = plan.sources[j]
            if shape is None:
                continue
            saved = None if src is None else _leaf_shape(saved_values[src])
            if saved is not None and len(shape) <= len(saved) \
                    and saved[len(saved) - len(shape):] == shape:
                lead = saved[:len(saved) - len(shape)]
                if common[:len(lead)] == lead:
                    implied.append(lead)
        if not implied:
            return common
        # The one most declared fields agree on; on a tie the longest (the
        # nearest to ``common``), so the odd field out is the one reported.
        return max(set(implied), key=lambda lead: (implied.count(lead), len(lead)))


