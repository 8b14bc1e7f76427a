"""Instances: the two base classes, and text safe to print.

Standard library only (``import namedschema`` loads it).

Printable text
--------------

Text from untrusted files made safe to print on a terminal.

A name, key or reason read from a checkpoint may hold control characters
(ESC sequences, carriage returns, bidi overrides) that rewrite what a terminal
shows. Every such string passes through :func:`printable` before it is put
in a message or a report.

printable   escape every character ``str.isprintable`` rejects, as ``repr`` does

The base classes
----------------

Instance behaviour shared by every schema: the two base classes.

NamedTuple        base of every instance a NamedTupleSchema creates
NamedArrayTuple   base of every instance a NamedArrayTupleSchema creates; adds
                  indexing and assignment applied to every field at once

Per-schema pieces that must know the fields (``__new__``, ``_make`` and the
field getters) are made in ``schema``, and unrolled indexing for array tuples
there too; everything here is generic and shared, so a schema class adds
no per-instance state: instances are plain tuples with ``__slots__ = ()``,
exactly as large as a namedtuple's. The error reporters at the end run only
after a failure, so the fast paths never pay for the detailed messages.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from types import GenericAlias
from typing import TYPE_CHECKING, Any, NoReturn, Self, SupportsIndex, dataclass_transform

from ..errors import FieldError, field_error_class

__all__ = ["NamedArrayTuple", "NamedTuple", "printable", "SchemaBaseMeta"]


# --------------------------------------------------------------------------
# Printable text
# --------------------------------------------------------------------------

def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every non-printable character escaped (``\\x1b``, ``\\n``, ``\\u202e``).

    Printable text (spaces included) is returned unchanged, so ordinary
    names read as they are; backslashes are left alone, so escaping twice
    changes nothing more. With ``keep_newlines``, ``\\n`` is kept (for
    multi-line reports whose lines are escaped already).

    >>> printable("obs\\x1b[2K\\rpos")
    'obs\\\\x1b[2K\\\\rpos'
    >>> printable("a\\nb", keep_newlines=True)
    'a\\nb'
    """
    text = str(text)
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable() or (keep_newlines and char == "\n"):
            out.append(char)
        else:
            out.append(repr(char)[1:-1])
    return "".join(out)


# --------------------------------------------------------------------------
# The base classes
# --------------------------------------------------------------------------

_tuple_new = tuple.__new__
_tuple_getitem = tuple.__getitem__


class SchemaBaseMeta(type):
    """Metaclass of the base classes; routes class statements that subclass them.

    ``class Samples(NamedArrayTuple): ...`` must make a schema, not a plain
    tuple subclass. ``_classdef`` installs the builder in ``class_statement``
    (so this module never imports it); schema metaclasses derive from this
    one, so subclasses of schemas pass through it as well.
    """

    #: ``(mcls, name, bases, namespace, keywords) -> the new class``, or None
    class_statement: Callable[[type, str, tuple[type, ...], dict[str, Any], dict[str, Any]],
                              SchemaBaseMeta] | None = None

    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], /,
                **kwargs: Any) -> SchemaBaseMeta:
        build = SchemaBaseMeta.class_statement
        if build is None:  # the core's own base classes, before _classdef loads
            return super().__new__(mcls, name, bases, namespace, **kwargs)
        return build(mcls, name, bases, namespace, kwargs)

    def __init__(cls, *args: object, **kwargs: object) -> None:
        # Everything happens in __new__; type.__init__ would reject the keywords
        # of the schema factories (and type checkers read the schema
        # metaclasses' __new__ only while __init__ is not defined beside it).
        pass


