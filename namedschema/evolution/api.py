"""Schema evolution: map saved schema instances onto the schemas of today's code.

A checkpoint or pickle carries its own schema definitions, so after the code
changed (a field added to the replay samples, one removed, a dtype widened) it
still loads, but as the *old* types. :func:`upgrade` walks a loaded structure
and rebuilds every schema instance as an instance of the current schema with
the same typename (or the one an explicit mapping names), field by field, by
name. The rules are written out in ``docs/evolution.rst``:

* a field the current schema has and the saved data lacks is filled from the
  current schema's default (for an array tuple, broadcast to the instance's
  leading shape, or made by a callable that receives that shape);
* a saved field the current schema lacks is an error, or dropped
  (``extra="ignore"``), or dropped and handed back in the report
  (``extra="keep"``);
* where the current schema declares a field's dtype (a numpy-typed default
  such as ``np.float32(0)``), a saved array of another dtype or element shape
  is refused unless ``casting`` (numpy's rule names) allows the cast.

Unchanged fields keep the very same array objects (memory-mapped arrays stay
mapped, views stay views). Nothing the caller holds is modified unless the
whole structure upgrades without error.

upgrade         map a structure's schema instances to current schemas
upgrader        the same with options checked up front (used by ``load``)
UpgradeReport   what an upgrade mapped (``upgrade(..., report=True)``)
SchemaMapping   one saved schema and the current schema it became
KeptField       one saved field kept aside by ``extra="keep"``
field_dtype     the dtype and element shape a schema declares for a field

The machinery lives beside this module: ``reports`` (what a schema declares,
the report types, the current schemas by typename), ``conversion`` (one saved
class onto its target) and ``walk`` (the pass over a structure).
"""

from __future__ import annotations

import logging
import types
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol, get_args, overload

from ..errors import SchemaEvolutionError, short_repr
from .conversion import Upgrader
from .reports import (
    KeptField,
    SchemaMapping,
    Targets,
    UpgradeReport,
    field_dtype,
    stored_typename,
)
from .walk import Walk, check_aliases

__all__ = ["upgrade", "upgrader", "UpgradeReport", "SchemaMapping", "KeptField", "field_dtype",
           "ExtraChoice", "CastingChoice", "SchemaSpec", "UpgradeFunction",
           "EXTRA_CHOICES", "CASTING_CHOICES"]

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


def _check_defaults(defaults):
    if defaults is None:
        return {}
    if not isinstance(defaults, Mapping):
        raise TypeError("upgrade: defaults must be a mapping of 'Typename.field' to a "
                        f"value or callable, got {short_repr(defaults)}")
    out = {}
    for key, value in defaults.items():
        if not isinstance(key, str) or key.count(".") != 1:
            raise TypeError("upgrade: defaults keys must read 'Typename.field', "
                            f"got {short_repr(key)}")
        out[key] = value
    return out


def _check_defaults_name_fields(fills, targets):
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
