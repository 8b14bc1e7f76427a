"""Exceptions raised by namedschema.

Every class also subclasses the builtin exception it refines, so code that
already catches ``ValueError`` / ``TypeError`` / ``IndexError`` keeps working.

NamedSchemaError        base of everything namedschema raises on purpose
SchemaDefinitionError   a schema definition is invalid (ValueError)
SchemaClassError        a class statement cannot define a schema (also a TypeError)
SchemaConflictError     an unpickled schema disagrees with one this process has
StructureMismatchError  a value does not have the expected structure (TypeError)
FieldError              reading or writing a field failed; names schema and field
Field*Error             FieldError plus the builtin type of the failure (Index, Key, ...)
FormatError             a checkpoint file is not valid (ValueError)
UnsafeLoadError         a checkpoint needs pickle and allow_pickle was not given
BufferShapeError        buffer arrays disagree in leading dimensions (ValueError)
"""

from __future__ import annotations

import reprlib

__all__ = [
    "NamedSchemaError",
    "SchemaDefinitionError",
    "SchemaClassError",
    "SchemaConflictError",
    "StructureMismatchError",
    "FieldError",
    "FieldIndexError",
    "FieldKeyError",
    "FieldOverflowError",
    "FieldTypeError",
    "FieldValueError",
    "FormatError",
    "UnsafeLoadError",
    "BufferShapeError",
]

_short = reprlib.Repr()
_short.maxstring = 40
_short.maxother = 40


def short_repr(obj) -> str:
    """A bounded repr for messages (index arrays can be huge)."""
    return _short.repr(obj)


class NamedSchemaError(Exception):
    """Base class of the errors namedschema raises deliberately."""


class SchemaDefinitionError(NamedSchemaError, ValueError):
    """A typename, field name or default is invalid."""


class SchemaClassError(SchemaDefinitionError, TypeError):
    """A class statement cannot define a schema; a TypeError too, as with typing.NamedTuple."""


class SchemaConflictError(NamedSchemaError, ValueError):
    """An unpickled schema's id is taken by a different schema in this process."""


class StructureMismatchError(NamedSchemaError, TypeError):
    """A value does not have the structure a schema or buffer expects.

    Attributes:
        path: dotted location of the mismatch, such as ``Traj.obs.pos``.
        expected: what was expected there (text).
        got: what arrived (text).
    """

    def __init__(self, path: str, expected: str, got: str, detail: str = ""):
        self.path, self.expected, self.got = path, expected, got
        msg = f"{path}: expected {expected}, got {got}"
        super().__init__(msg + (f"; {detail}" if detail else ""))


class FieldError(NamedSchemaError):
    """Indexing or assigning one field of a named array tuple failed.

    Attributes:
        schema: typename of the outermost instance.
        path: field names from that instance down to the failing leaf.
        loc: the index that was used.
        written: names (dotted) of fields already written before the failure
            (assignments only; empty for reads).
    """

    def __init__(self, schema: str, path: tuple, loc, reason: str,
                 written: tuple = (), assigning: bool = False):
        self.schema, self.path, self.loc = schema, tuple(path), loc
        self.reason, self.written, self.assigning = reason, tuple(written), assigning
        # id() of the instance that raised it, so an enclosing array tuple can
        # find the failing field without indexing again.
        self.source_id: int | None = None
        where = ".".join((schema,) + self.path)
        if assigning:
            msg = f"{where}[{short_repr(loc)}]: cannot assign: {reason}"
            if self.written:
                msg += ("; partial assignment, fields already written: "
                        + ", ".join(self.written))
            else:
                msg += "; no field was written"
        else:
            msg = f"{where}: cannot index with {short_repr(loc)}: {reason}"
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.schema, self.path, self.loc, self.reason,
                             self.written, self.assigning))


class FieldIndexError(FieldError, IndexError):
    """A field failed with IndexError."""


class FieldKeyError(FieldError, KeyError):
    """A field failed with KeyError."""

    __str__ = Exception.__str__  # KeyError would quote the whole message


class FieldTypeError(FieldError, TypeError):
    """A field failed with TypeError (for example a None field assigned to)."""


class FieldValueError(FieldError, ValueError):
    """A field failed with ValueError (for example a shape mismatch)."""


class FieldOverflowError(FieldError, OverflowError, IndexError):
    """A field failed with OverflowError (an index too large for the array).

    Also an IndexError, as numpy reports most out-of-range indices.
    """


_FIELD_ERROR_FOR = (
    (OverflowError, FieldOverflowError),
    (IndexError, FieldIndexError),
    (KeyError, FieldKeyError),
    (TypeError, FieldTypeError),
    (ValueError, FieldValueError),
)


def field_error_class(exc: BaseException) -> type[FieldError]:
    """The FieldError subclass matching the builtin type of ``exc``."""
    for builtin, cls in _FIELD_ERROR_FOR:
        if isinstance(exc, builtin):
            return cls
    return FieldError


class FormatError(NamedSchemaError, ValueError):
    """A file is not a namedschema checkpoint, or is damaged or unsupported."""


class UnsafeLoadError(FormatError):
    """A checkpoint holds pickled objects and ``allow_pickle`` was not set."""


class BufferShapeError(NamedSchemaError, ValueError):
    """Buffer arrays disagree in their leading dimensions, or a shape is invalid."""
