"""Schema evolution: loading saved schemas into today's.

The reports of what changed, the per-field conversion plans, the walk that applies a
plan through nested data, and ``upgrade`` / ``upgrader``.
"""

from __future__ import annotations

import logging
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol, get_args, overload

import numpy as np

from .._core import tree
from .._core.pickling import is_registered_schema
from .._core.schema import declared_dtypes, has_class_body, is_namedarraytuple_class
from .._core.tree import (
    extent,
    is_named,
    is_named_class,
    is_tensor,
    join_path,
    memory_owner,
    overlap,
    torch_if_loaded,
)
from .._core.writes import cast_checked, describe_change, quiet_cast
from ..errors import SchemaEvolutionError, SizeLimitError, short_repr

if TYPE_CHECKING:
    import numpy.typing as npt

    # What a schema declares for a field: (dtype, element shape or None).
    _Declared = tuple[np.dtype[Any], tuple[int, ...] | None]

__all__ = ["MISSING", "stored_typename", "field_dtype", "SchemaMapping", "KeptField",
           "UpgradeReport", "MappingRecord", "Targets", "Plan", "Upgrader", "all_tensors",
           "dtype_text", "Walk", "check_aliases", "upgrade", "upgrader", "ExtraChoice",
           "CastingChoice", "SchemaSpec", "UpgradeFunction", "EXTRA_CHOICES", "CASTING_CHOICES"]


# ---------------------------------------- reports
#
# Schema evolution, the schema side: what a schema declares, the report, the targets.
#
# The names files store for classes, the dtype a field declares, the public
# report types (re-exported by :mod:`namedschema.evolution`, which is their
# home: their ``__module__`` says so) and the lookup of the current schema for
# a saved typename. Used by ``_evolution_upgrader`` and ``_evolution_walk``.

MISSING = object()  # "no default" (a default can be None)


# --------------------------------------------------------------------------
# What a schema declares
# --------------------------------------------------------------------------

def stored_typename(cls: type[Any]) -> str:
    """The name files store for ``cls``: a schema's typename, else the class name."""
    if is_registered_schema(cls):
        return str(cls.__dict__["_typename"])
    return cls.__name__