# frozen_default: fields are read-only, as on any tuple. Type checkers then
# read a class body's annotations as the fields and check constructor calls
# against them; at run time ``_classdef`` builds the schema.
@dataclass_transform(frozen_default=True)
class NamedTuple(tuple[Any, ...], metaclass=SchemaBaseMeta):
    """Base class of all instances made by a ``NamedTupleSchema``.

    Use it in ``isinstance`` checks: ``isinstance(x, NamedTuple)`` is true
    for instances of every schema, array schemas included. Subclassing it
    with a class statement defines a schema (see ``_classdef``).
    """

    __slots__ = ()
    if TYPE_CHECKING:
        # Declared for type checkers only, so that typing.get_type_hints of a
        # schema lists its fields only (as for typing.NamedTuple).
        _fields: tuple[str, ...]
        _field_defaults: dict[str, Any]
        _typename: str
    _fields = ()
    _field_defaults = {}
    _typename = "NamedTuple"

    if TYPE_CHECKING:
        # Seen only by type checkers: every schema's real ``__new__`` is generated
        # with its fields, and the dataclass_transform ``__init__`` carries the
        # signature they check calls against.
        def __new__(cls, *args: Any, **kwargs: Any) -> Self: ...

        @classmethod
        def _make(cls, iterable: Any) -> Self: ...

    def _replace(self, /, **kwds: Any) -> Self:
        """Return a new instance with the given fields replaced."""
        result = self._make(map(kwds.pop, self._fields, self))
        if kwds:
            raise ValueError(f"{self._typename}._replace: unexpected field "
                             f"names {list(kwds)!r} (fields: {', '.join(self._fields)})")
        return result

    def _asdict(self) -> dict[str, Any]:
        """Return a new dict mapping field names to their values."""
        return dict(zip(self._fields, self, strict=True))

    def __getnewargs__(self) -> tuple[Any, ...]:
        # pickle and copy rebuild instances through ``__new__`` with these.
        return tuple(self)

    def __setstate__(self, state: object) -> None:
        # An instance is its values, all given to ``__new__``: it has no state.
        # A crafted pickle's BUILD could otherwise set ``__class__`` and relabel
        # a 1-value instance as a 3-field schema (torch's weights-only loader
        # calls this too).
        if state:
            raise TypeError(f"{type(self).__name__} instances have no state to set; "
                            f"got {type(state).__name__}")

    def __repr__(self) -> str:
        return (self.__class__.__name__ + "("
                + ", ".join([f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True)])
                + ")")

    def __class_getitem__(cls, item: Any) -> GenericAlias:
        """``Schema[int, str]``: a generic alias, as for tuple (implicitly a classmethod)."""
        return GenericAlias(cls, item)


def _locate_read_failure(nat: NamedTuple, loc: object, exc: Exception
                         ) -> tuple[tuple[str, ...], Exception] | tuple[None, None]:
    """Find the field whose indexing failed; return (path, exception) or (None, None).

    A nested array tuple that failed has already raised a FieldError that
    records which instance raised it, so its field is found by identity. Only
    leaf fields are indexed again: re-running nested ones would repeat the
    search at every level (exponential in the depth).
    """
    if isinstance(exc, FieldError):
        for name, value in zip(nat._fields, nat, strict=False):
            if value is not None and id(value) == exc.source_id:
                return (name,) + exc.path, exc
        return None, None
    for name, value in zip(nat._fields, nat, strict=False):
        if value is None or isinstance(value, NamedArrayTuple):
            continue
        try:
            value[loc]
        except Exception as leaf_exc:  # reported with its field
            return (name,), leaf_exc
    return None, None


