"""Exceptions raised by namedschema.

Every class also subclasses the builtin exception it refines, so code that
already catches ``ValueError`` / ``TypeError`` / ``IndexError`` keeps working.

NamedSchemaError        base of everything namedschema raises on purpose
SchemaError             a schema definition is invalid, or an unpickled one conflicts (ValueError)
SchemaClassError        a class statement cannot define a schema (a SchemaError, also a TypeError)
StructureMismatchError  a value does not have the expected structure (TypeError)
FieldError              reading or writing a field failed; also its builtin class (see below)
FormatError             a file is not a valid checkpoint of the kind expected, or needs pickle
SaveError               save refused a non-regular file, or a background writer failed (OSError)
NotDataError            save met a value that is not data and allow_pickle was not given
UnpicklableError        an attribute of an object being pickled cannot be (TypeError)
MissingModuleError      unpickling or patch_rlpyt needs a module it cannot import here
MissingClassError       unpickling needs a name its module lacks here (AttributeError)
SchemaEvolutionError    saved data does not map onto today's schemas (ValueError)
BufferShapeError        buffer arrays or a saved replay buffer state do not fit (ValueError)
SizeLimitError          a buffer or new fields too large to allocate (also a MemoryError)
StateMismatchError      saved state does not fit the run's part it is restored into (ValueError)
ResumeError             an rlpyt runner or checkpoint that cannot be resumed (RuntimeError)
WorkerError             a sampler worker or a ShardedReplay shard failed (RuntimeError)

NamedSchemaWarning      base of namedschema's warnings (a UserWarning)
RunCheckpointWarning    part of a run that RunCheckpoint restarts rather than resumes
ResumeWarning           part of an rlpyt run that resumable cannot restore exactly

A FieldError is also the builtin class of the failure it reports: ``field_error_class``
makes one subclass per builtin, so ``except IndexError`` around an indexing still
catches it. The common ones have names here: FieldIndexError, FieldKeyError,
FieldTypeError, FieldValueError, FieldRuntimeError, and FieldOverflowError (also an
IndexError, as numpy reports most out-of-range indices).

Deprecated names (issue 29 merged classes a caller acts on alike; where a restore must
tell two apart, an attribute says it): each is a name of the class that replaced it, so
``except OldName`` still catches everything it caught, and pickles made before still load.

SchemaDefinitionError, SchemaConflictError            SchemaError
NotRegularFileError, BackgroundSaveError              SaveError
MissingFieldError, ExtraFieldError, FieldMismatchError SchemaEvolutionError
ReplayStateError                                      BufferShapeError
UnsafeLoadError                                       FormatError
ShardedReplayError, SamplerWorkerError                WorkerError
UnexpectedKindError                                   FormatError (``expected`` set)
EnvStateError, RunCheckpointError                     StateMismatchError
FillLimitError, BufferSizeError                       SizeLimitError
RlpytImportError                                      MissingModuleError

Every class is defined here, the lowest layer, so that one import reaches them all
and ``import namedschema`` stays light; the modules that raise them re-export
theirs (``namedschema.rlpyt.ResumeError`` is ``namedschema.errors.ResumeError``).

One exception is not here, on purpose: ``namedschema.rlpyt.atari_py_adapter``
raises its own ``AdapterError``, a plain ImportError, because that module must
import nothing of namedschema (runs of rlpyt alone load it from its file).
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping
from typing import Any, Self

__all__ = [
    "NamedSchemaError",
    "SchemaError",
    "SchemaClassError",
    "StructureMismatchError",
    "FieldError",
    "FormatError",
    "SaveError",
    "NotDataError",
    "UnpicklableError",
    "MissingModuleError",
    "MissingClassError",
    "SchemaEvolutionError",
    "BufferShapeError",
    "SizeLimitError",
    "StateMismatchError",
    "ResumeError",
    "WorkerError",
    "NamedSchemaWarning",
    "RunCheckpointWarning",
    "ResumeWarning",
    # FieldError's subclasses for one builtin (made by field_error_class)
    "FieldIndexError",
    "FieldKeyError",
    "FieldOverflowError",
    "FieldTypeError",
    "FieldValueError",
    "FieldRuntimeError",
    # deprecated names of the classes above (DEPRECATED_NAMES)
    "SchemaDefinitionError",
    "SchemaConflictError",
    "NotRegularFileError",
    "BackgroundSaveError",
    "ReplayStateError",
    "MissingFieldError",
    "ExtraFieldError",
    "FieldMismatchError",
    "ShardedReplayError",
    "SamplerWorkerError",
    "UnsafeLoadError",
    "UnexpectedKindError",
    "EnvStateError",
    "RunCheckpointError",
    "FillLimitError",
    "BufferSizeError",
    "RlpytImportError",
]

_short = reprlib.Repr()
_short.maxstring = 40
_short.maxother = 40


def short_repr(obj: object) -> str:
    """A bounded repr for messages (index arrays can be huge)."""
    return _short.repr(obj)


class NamedSchemaError(Exception):
    """Base class of the errors namedschema raises deliberately."""


class SchemaError(NamedSchemaError, ValueError):
    """A typename, field name or default is invalid, or an unpickled schema's id is taken
    by a different schema in this process."""


class SchemaClassError(SchemaError, TypeError):
    """A class statement cannot define a schema; a TypeError too, as with typing.NamedTuple."""


SchemaDefinitionError = SchemaError   # deprecated names (issue 29)
SchemaConflictError = SchemaError


class StructureMismatchError(NamedSchemaError, TypeError):
    """A value does not have the structure a schema or buffer expects.

    Attributes:
        path: dotted location of the mismatch, such as ``Traj.obs.pos``.
        expected: what was expected there (text).
        got: what arrived (text).
    """

    def __init__(self, path: str, expected: str, got: str, detail: str = ""):
        self.path, self.expected, self.got, self.detail = path, expected, got, detail
        msg = f"{path}: expected {expected}, got {got}"
        super().__init__(msg + (f"; {detail}" if detail else ""))

    def __reduce__(self) -> tuple[type[Self], tuple[object, ...]]:  # (a background save's child sends its errors by pickle)
        return type(self), (self.path, self.expected, self.got, self.detail)


class FieldError(NamedSchemaError):
    """Indexing or assigning one field of a named array tuple failed.

    Attributes:
        schema: typename of the outermost instance.
        path: field names from that instance down to the failing leaf.
        loc: the index that was used.
        written: names (dotted) of fields already written before the failure
            (assignments only; empty for reads).
    """

    def __init__(self, schema: str, path: tuple[str, ...], loc: object, reason: str,
                 written: tuple[str, ...] = (), assigning: bool = False):
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

    def __reduce__(self) -> tuple[type[Self], tuple[object, ...]]:
        return (type(self), (self.schema, self.path, self.loc, self.reason,
                             self.written, self.assigning))


# Builtins a FieldError made for one builtin adds as well: numpy reports most out-of-range
# indices as IndexError, so an OverflowError (an index too large for the array) is one too.
_ALSO: dict[type[BaseException], tuple[type[BaseException], ...]] = {
    OverflowError: (IndexError,)}
# Classes made on demand, by the names of the builtins asked for.
_made: dict[tuple[str, ...], type[FieldError]] = {}


def _builtin_bases(cls: type) -> list[type]:
    """The most derived builtin exception classes ``cls`` is (usually one)."""
    found = [c for c in cls.__mro__
             if c.__module__ == "builtins" and issubclass(c, Exception) and c is not Exception]
    return [c for c in found if not any(o is not c and issubclass(o, c) for o in found)]


def _field_error_for(builtins: tuple[type, ...]) -> type[FieldError]:
    """FieldError combined with ``builtins`` (made once per combination).

    One builtin ``B``: ``FieldBError(FieldError, B)``; several: a subclass of each one's.
    """
    key = tuple(b.__name__ for b in builtins)
    made = _made.get(key)
    if made is None:
        if len(builtins) == 1:
            bases: tuple[type, ...] = (FieldError, *builtins, *_ALSO.get(builtins[0], ()))
        else:
            bases = tuple(_field_error_for((b,)) for b in builtins)
        name = "Field" + "".join(b.__name__.removesuffix("Error") for b in builtins) + "Error"
        made = type(name, bases, {
            "__module__": __name__, "__qualname__": name,
            "__doc__": f"A field failed with {' and '.join(key)}.",
            "__str__": Exception.__str__,  # the builtin's own might quote or reformat it
            "__reduce__": _reduce_made, "_builtins": key})
        made("S", (), None, "probe")  # a builtin whose __init__ needs more arguments fails
        made = _made.setdefault(key, made)
    return made


def _reduce_made(self: FieldError) -> tuple[Callable[..., FieldError], tuple[object, ...]]:
    # _builtins is in the dict of each class _field_error_for makes, not on FieldError
    names: tuple[str, ...] = type(self)._builtins  # type: ignore[attr-defined]
    return (rebuild_field_error, (names,
                                  (self.schema, self.path, self.loc, self.reason,
                                   self.written, self.assigning)))


def rebuild_field_error(builtin_names: tuple[str, ...], args: tuple[Any, ...]) -> FieldError:
    """Unpickle a FieldError of a class made on demand (by its builtins' names)."""
    import builtins
    classes = tuple(getattr(builtins, name) for name in builtin_names)
    if not all(isinstance(c, type) and issubclass(c, Exception) for c in classes):
        raise TypeError(f"not builtin exception classes: {builtin_names!r}")
    return _field_error_for(classes)(*args)


def field_error_class(exc: BaseException) -> type[FieldError]:
    """The FieldError subclass that is also every builtin exception class ``exc`` is.

    So ``except RuntimeError`` (or ``ZeroDivisionError``, ``AttributeError``...)
    still catches a field's failure once it is reported as a FieldError. A
    builtin that cannot be combined (its constructor needs more arguments,
    like ``UnicodeDecodeError``) gives way to its own builtin bases.
    """
    pending = _builtin_bases(type(exc))
    while pending:
        try:
            return _field_error_for(tuple(pending))
        except TypeError:  # an incompatible layout or constructor: one level up
            wider = {b for c in pending for base in c.__bases__ for b in _builtin_bases(base)}
            pending = [c for c in wider if not any(o is not c and issubclass(o, c)
                                                   for o in wider)]
    return FieldError


# FieldError's subclasses for one builtin, by name (pickles name them, and load by name).
FieldIndexError = _field_error_for((IndexError,))
FieldKeyError = _field_error_for((KeyError,))
FieldTypeError = _field_error_for((TypeError,))
FieldValueError = _field_error_for((ValueError,))
FieldOverflowError = _field_error_for((OverflowError,))
FieldRuntimeError = _field_error_for((RuntimeError,))


class FormatError(NamedSchemaError, ValueError):
    """A file is not a namedschema checkpoint, or is damaged or unsupported; or it holds
    pickled objects and ``allow_pickle`` was not set (the message says so, and
    ``inspect(path).needs_pickle`` tells it apart without loading); or it is a valid
    checkpoint whose metadata are not what ``load(..., expect_metadata=)`` asked for.

    Attributes (set only for the last case, else None; nothing was loaded):
        metadata: the file's metadata (plain strings, from its header).
        expected: what ``expect_metadata`` asked for.
    """

    def __init__(self, message: object = None, metadata: Mapping[str, str] | None = None,
                 expected: Mapping[str, str] | None = None):
        super().__init__(*(() if message is None else (message,)))
        self.metadata = None if metadata is None and expected is None else dict(metadata or {})
        self.expected = None if expected is None else dict(expected)


UnsafeLoadError = FormatError   # deprecated names (issue 29)
UnexpectedKindError = FormatError


class SaveError(NamedSchemaError, OSError):
    """A save failed before or while writing, in a way an OSError of its own does not say.

    * ``save`` refused a target that is not a regular file (directory, FIFO, socket,
      device): ``errno`` is EISDIR for a directory, else EEXIST, ``filename`` is the
      path given to ``save``; nothing was written.
    * A background save failed and the error raised in its writer could not be carried
      back, or the writer process died (killed by a signal, out of memory) before it
      finished: the file holds the last complete checkpoint.
    """

    def __str__(self) -> str:
        return str(self.strerror) if self.strerror is not None else super().__str__()


NotRegularFileError = SaveError   # deprecated names (issue 29)
BackgroundSaveError = SaveError


class NotDataError(NamedSchemaError, TypeError):
    """``save`` met a value that is not data, and ``allow_pickle`` was not set.

    Attributes:
        file: the checkpoint path being saved.
        path: where the value is in the saved graph, such as ``replay._lock``.
        type_name: the value's type, ``module.qualname``.
    """

    def __init__(self, file: str, path: str, type_name: str, why: str = ""):
        self.file, self.path, self.type_name, self.why = file, path, type_name, why
        super().__init__(f"{file!r}: value at {path} ({type_name}) is not data"
                         + (f": {why}" if why else "")
                         + "; pass allow_pickle=True to pickle it")

    def __reduce__(self) -> tuple[type[Self], tuple[object, ...]]:
        return type(self), (self.file, self.path, self.type_name, self.why)


class BufferShapeError(NamedSchemaError, ValueError):
    """Buffer arrays disagree in their leading dimensions, a shape is invalid, or a saved
    replay buffer state does not fit the buffer.

    A replay buffer's ``load_state_dict`` / ``from_state_dict`` raise it before anything
    of the buffer changed: fields that do not map by name, another capacity, a cursor or
    size out of range, a sum tree that is not the sum of its leaves.
    """


ReplayStateError = BufferShapeError   # deprecated name (issue 29)


class UnpicklableError(NamedSchemaError, TypeError):
    """A value inside an object being pickled cannot be pickled.

    Attributes:
        path: where it is, from the object's class name down, such as
            ``AsyncUniformReplayBuffer.priority_tree.queue``.
        what: the value's type (``module.qualname``).
        reason: what pickle said about it.
    """

    def __init__(self, path: str, what: str, reason: str):
        self.path, self.what, self.reason = path, what, reason
        super().__init__(f"{path}: cannot pickle {what}: {reason}")

    def __reduce__(self) -> tuple[type[Self], tuple[object, ...]]:
        return type(self), (self.path, self.what, self.reason)


class MissingModuleError(NamedSchemaError, ModuleNotFoundError):
    """A module that cannot be imported in this process is needed: unpickling needs it,
    or ``patch_rlpyt`` needs rlpyt.

    Not a problem of the file (that is :class:`FormatError`): install the
    module or put it on ``sys.path``, and the same file loads.

    Two forms, as OSError has: ``MissingModuleError(module, qualname, reason)`` words
    unpickling's message; ``MissingModuleError(message, module=name)`` takes a whole one.

    Attributes:
        module: the module that failed to import (also ``name``).
        qualname: the name pickle wanted from it ("" for the one-message form).
        reason: the import error's text.
        file: the checkpoint being loaded, when known (else None).
    """

    def __init__(self, module_or_message: str, /, qualname: str | None = None,
                 reason: str = "", *, module: str | None = None):
        self.file: str | None = None
        if qualname is not None and module is not None:
            raise TypeError("MissingModuleError: module= goes with the one-message form, "
                            "not with a qualname")
        if qualname is None:
            self.module, self.qualname, self.reason = module, "", ""
            self._form: tuple[str, ...] = (module_or_message,)
            super().__init__(module_or_message, name=module)
            return
        self.module, self.qualname, self.reason = module_or_message, qualname, reason
        self._form = (module_or_message, qualname, reason)
        super().__init__(f"unpickling needs {module_or_message}.{qualname}, but module "
                         f"{module_or_message!r} cannot be imported in this process "
                         f"({reason}); make it importable and load again",
                         name=module_or_message)

    def __reduce__(self) -> tuple[type[Self], tuple[object, ...], dict[str, Any]]:
        return type(self), self._form, {**vars(self), "name": self.name, "path": self.path}


class MissingClassError(NamedSchemaError, AttributeError):
    """Unpickling needs a class or function that its module does not define here.

    The code changed since the save (a class renamed or moved), or another
    version of the module is installed; the file itself is fine.

    Attributes:
        module, qualname, reason, file: as for :class:`MissingModuleError`.
    """

    def __init__(self, module: str, qualname: str, reason: str = ""):
        self.module, self.qualname, self.reason = module, qualname, reason
        self.file: str | None = None
        super().__init__(f"unpickling needs {module}.{qualname}, which module {module!r} "
                         f"does not define in this process ({reason})")

    def __reduce__(self) -> tuple[type[Self], tuple[object, ...]]:
        return type(self), (self.module, self.qualname, self.reason)


class SchemaEvolutionError(NamedSchemaError, ValueError):
    """Saved data cannot be mapped onto today's schemas by the evolution rules.

    Raised by :func:`namedschema.upgrade` (and ``load(schemas=...)``) before
    anything was changed. See the rules in the "Schema evolution" docs page.

    A field of the current schema absent from the saved data without a default, a saved
    field the current schema lacks (with ``extra="error"``), a saved dtype or shape that
    differs from the declared one.

    Attributes:
        schema: typename of the current schema concerned (or None).
        field: the field concerned (or None).
        path: where in the structure the instance was found.
        saved: the saved dtype (text) or shape, when they differ (else None).
        expected: the declared dtype (text) or shape, when they differ (else None).
    """

    def __init__(self, message: str, *, schema: str | None = None,
                 field: str | None = None, path: str = "", saved: object = None,
                 expected: object = None):
        super().__init__(message)
        self.schema, self.field, self.path = schema, field, path
        self.saved, self.expected = saved, expected


class SizeLimitError(BufferShapeError, SchemaEvolutionError, MemoryError):
    """More memory asked for than allowed or available; raised before anything is allocated.

    * A buffer too large to allocate: more bytes than numpy can address, or than the
      machine gave. The message names the field, its shape and the bytes needed.
    * New fields that ``load(path, schemas=...)`` fills from a file's leading shapes would
      take more memory than the file justifies: a crafted file (empty arrays of shape
      ``(2**33, 0)``, or broadcast views) can claim any leading shape, so the bytes of
      all fills are bounded by the file's size (at least 64 MiB). Upgrade data you trust
      with :func:`namedschema.upgrade`, which has no bound.

    Also a MemoryError, and both a BufferShapeError and a SchemaEvolutionError so that
    ``except`` clauses written for either of the classes it replaced still catch it.
    """


FillLimitError = SizeLimitError   # deprecated names (issue 29)
BufferSizeError = SizeLimitError


MissingFieldError = SchemaEvolutionError   # deprecated names (issue 29)
ExtraFieldError = SchemaEvolutionError
FieldMismatchError = SchemaEvolutionError


# --------------------------------------------------------------------------
# Errors of the higher layers (state, training, ray, rlpyt), defined here too
# --------------------------------------------------------------------------

class WorkerError(NamedSchemaError, RuntimeError):
    """A worker failed: a sampler worker process of a resumable run (raised in the main
    process, naming it and why), or a shard of a ShardedReplay (or its checkpoint could
    not be taken or restored)."""


ShardedReplayError = WorkerError   # deprecated names (issue 29)
SamplerWorkerError = WorkerError


RlpytImportError = MissingModuleError   # deprecated name (issue 29)


class ResumeError(NamedSchemaError, RuntimeError):
    """A runner or checkpoint that cannot be resumed; raised before training starts."""


class StateMismatchError(NamedSchemaError, ValueError):
    """Saved state does not fit what it is restored into, which was built differently
    (config changed): a run's component (``RunCheckpoint.restore``,
    ``namedschema.rlpyt.resumable``, ``namedschema.sb3.resumable``), an env or emulator
    (``restore_env``), or a file that is not a checkpoint of this run. Raised before
    anything of the run changed, unless the message says what was already restored.

    Attributes:
        where: the part of the run the message names, such as ``'replay'`` or
            ``"algo.optimizer"``; None when it was raised below the layer that knows the
            name (an env's own check): a restore then adds the name to the message.
    """

    def __init__(self, message: object = None, *, where: str | None = None):
        super().__init__(*(() if message is None else (message,)))
        self.where = where


EnvStateError = StateMismatchError   # deprecated names (issue 29)
RunCheckpointError = StateMismatchError


# Deprecated name -> the class it names now (issue 29); the docs and changelog list them.
DEPRECATED_NAMES: dict[str, str] = {
    "SchemaDefinitionError": "SchemaError", "SchemaConflictError": "SchemaError",
    "NotRegularFileError": "SaveError", "BackgroundSaveError": "SaveError",
    "MissingFieldError": "SchemaEvolutionError", "ExtraFieldError": "SchemaEvolutionError",
    "FieldMismatchError": "SchemaEvolutionError", "ReplayStateError": "BufferShapeError",
    "ShardedReplayError": "WorkerError", "SamplerWorkerError": "WorkerError",
    "UnsafeLoadError": "FormatError", "UnexpectedKindError": "FormatError",
    "EnvStateError": "StateMismatchError", "RunCheckpointError": "StateMismatchError",
    "FillLimitError": "SizeLimitError", "BufferSizeError": "SizeLimitError",
    "RlpytImportError": "MissingModuleError",
}


class NamedSchemaWarning(UserWarning):
    """Base class of the warnings namedschema gives."""


class RunCheckpointWarning(NamedSchemaWarning):
    """Part of the run that will be restarted, not resumed (an env that cannot be captured)."""


class ResumeWarning(NamedSchemaWarning):
    """Part of a run that will not be resumed exactly (said once, before training)."""