def field_dtype(schema: type[Any], field: str) -> tuple[np.dtype[Any], tuple[int, ...] | None] | None:
    """The ``(dtype, element shape)`` that ``schema`` declares for ``field``, or None.

    Two things declare a dtype. An annotation of a class-syntax schema
    (``reward: npt.NDArray[np.float32]``, or ``np.float32``) declares the
    dtype but no shape (the element shape is then None: not checked). A
    numpy-typed default declares both: a numpy scalar (``np.float32(0)``
    declares float32 and shape ``()``) or a numpy array (``np.zeros(3,
    np.int8)`` declares int8 and shape ``(3,)``). When both are present the
    annotation's dtype wins. Other defaults (Python numbers, None,
    callables) declare nothing.

    >>> import numpy as np, namedschema
    >>> S = namedschema.NamedArrayTupleSchema('S', 'obs reward', defaults=(np.float32(0),))
    >>> field_dtype(S, 'reward'), field_dtype(S, 'obs')
    ((dtype('float32'), ()), None)
    """
    cls: Any = schema
    if field not in cls._fields:
        raise KeyError(f"{stored_typename(cls)} has no field {field!r} "
                       f"(fields: {', '.join(cls._fields)})")
    dtype: np.dtype[Any] | None = None
    shape: tuple[int, ...] | None = None
    default = cls._field_defaults.get(field, MISSING)
    if isinstance(default, (np.ndarray, np.generic)) and not default.dtype.hasobject:
        dtype, shape = default.dtype, tuple(default.shape)
    annotated = declared_dtypes(schema).get(field) if has_class_body(schema) else None
    if annotated is not None:
        dtype = np.dtype(annotated)
    return None if dtype is None else (dtype, shape)


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class SchemaMapping:
    """One saved schema and the current schema its instances became.

    The ``changed`` property is true when fields were added, dropped, cast
    or reordered (not just the class swapped).

    Attributes:
        saved: the saved typename.
        saved_fields: the saved schema's fields, in saved order.
        schema: the current class the instances are now of.
        added: fields filled from defaults (the saved data lacked them).
        dropped: saved fields the current schema lacks (ignored or kept).
        cast: ``(field, saved dtype, current dtype)`` of every cast made.
        instances: how many instances were mapped.
        classes: how many references to the saved class itself were mapped.
        path: where the first instance (or class) was found.
    """

    saved: str
    saved_fields: tuple[str, ...]
    schema: Any
    added: tuple[str, ...]
    dropped: tuple[str, ...]
    cast: tuple[tuple[str, str, str], ...]
    instances: int
    classes: int
    path: str

    @property
    def changed(self) -> bool:
        """Whether anything but the class identity changed."""
        return bool(self.added or self.dropped or self.cast
                    or self.saved_fields != tuple(self.schema._fields))

    def __str__(self) -> str:
        target = stored_typename(self.schema)
        module = getattr(self.schema, "__module__", None)
        where = f" ({module})" if isinstance(module, str) else ""
        what = []
        if self.added:
            what.append("added " + ", ".join(self.added) + " (from defaults)")
        if self.dropped:
            what.append("dropped " + ", ".join(self.dropped))
        if self.cast:
            what.append("cast " + ", ".join(f"{f} {a}->{b}" for f, a, b in self.cast))
        if not what and self.saved_fields != tuple(self.schema._fields):
            what.append("fields reordered")
        count = []
        if self.instances:
            count.append(f"{self.instances} instance{'s' * (self.instances != 1)}")
        if self.classes:
            count.append(f"{self.classes} class reference{'s' * (self.classes != 1)}")
        return (f"{self.saved} -> {target}{where}: {', '.join(count) or 'nothing'}; "
                f"{'; '.join(what) or 'same fields'} (first at {self.path})")


@dataclass(frozen=True)
class KeptField:
    """A saved field the current schema lacks, kept aside by ``extra="keep"``.

    Attributes:
        path: where the instance was found, such as ``buffer.samples``.
        schema: the saved typename.
        field: the field's name.
        value: its value (upgraded like everything else).
    """

    path: str
    schema: str
    field: str
    value: object


@dataclass(frozen=True)
class UpgradeReport:
    """What :func:`namedschema.upgrade` did; ``str()`` gives one line per saved schema.

    ``kept_fields(path)`` returns the fields kept aside from the instance at
    ``path`` as a dict by name.

    Attributes:
        mappings: a :class:`SchemaMapping` per saved schema that met a current one.
        unmatched: saved typename -> path of the first instance, for schemas
            no current schema was given for (left as saved).
        kept: the :class:`KeptField` entries of ``extra="keep"``.
    """

    mappings: tuple[SchemaMapping, ...]
    unmatched: dict[str, str]
    kept: tuple[KeptField, ...]

    def kept_fields(self, path: str) -> dict[str, object]:
        """The fields kept aside from the instance at ``path``, by name."""
        return {k.field: k.value for k in self.kept if k.path == path}

    def __str__(self) -> str:
        lines = [f"upgrade: {len(self.mappings)} saved schema"
                 f"{'s' * (len(self.mappings) != 1)} mapped"]
        lines += [f"  {m}" for m in self.mappings]
        lines += [f"  {name}: no current schema, left as saved (first at {path})"
                  for name, path in self.unmatched.items()]
        if self.kept:
            lines.append(f"  kept aside: {len(self.kept)} field value"
                         f"{'s' * (len(self.kept) != 1)}, first "
                         f"{self.kept[0].schema}.{self.kept[0].field} at {self.kept[0].path}")
        return "\n".join(lines)