class NamedArrayTuple(NamedTuple):
    """Base class of all instances made by a ``NamedArrayTupleSchema``.

    ``x[loc]`` applies ``loc`` to every field and returns a new instance of the
    same schema (``None`` fields stay ``None``; nested array tuples recurse).
    ``x[loc] = value`` writes field by field when ``value`` has the same
    fields, and otherwise writes ``value`` into every non-``None`` field.
    A write casts at most by numpy's ``same_kind`` rule and never changes a
    value (an int64 ``300`` into a uint8 field, ``0.7`` into an int field);
    every field is checked before the first is written, so a refused write
    leaves ``x`` untouched, and a named tuple of other fields is refused.
    ``x.get(i)`` is plain tuple indexing, ``x.items()`` yields
    ``(name, value)`` pairs and ``'name' in x`` tests field names.
    """

    __slots__ = ()

    # Schemas with up to ``schema.MAX_UNROLLED_FIELDS`` fields get unrolled
    # versions of these two methods (see ``schema``); these loops serve the rest.
    def __getitem__(self, loc: Any) -> Self:
        try:
            return _tuple_new(self.__class__,
                              [None if v is None else v[loc] for v in self])
        except Exception as exc:
            raise_read_error(self, loc, exc)

    def __setitem__(self, loc: Any, value: Any) -> None:
        index = 0  # the loops below set it; the except clause reads it (B007 noqa)
        same_fields = isinstance(value, tuple) and \
            getattr(value, "_fields", None) == self._fields
        # Every field is checked before the first is written (see ``writes``).
        check_write(self, loc, value, same_fields)
        try:
            if same_fields:
                for index, (s, v) in enumerate(zip(self, value, strict=True)):  # noqa: B007
                    if s is not None or v is not None:
                        s[loc] = v
            else:
                for index, s in enumerate(self):  # noqa: B007
                    if s is not None:
                        s[loc] = value
        except Exception as exc:
            raise_write_error(self, index, loc, value, exc)

    def __contains__(self, key: object) -> bool:
        """True if ``key`` is a field name (like a dict, unlike a tuple)."""
        return key in self._fields

    def get(self, index: SupportsIndex) -> Any:
        """Plain tuple indexing: the value of field number ``index``."""
        return _tuple_getitem(self, index)

    def items(self) -> Iterator[tuple[str, Any]]:
        """Iterate over ``(field_name, value)`` pairs in field order."""
        return zip(self._fields, self, strict=True)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def raise_read_error(nat: NamedTuple, loc: object, exc: Exception) -> NoReturn:
    """Re-raise a failed ``nat[loc]`` as a FieldError naming the failing field."""
    path, cause = _locate_read_failure(nat, loc, exc)
    if path is None or cause is None:  # not a field's fault (a failing hook, RecursionError)
        raise exc
    root = cause.__cause__ or cause if isinstance(cause, FieldError) else cause
    reason = cause.reason if isinstance(cause, FieldError) else _describe(cause)
    error = field_error_class(root)(nat._typename, path, loc, reason)
    error.source_id = id(nat)
    raise error from root


#: (type of a Python number, field dtypes...) -> (lowest, highest, whole): a broadcast of
#: such a number within the bounds needs no full write check. Filled by the check
#: (``writes``), read by the generated ``__setitem__`` (``schema``).
SCALAR_RULES: dict[tuple[object, ...], tuple[float, float, bool]] = {}
_write_checker: Callable[[Any, Any, Any, bool], None] | None = None
_load_write_checker: Callable[[], Callable[[Any, Any, Any, bool], None]] | None = None


def install_write_check(load: Callable[[], Callable[[Any, Any, Any, bool], None]]) -> None:
    """Called by ``schema`` at import: ``load()`` gives the check, at the first write needing it."""
    global _load_write_checker
    _load_write_checker = load


def check_write(nat: Any, loc: Any, value: Any, same_fields: bool) -> None:
    """Refuse, before any field is written, a write that would change a value.

    The check (``writes``) needs numpy, which the core does not import: it is
    loaded at the first write that needs it once numpy is in the process. Until
    then no field or value can carry a dtype to keep (lists, Python numbers),
    and there is nothing to check.
    """
    global _write_checker
    checker = _write_checker
    if checker is None:
        if "numpy" not in sys.modules or _load_write_checker is None:
            return
        checker = _write_checker = _load_write_checker()
    checker(nat, loc, value, same_fields)


def raise_write_error(nat: NamedTuple, index: int, loc: object, value: object,
                      exc: Exception) -> NoReturn:
    """Re-raise a failed ``nat[loc] = value`` (at field ``index``) as a FieldError.

    The message lists the fields already written, since the assignment is
    not rolled back.
    """
    fields = nat._fields
    name = fields[index] if fields else "?"
    written = tuple(f for f, s in zip(fields[:index], nat, strict=False) if s is not None)
    if isinstance(exc, FieldError):  # a nested array tuple failed inside
        root = exc.__cause__ or exc
        written += tuple(f"{name}.{w}" for w in exc.written)
        error = field_error_class(root)(nat._typename, (name,) + exc.path, loc,
                                        exc.reason, written, assigning=True)
        error.source_id = id(nat)
        raise error from root
    if fields and _tuple_getitem(nat, index) is None:
        if isinstance(value, tuple) and getattr(value, "_fields", None) == fields:
            value = _tuple_getitem(value, index)
        reason = f"the field is None, so it cannot take a {type(value).__name__} value"
    else:
        reason = _describe(exc)
    error = field_error_class(exc)(nat._typename, (name,), loc, reason,
                                   written, assigning=True)
    error.source_id = id(nat)
    raise error from exc
