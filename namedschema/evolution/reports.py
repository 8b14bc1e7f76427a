"""Schema evolution, the schema side: what a schema declares, the report, the targets.

The names files store for classes, the dtype a field declares, the public
report types (re-exported by :mod:`namedschema.evolution`, which is their
home: their ``__module__`` says so) and the lookup of the current schema for
a saved typename. Used by ``_evolution_upgrader`` and ``_evolution_walk``.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core.pickling import is_registered_schema
from .._core.schema import declared_dtypes, has_class_body
from .._core.tree import is_named_class
from ..errors import SchemaEvolutionError, short_repr

__all__ = ["MISSING", "stored_typename", "field_dtype", "SchemaMapping",
           "KeptField", "UpgradeReport", "MappingRecord", "Targets"]

MISSING = object()  # "no default" (a default can be None)


# --------------------------------------------------------------------------
# What a schema declares
# --------------------------------------------------------------------------

def stored_typename(cls) -> str:
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

    def __init__(self, plan, path) -> None:
        self.plan, self.path = plan, path
        self.instances = self.classes = 0
        self.cast: dict[tuple[str, str, str], Any] = {}

    def freeze(self):
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

def _describe_class(cls) -> str:
    module = getattr(cls, "__module__", None)
    return f"{stored_typename(cls)}({', '.join(cls._fields)}) from {module}"


class Targets:
    """Current schemas by saved typename: explicit entries first, then the rest."""

    def __init__(self, schemas) -> None:
        self.explicit: dict[str, Any] = {}
        self.found: dict[str, Any] = {}
        self._add(schemas, "schemas", depth=0)

    def _add(self, spec, where, depth):
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

    def _found(self, cls) -> None:
        group = self.found.setdefault(stored_typename(cls), [])
        if not any(c is cls for c in group):
            group.append(cls)

    def lookup(self, typename, path):
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