class MappingRecord:
    """Mutable counterpart of SchemaMapping while an upgrade runs."""

    def __init__(self, plan: Plan, path: str) -> None:
        self.plan, self.path = plan, path
        self.instances = self.classes = 0
        self.cast: dict[tuple[str, str, str], Any] = {}

    def freeze(self) -> SchemaMapping:
        """The record as a frozen :class:`SchemaMapping`."""
        plan = self.plan
        return SchemaMapping(
            saved=stored_typename(plan.saved), saved_fields=tuple(plan.saved._fields),
            schema=plan.target, added=plan.added, dropped=tuple(n for _i, n in plan.extras),
            cast=tuple(self.cast), instances=self.instances, classes=self.classes,
            path=self.path)


# --------------------------------------------------------------------------
# Finding the current schemas
# --------------------------------------------------------------------------

def _describe_class(cls: type[Any]) -> str:
    module = getattr(cls, "__module__", None)
    return f"{stored_typename(cls)}({', '.join(cls._fields)}) from {module}"


class Targets:
    """Current schemas by saved typename: explicit entries first, then the rest."""

    def __init__(self, schemas: SchemaSpec) -> None:
        self.explicit: dict[str, type[Any]] = {}
        self.found: dict[str, list[type[Any]]] = {}
        self._add(schemas, "schemas", depth=0)

    def _add(self, spec: Any, where: str, depth: int) -> None:
        if depth > 3:
            raise TypeError(f"upgrade: {where} is nested too deeply")
        if isinstance(spec, types.ModuleType):
            for value in list(vars(spec).values()):
                if is_named_class(value):
                    self._found(value)
        elif is_named_class(spec):
            self._found(spec)
        elif isinstance(spec, Mapping):
            for key, value in spec.items():
                if not isinstance(key, str):
                    raise TypeError(f"upgrade: schemas mapping keys must be saved "
                                    f"typenames (str), got {short_repr(key)}")
                if not is_named_class(value):
                    raise TypeError(f"upgrade: schemas[{key!r}] must be a schema "
                                    f"class, got {short_repr(value)}")
                self.explicit[key] = value
        elif isinstance(spec, Iterable) and not isinstance(spec, (str, bytes)):
            for i, item in enumerate(spec):
                self._add(item, f"{where}[{i}]", depth + 1)
        else:
            raise TypeError("upgrade: schemas must be a module, a schema class, a "
                            "mapping of saved typename to schema, or a list of these; "
                            f"got {short_repr(spec)}")

    def _found(self, cls: type[Any]) -> None:
        group = self.found.setdefault(stored_typename(cls), [])
        if not any(c is cls for c in group):
            group.append(cls)

    def lookup(self, typename: str, path: str) -> type[Any] | None:
        """The target schema for saved ``typename`` at ``path``, None when there is none."""
        cls = self.explicit.get(typename)
        if cls is not None:
            return cls
        group = self.found.get(typename)
        if not group:
            return None
        if len(group) > 1:
            raise SchemaEvolutionError(
                f"{path}: saved schema {typename!r} matches {len(group)} current "
                f"schemas ({'; '.join(_describe_class(c) for c in group)}); name the "
                f"one to use: schemas={{{typename!r}: ...}}", schema=typename, path=path)
        return group[0]


# Public types: their home is namedschema.evolution (pickles and reprs name it).
for _cls in (SchemaMapping, KeptField, UpgradeReport):
    _cls.__module__ = "namedschema.evolution"
del _cls


# ---------------------------------------- conversion
#
# Schema evolution, per class: how one saved class becomes its current schema.
#
# :class:`Plan` maps fields by name (sources, fills, dropped extras, declared
# dtypes); :class:`Upgrader` makes the plans, checks and casts field values
# and builds instances. ``_evolution_walk`` drives it over a structure.

_NUMBERS = (bool, int, float, complex)


# --------------------------------------------------------------------------
# The plan for one saved class
# --------------------------------------------------------------------------

class Plan:
    """How instances of one saved class become instances of its target."""

    def __init__(self, saved: type[Any], target: type[Any], sources: tuple[int | None, ...],
                 fills: dict[int, Any], extras: tuple[tuple[int, str], ...],
                 declared: dict[int, _Declared]) -> None:
        self.saved, self.target = saved, target
        self.sources = sources      # per target field: saved index, or None (fill)
        self.fills = fills          # target field index -> default
        self.extras = extras        # (saved index, name) of saved fields dropped
        self.declared = declared    # target field index -> (dtype, element shape)
        self.added = tuple(target._fields[j] for j in sorted(fills))
        self.array = is_namedarraytuple_class(target)
        self.identity = (saved is target and not fills and not extras)


def _tensor_dtype(tensor: Any) -> np.dtype[Any] | None:
    """The numpy dtype of a tensor's dtype, or None (bfloat16 has none)."""
    try:
        return np.dtype(str(tensor.dtype).removeprefix("torch."))
    except TypeError:
        return None


def _array_leaves(values: Iterable[Any], out: list[Any], depth: int = 0) -> None:
    for v in values:
        if isinstance(v, np.ndarray) or is_tensor(v):
            out.append(v)
        elif depth < 50 and is_named(v):
            _array_leaves(v, out, depth + 1)


def all_tensors(values: Iterable[Any]) -> bool:
    """Whether the array leaves of an instance are torch tensors (at least one, no ndarray)."""
    leaves: list[Any] = []
    _array_leaves(values, leaves)
    return bool(leaves) and all(is_tensor(v) for v in leaves)


def _leaf_shape(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, np.ndarray | np.generic) or is_tensor(value):
        return tuple(value.shape)
    if type(value) in _NUMBERS:
        return ()
    return None


def _leaf_shapes(values: Iterable[Any], out: list[tuple[int, ...]], depth: int = 0) -> None:
    for v in values:
        shape = _leaf_shape(v)
        if shape is not None:
            out.append(shape)
        elif depth < 50 and is_named(v):
            _leaf_shapes(v, out, depth + 1)


def _common_prefix(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    if not shapes:
        return None
    ndim = min(len(s) for s in shapes)
    prefix: list[int] = []
    for i in range(ndim):
        if any(s[i] != shapes[0][i] for s in shapes):
            break
        prefix.append(shapes[0][i])
    return tuple(prefix)


def dtype_text(dtype: npt.DTypeLike) -> str:
    """A dtype's name as reports show it (byte order only where it matters)."""
    dtype = np.dtype(dtype)
    return dtype.name if dtype.isnative or dtype.itemsize == 1 else dtype.str


class Upgrader:
    """The conversion plans of one upgrade: saved schema classes to their targets."""

    def __init__(self, targets: Targets, extra: ExtraChoice, casting: CastingChoice,
                 defaults: Mapping[str, Any], fill_budget: int | None = None) -> None:
        self.targets, self.extra, self.casting = targets, extra, casting
        self.defaults = defaults
        self.fill_budget = fill_budget  # bytes all new fields may take (None: unbounded)
        self.plans: dict[int, Plan | None] = {}   # id(saved class) -> Plan or None
        self._alive: list[Any] = []      # keeps saved classes alive while ids are keys
        self.records: dict[int, MappingRecord] = {}   # id(saved class) -> MappingRecord
        self.unmatched: dict[str, str] = {}
        self.kept: list[KeptField] = []

    # -- plans -------------------------------------------------------------

    def plan(self, cls: type[Any], path: str) -> Plan | None:
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
        declared: dict[int, _Declared] = {}
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

    def record(self, plan: Plan, path: str) -> MappingRecord:
        """The report record of ``plan``, made on first use."""
        rec = self.records.get(id(plan.saved))
        if rec is None:
            rec = self.records[id(plan.saved)] = MappingRecord(plan, path)
        return rec

    # -- declared dtypes ---------------------------------------------------

    def check_declared(self, plan: Plan, j: int, value: Any, path: str,
                       leading: tuple[int, ...] | None) -> np.dtype[Any] | None:
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
        assert saved_dtype is not None   # an array's dtype (a tensor raised above)
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

    def cast(self, value: Any, dtype: np.dtype[Any], path: str, schema: str | None = None,
             field: str | None = None) -> Any:
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

    def fill(self, plan: Plan, j: int, leading: tuple[int, ...] | None, path: str,
             tensors: object = False) -> Any:
        """The value of new field ``j``; ``tensors``: the buffer holds torch tensors."""
        value = self._fill(plan, j, leading, path)
        if tensors and isinstance(value, np.ndarray):
            return torch_if_loaded().from_numpy(value)   # like the buffer's other fields
        return value

    def _spend(self, nbytes: int, where: str, target_name: str, name: str) -> None:
        """Count ``nbytes`` of new fields against the budget; SizeLimitError beyond it."""
        if self.fill_budget is None:
            return
        self.fill_budget -= nbytes
        if self.fill_budget < 0:
            raise SizeLimitError(
                f"{where}: filling it would allocate {nbytes:,} bytes, more than the file "
                "justifies (new fields may take at most the file's size, or 64 MiB); its "
                "leading shape comes from the file. Load without schemas= and call "
                "namedschema.upgrade on data you trust", schema=target_name, field=name,
                path=where.split(":", maxsplit=1)[0])

    def _fill(self, plan: Plan, j: int, leading: tuple[int, ...] | None, path: str) -> Any:
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

    def leading_shape(self, plan: Plan | None, saved_values: Sequence[Any],
                      hint: tuple[int, ...] | None) -> tuple[int, ...] | None:
        """The saved array tuple's leading shape (None when nothing tells it).

        Every array (and number) of an array tuple starts with the leading
        shape, so it is a prefix of ``common``, the longest common prefix of
        their shapes (nested instances included, no longer than the fewest
        dimensions). A field whose current schema declares an element shape
        that its saved shape ends with implies the rest as leading shape.
        Taken in order: the enclosing array tuple's (``hint``); the one most
        such fields imply (the longest on a tie); ``common`` itself.
        """
        shapes: list[tuple[int, ...]] = []
        _leaf_shapes(saved_values, shapes)
        common = _common_prefix(shapes)
        if common is None:
            return hint
        if hint is not None and common[:len(hint)] == hint:
            return hint
        implied: list[tuple[int, ...]] = []
        for j, (_dtype, shape) in (plan.declared.items() if plan else ()):
            src = typing.cast(Plan, plan).sources[j]   # (declared items: there is a plan)
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


# ---------------------------------------- walk
#
# Schema evolution over a structure: the walk that finds and rebuilds instances.
#
# :class:`Walk` visits containers and objects once each (cycles and shared
# objects kept), first dry (checks, no change) then building; :func:`check_aliases`
# refuses casts that views of the cast arrays would not follow.

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

    def convert(self, obj: Any, path: str, hint: tuple[int, ...] | None = None) -> Any:
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

    def assign(self, container: Any, key: Any, old: object, new: object) -> None:
        """Queue writing ``new`` into ``container[key]`` if it differs from ``old``."""
        if new is not old and not self.dry:
            self.writes.append(lambda c=container, k=key, n=new: c.__setitem__(k, n))

    def immutable(self, obj: Any, path: str, rebuild: Callable[[Any, str], Any]) -> Any:
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

    def rebuilt(self, obj: Any, path: str, node: tree.Node) -> Any:
        """A tuple or frozenset of converted items (``obj`` itself if none changed)."""
        items = list(node.items(obj))
        new = [self.convert(v, join_path(path, k)) for k, v in items]
        if all(a is b for a, (_k, b) in zip(new, items, strict=True)):
            return obj
        return node.rebuild(obj, new)

    def array(self, arr: np.ndarray, path: str) -> Any:
        """The array at ``path``: recorded on a dry pass, cast as planned otherwise."""
        if self.dry:
            self.leaves.append((arr, path))
            self.memo[id(arr)] = arr
            return arr
        entry = self.casts.get(id(arr))
        result = arr if entry is None else self.up.cast(arr, *entry[1:])
        self.memo[id(arr)] = result
        return result

    def schema_class(self, cls: type[Any], path: str) -> type[Any]:
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
            # (a Plan: up.plan finds the target that plan_target is)
            rec = up.record(typing.cast(Plan, plan), path or stored_typename(cls))
        rec.classes += 1
        return plan_target

    def instance(self, obj: Any, path: str, hint: tuple[int, ...] | None = None) -> Any:
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

    def note_cast(self, arr: np.ndarray, dtype: np.dtype[Any], path: str,
                  schema: str | None = None, field: str | None = None) -> None:
        """Plan casting ``arr`` to ``dtype``; refuse two different casts of one array."""
        entry = self.casts.get(id(arr))
        if entry is None:
            self.casts[id(arr)] = [arr, dtype, path, schema, field]
        elif entry[1] != dtype:
            raise SchemaEvolutionError(
                f"{path}: this array is also at {entry[2]}, where it would be cast to "
                f"{dtype_text(entry[1])}, not {dtype_text(dtype)}; one array cannot "
                "take two dtypes", path=path)


def check_aliases(casts: Mapping[int, Sequence[Any]], leaves: Iterable[tuple[Any, str]]
                  ) -> None:
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


def _refuse(path: str, leaf_path: str, what: str) -> NoReturn:
    raise SchemaEvolutionError(
        f"{path}: casting would copy this array, but {leaf_path} shares its memory "
        f"({what}) and would keep the old data; save the checkpoint with the new dtype "
        "instead, or drop the view", path=path)


# ---------------------------------------- api
#
# Schema evolution: map saved schema instances onto the schemas of today's code.
#
# A checkpoint or pickle carries its own schema definitions, so after the code
# changed (a field added to the replay samples, one removed, a dtype widened) it
# still loads, but as the *old* types. :func:`upgrade` walks a loaded structure
# and rebuilds every schema instance as an instance of the current schema with
# the same typename (or the one an explicit mapping names), field by field, by
# name. The rules are written out in ``docs/evolution.rst``:
#
# * a field the current schema has and the saved data lacks is filled from the
#   current schema's default (for an array tuple, broadcast to the instance's
#   leading shape, or made by a callable that receives that shape);
# * a saved field the current schema lacks is an error, or dropped
#   (``extra="ignore"``), or dropped and handed back in the report
#   (``extra="keep"``);
# * where the current schema declares a field's dtype (a numpy-typed default
#   such as ``np.float32(0)``), a saved array of another dtype or element shape
#   is refused unless ``casting`` (numpy's rule names) allows the cast.
#
# Unchanged fields keep the very same array objects (memory-mapped arrays stay
# mapped, views stay views). Nothing the caller holds is modified unless the
# whole structure upgrades without error.
#
# upgrade         map a structure's schema instances to current schemas
# upgrader        the same with options checked up front (used by ``load``)
# UpgradeReport   what an upgrade mapped (``upgrade(..., report=True)``)
# SchemaMapping   one saved schema and the current schema it became
# KeptField       one saved field kept aside by ``extra="keep"``
# field_dtype     the dtype and element shape a schema declares for a field
#
# The machinery lives beside this module: ``reports`` (what a schema declares,
# the report types, the current schemas by typename), ``conversion`` (one saved
# class onto its target) and ``walk`` (the pass over a structure).

_log = logging.getLogger("namedschema.evolution")

ExtraChoice = Literal["error", "ignore", "keep"]
"""What to do with a saved field today's schema lacks (``upgrade(..., extra=)``)."""
CastingChoice = Literal["no", "equiv", "safe", "same_kind", "unsafe"]
"""numpy's casting rule for a saved dtype that differs (``upgrade(..., casting=)``)."""
EXTRA_CHOICES: tuple[ExtraChoice, ...] = get_args(ExtraChoice)
CASTING_CHOICES: tuple[CastingChoice, ...] = get_args(CastingChoice)

SchemaSpec = types.ModuleType | type[Any] | Mapping[str, type[Any]] | Iterable[
    types.ModuleType | type[Any] | Mapping[str, type[Any]]]
"""The current schemas: a module, a schema class, saved typename -> schema, or a list."""


class UpgradeFunction(Protocol):
    """What :func:`upgrader` returns: ``upgrade`` with its options already checked."""

    def __call__(self, obj: Any, report: bool = False,
                 fill_budget: int | None = None) -> Any:
        """Convert ``obj`` (optionally with a report), as :func:`upgrade` does."""


def _check_options(extra: object, casting: object) -> None:
    if extra not in EXTRA_CHOICES:
        raise ValueError(f"upgrade: extra must be one of {EXTRA_CHOICES}, got {extra!r}")
    if casting not in CASTING_CHOICES:
        raise ValueError(f"upgrade: casting must be one of {CASTING_CHOICES}, "
                         f"got {casting!r}")


def _check_defaults(defaults: object) -> dict[str, Any]:
    if defaults is None:
        return {}
    if not isinstance(defaults, Mapping):
        raise TypeError("upgrade: defaults must be a mapping of 'Typename.field' to a "
                        f"value or callable, got {short_repr(defaults)}")
    out: dict[str, Any] = {}
    for key, value in defaults.items():
        if not isinstance(key, str) or key.count(".") != 1:
            raise TypeError("upgrade: defaults keys must read 'Typename.field', "
                            f"got {short_repr(key)}")
        out[key] = value
    return out


def _check_defaults_name_fields(fills: Iterable[str], targets: Targets) -> None:
    """Refuse ``defaults`` keys that name no field of a current schema (typos)."""
    known = {(stored_typename(c), f) for c in targets.explicit.values() for f in c._fields}
    known |= {(name, f) for name, group in targets.found.items()
              for c in group for f in c._fields}
    for key in fills:
        typename, field = key.split(".")
        if (typename, field) not in known:
            raise ValueError(f"upgrade: defaults[{key!r}] names no field of the current "
                             f"schemas given (a typo, or a schema missing from schemas=?)")


@overload
def upgrade(obj: Any, schemas: SchemaSpec, *, extra: ExtraChoice = ...,
            casting: CastingChoice = ..., defaults: Mapping[str, Any] | None = ...,
            report: Literal[False] = ...) -> Any: ...
@overload
def upgrade(obj: Any, schemas: SchemaSpec, *, extra: ExtraChoice = ...,
            casting: CastingChoice = ..., defaults: Mapping[str, Any] | None = ...,
            report: Literal[True]) -> tuple[Any, UpgradeReport]: ...
@overload
def upgrade(obj: Any, schemas: SchemaSpec, *, extra: ExtraChoice = ...,
            casting: CastingChoice = ..., defaults: Mapping[str, Any] | None = ...,
            report: bool) -> Any: ...


def upgrade(obj: Any, schemas: SchemaSpec, *, extra: ExtraChoice = "error",
            casting: CastingChoice = "no", defaults: Mapping[str, Any] | None = None,
            report: bool = False) -> Any:
    """Rebuild every schema instance in ``obj`` as an instance of a current schema.

    Saved schemas are matched to current ones by typename (the typename the
    file stores, whatever the variable is called), or through an explicit
    mapping; fields are matched by name. Schema instances inside named
    tuples, lists, tuples, dicts, sets and the ``__dict__`` of ordinary
    objects are found (lists, dicts and objects are updated in place, the
    rest rebuilt). Unchanged fields keep their very objects, so memory-mapped
    arrays stay mapped and views stay views. Nothing is modified unless the
    whole structure upgrades: errors are raised before the first change.

    Args:
        obj: what ``load`` or ``pickle.load`` returned (or any structure).
        schemas: the current schemas: a module (every schema class among its
            attributes counts), a schema class, a mapping of saved typename to
            current schema (for renames and to settle ambiguity; it wins over
            the rest), or a list of these.
        extra: what to do with a saved field the current schema lacks:
            ``"error"`` (raise :class:`~namedschema.errors.SchemaEvolutionError`),
            ``"ignore"`` (drop it) or ``"keep"`` (drop it from the instance
            and return it in the report's ``kept``).
        casting: numpy's casting rule for a saved array whose dtype differs
            from the one the current schema declares: ``"no"`` (the default:
            refuse), ``"equiv"``, ``"safe"``, ``"same_kind"`` or ``"unsafe"``.
            Under every rule but ``"unsafe"`` a cast must also keep every
            value: ``int64 -> int16`` of 70000 (wraps to 4464) or
            ``float64 -> float32`` of 1e300 (overflows to inf) is refused,
            naming the value; ``"unsafe"`` is the explicit opt-in to changed
            values (float rounding to the new precision is not a change).
            A cast copies the array (so it reads a memory-mapped one). Shapes
            are never changed, and an array that another array or a torch
            tensor in the structure views is never cast.
        defaults: extra defaults for fields the saved data lacks, as
            ``{"Typename.field": value}``; they win over the schema's own.
        report: also return an :class:`~namedschema.evolution.UpgradeReport`.

    Returns:
        The upgraded structure (the same object for lists, dicts and other
        mutable objects), or ``(structure, report)`` with ``report=True``.
        The report is also logged on the ``namedschema.evolution`` logger at
        INFO level.

    Raises:
        SchemaEvolutionError: a current field is missing from the saved data
            and has no default; a saved field is missing from the current
            schema and ``extra="error"``; a saved dtype or shape differs from
            the declared one and ``casting`` does not allow the cast; a
            typename matches several current schemas, or another rule cannot
            be followed.
        ValueError: an unknown ``extra``/``casting``, or a ``defaults`` key
            that names no field of the current schemas.
        TypeError: ``schemas`` or ``defaults`` has the wrong form.

    >>> import numpy as np, namedschema
    >>> Old = namedschema.NamedArrayTupleSchema('Samples', 'obs reward')
    >>> buf = Old(np.zeros((5, 2), np.uint8), np.zeros(5, np.float32))
    >>> Samples = namedschema.NamedArrayTupleSchema(
    ...     'Samples', 'obs reward timeout', defaults=(np.bool_(False),))
    >>> new, rep = namedschema.upgrade({'buf': buf}, [Samples], report=True)
    >>> type(new['buf']) is Samples, new['buf'].timeout.shape, new['buf'].obs is buf.obs
    (True, (5,), True)
    >>> print(rep)  # doctest: +ELLIPSIS
    upgrade: 1 saved schema mapped
      Samples -> Samples (...): 1 instance; added timeout (from defaults) (first at buf)
    """
    return upgrader(schemas, extra=extra, casting=casting, defaults=defaults)(
        obj, report=report)


def upgrader(schemas: SchemaSpec, *, extra: ExtraChoice = "error",
             casting: CastingChoice = "no",
             defaults: Mapping[str, Any] | None = None) -> UpgradeFunction:
    """Check the options of :func:`upgrade` now; return ``apply(obj, report=False)``.

    ``load(path, schemas=...)`` uses it to refuse bad options before reading
    a file. ``apply`` returns what ``upgrade`` would with the same options.

    Raises:
        ValueError: ``extra`` or ``casting`` is not one of the choices.
        TypeError: ``schemas`` or ``defaults`` has the wrong form.
    """
    _check_options(extra, casting)
    targets, fills = Targets(schemas), _check_defaults(defaults)
    _check_defaults_name_fields(fills, targets)

    def apply(obj: Any, report: bool = False, fill_budget: int | None = None) -> Any:
        up = Upgrader(targets, extra, casting, fills, fill_budget)
        casts: dict[int, Any] = {}
        try:
            dry = Walk(up, True, casts)
            dry.convert(obj, "")
            check_aliases(casts, dry.leaves)
            build = Walk(up, False, casts)
            result = build.convert(obj, "")
        except RecursionError:
            raise SchemaEvolutionError(
                "upgrade: the structure is nested too deeply") from None
        for write in build.writes:
            write()
        rep = UpgradeReport(mappings=tuple(r.freeze() for r in up.records.values()),
                            unmatched=dict(up.unmatched), kept=tuple(up.kept))
        if _log.isEnabledFor(logging.INFO):
            for line in str(rep).splitlines():
                _log.info("%s", line)
        return (result, rep) if report else result

    return apply
