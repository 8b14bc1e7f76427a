"""Class syntax for schemas: ``class Samples(NamedArrayTuple): obs: np.ndarray``.

A class statement whose only base is :class:`NamedTuple` or
:class:`NamedArrayTuple` makes a schema through the same builder the factories
use (so the same ``__new__``, field getters, indexing, id and pickling by
value), with the class body's annotations as fields, its assignments to them
as defaults, and its other members (docstring, methods, properties, class
attributes) then set on the class. ``SchemaBaseMeta`` (the base classes'
metaclass) calls :func:`class_statement` for every class statement below it.

A pickle carries a schema's definition, not its class body, so a process that
loads one without having run the class statement gets the fields but not the
methods. Module-level definitions get an id derived from the definition (as
module-level factory calls do): running the class statement in the loading
process, before or after loading, gives the loaded instances their methods.
To keep a copy without its body from behaving differently instead of failing,
the body may add members but not replace what every instance already has
(tuple's, the base class's), except ``__repr__``, ``__str__`` and
``__format__``, and may not define hooks whose absence has a silent fallback.

class_statement   the builder ``SchemaBaseMeta`` calls for class statements
declared_dtypes   field name -> numpy dtype an annotation declares, or None
has_class_body    whether a schema class carries its class-syntax body
"""

from __future__ import annotations

import sys
import typing
from typing import TYPE_CHECKING, Any

from ..errors import SchemaClassError, SchemaConflictError, SchemaDefinitionError
from .instance import NamedArrayTuple, NamedTuple, SchemaBaseMeta
from .schema import NamedArrayTupleSchema, NamedTupleSchema, build_schema

if TYPE_CHECKING:
    import numpy  # only for annotations: the core does not import numpy

__all__ = ["class_statement", "declared_dtypes", "has_class_body"]

# Marks a class-syntax schema; holds the names its class body added.
BODY_MARK = "_schema_body"

# Namespace entries every class statement has, handled separately.
_SPECIAL = frozenset({"__module__", "__qualname__", "__doc__", "__annotations__",
                      "__classcell__", "__firstlineno__", "__static_attributes__",
                      "__orig_bases__", "__annotate__", "__annotate_func__",
                      "__annotations_cache__"})
# Inherited members that only change how an instance is displayed.
_MAY_REPLACE = frozenset({"__repr__", "__str__", "__format__"})
# Not inherited, but defined by every schema or its construction.
_SCHEMA_OWNED = frozenset({"__slots__", "__new__", "__init__", "__match_args__", "_make",
                           "__dict__", "__weakref__", "__getnewargs_ex__"})
# Hooks whose absence (in a copy loaded without the class body) falls back to
# different behaviour without an error.
_SILENT_FALLBACK = frozenset({
    "__bool__", "__reversed__", "__iadd__", "__imul__", "__copy__", "__deepcopy__", "__array__",
    "__array_ufunc__", "__array_function__", "__array_priority__",
    "__array_interface__", "__torch_function__"})

_REASONS = {
    "__slots__": "schema instances are tuples with empty __slots__ and hold "
                 "nothing but their fields",
    "__new__": "the constructor is generated from the fields; add a classmethod "
               "for other ways of building instances",
    "__init__": "the constructor is generated from the fields; add a classmethod "
                "for other ways of building instances",
}


def _refuse(base, name, what, cause=None):
    raise SchemaClassError(f"class {name}({base.__name__}): {what}") from cause


def _is_classvar(annotation) -> bool:
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        return text.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is typing.ClassVar or typing.get_origin(annotation) is typing.ClassVar


def _protected(base) -> frozenset:
    return frozenset(dir(base)) - _MAY_REPLACE | _SCHEMA_OWNED | _SILENT_FALLBACK


def _owner(base, name) -> str:
    for klass in base.__mro__:
        if name in klass.__dict__:
            return klass.__name__
    return base.__name__


_PROTECTED = {NamedTuple: _protected(NamedTuple), NamedArrayTuple: _protected(NamedArrayTuple)}


def _namespace_annotations(namespace) -> dict[str, Any]:
    """The annotations of a class body, in order (Python 3.14 defers them to a function)."""
    if "__annotations__" in namespace:
        return dict(namespace["__annotations__"])
    try:
        import annotationlib  # type: ignore[import-not-found,unused-ignore]  # Python 3.14+
    except ImportError:
        return {}
    annotate = annotationlib.get_annotate_from_class_namespace(namespace)
    if annotate is None:
        return {}
    return dict(annotationlib.call_annotate_function(annotate,
                                                     annotationlib.Format.FORWARDREF))


def _split_body(base, name, namespace):
    """Validate a class body; return (fields, defaults, annotations, members)."""
    annotations = _namespace_annotations(namespace)
    protected = _PROTECTED[base]
    fields: list[str] = []
    defaults: list[Any] = []
    for field, annotation in annotations.items():
        if _is_classvar(annotation):
            continue
        if field.startswith("_"):
            _refuse(base, name, f"field {field!r} starts with an underscore "
                    "(names starting with '_' are reserved for schema attributes "
                    "such as _fields)")
        if field in protected and field not in ("count", "index"):  # as namedtuple allows
            _refuse(base, name, f"field {field!r} would hide the method "
                    f"{base.__name__}.{field}(), which every instance has")
        if field in namespace:
            defaults.append(namespace[field])
        elif defaults:
            _refuse(base, name, f"field {field!r} without a default follows "
                    f"field {fields[-1]!r}, which has one")
        fields.append(field)
    members = {}
    for key, value in namespace.items():
        if key in _SPECIAL or key in fields:
            continue
        if key.startswith("_schema"):
            _refuse(base, name, f"{key!r} cannot be defined: names starting "
                    "with '_schema' are reserved for namedschema")
        if key in protected:
            reason = _REASONS.get(key) or (
                f"it would replace {_owner(base, key)}.{key}, which a copy loaded "
                "without the class body would silently use instead" if key in dir(base)
                else "a copy loaded without the class body would silently fall back "
                "to other behaviour instead of failing")
            _refuse(base, name, f"{key!r} cannot be defined in a schema: {reason}")
        members[key] = value
    return fields, tuple(defaults), annotations, members


def _class_syntax(base, name, namespace):
    kind = NamedArrayTupleSchema if base is NamedArrayTuple else NamedTupleSchema
    qualname = namespace.get("__qualname__", name)
    fields, defaults, annotations, members = _split_body(base, name, namespace)
    module = namespace.get("__module__")
    body = dict(members)
    if "__doc__" in namespace and namespace["__doc__"] is not None:
        body["__doc__"] = namespace["__doc__"]
    body["__qualname__"] = qualname
    body["__annotations__"] = annotations
    body[BODY_MARK] = tuple(members)
    for key in ("__classcell__", "__firstlineno__", "__static_attributes__"):
        if key in namespace:
            body[key] = namespace[key]
    try:
        cls = build_schema(kind, name, fields, defaults=defaults or None, module=module,
                           module_level="<locals>" not in qualname)
    except SchemaDefinitionError as exc:  # a name Python itself would reject
        message = str(exc).removeprefix(f"{kind.__name__} {name!r}: ")
        _refuse(base, name, message, exc)
    if BODY_MARK in cls.__dict__:  # pragma: no cover - module-level ids are unique
        raise SchemaConflictError(f"class {name}: schema id {cls._schema_id} is already "
                                  "taken by another class-syntax schema")
    # A new class, or one loaded by value before this module-level statement
    # ran (same id): either way it gets the body, so instances already loaded
    # gain the methods too.
    _attach_body(cls, body)
    return cls


def _attach_body(cls, body):
    cell = body.pop("__classcell__", None)
    for key, value in body.items():
        setattr(cls, key, value)
    for key, value in body.items():
        set_name = getattr(type(value), "__set_name__", None)
        if set_name is not None:
            set_name(value, cls, key)
    if cell is not None:
        cell.cell_contents = cls


def _subclass_of_schema(mcls, name, bases, namespace, kwargs):
    """``class Sub(SomeSchema)``: an ordinary subclass; it cannot add fields."""
    known: set[str] = set()
    for base in bases:
        known.update(getattr(base, "_fields", ()))
    for field, annotation in _namespace_annotations(namespace).items():
        if field not in known and not _is_classvar(annotation):
            raise SchemaClassError(
                f"class {name}({_base_names(bases)}): annotation {field!r} would add "
                "a field, but subclassing a schema adds no fields (as with typing.NamedTuple); "
                "define a new schema with all the fields instead")
    return type.__new__(mcls, name, bases, namespace, **kwargs)


def _base_names(bases) -> str:
    return ", ".join(getattr(b, "__name__", repr(b)) for b in bases)


def class_statement(mcls, name, bases, namespace, kwargs):
    """Build the class of a class statement that has a base class of ours."""
    ours = [b for b in bases if b is NamedTuple or b is NamedArrayTuple]
    if not ours and any(isinstance(base, NamedTupleSchema) for base in bases):
        return _subclass_of_schema(mcls, name, bases, namespace, kwargs)
    base = ours[0] if ours else NamedTuple
    if kwargs:
        _refuse(base, name, f"class keywords {sorted(kwargs)} are not supported")
    if len(bases) != 1 or not ours:
        others = _base_names([b for b in bases if b is not base])
        _refuse(base, name, "a schema has exactly one base class, NamedTuple or "
                f"NamedArrayTuple, and cannot also inherit from {others}")
    if mcls is not SchemaBaseMeta:
        _refuse(base, name, f"metaclass {mcls.__name__} is not supported; "
                "schemas have their own metaclass")
    return _class_syntax(base, name, namespace)


def has_class_body(schema: type[Any]) -> bool:
    """Whether ``schema`` was made (or completed) by a class statement in this process.

    False for factory-made schemas and for class-syntax schemas loaded by value
    whose class statement has not run here: those lack the class body's methods.
    """
    return BODY_MARK in getattr(schema, "__dict__", {})


def _field_annotations(schema) -> dict[str, Any]:
    annotations = schema.__dict__.get("__annotations__", {})
    return {f: annotations[f] for f in schema._fields if f in annotations}


def _resolve(schema, field, annotation):
    # Only a class body's own annotations get here: by-value copies carry none,
    # so nothing read from a file is ever evaluated.
    if not isinstance(annotation, str):
        return annotation
    module = sys.modules.get(schema.__module__)
    scope = dict(vars(module)) if module is not None else {}
    try:
        return eval(annotation, scope, dict(vars(schema)))  # the user's own annotation
    except Exception as exc:  # reported with schema and field
        raise SchemaDefinitionError(
            f"{schema._typename}.{field}: cannot evaluate the annotation {annotation!r} "
            f"to find its declared dtype ({type(exc).__name__}: {exc})") from exc


def _dtype_of(annotation, np):
    """The numpy dtype ``annotation`` declares (NDArray[X], ndarray[S, dtype[X]], X), or None."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _dtype_of(args[0], np)
    if origin is typing.Union or type(annotation).__name__ == "UnionType":
        found = {d for d in (_dtype_of(a, np) for a in args if a is not type(None))}
        return found.pop() if len(found) == 1 else None
    if origin is np.ndarray:
        for arg in args:
            if typing.get_origin(arg) is np.dtype:
                return _dtype_of(arg, np)
        return None
    if origin is np.dtype:
        return _dtype_of(args[0], np) if args else None
    if isinstance(annotation, type) and issubclass(annotation, np.generic):
        try:
            dtype = np.dtype(annotation)
        except (TypeError, ValueError):
            return None
        # Abstract scalar types (np.floating, np.generic) declare no one dtype.
        return dtype if dtype.type is annotation else None
    return None


def declared_dtypes(schema: type[Any]) -> dict[str, numpy.dtype[Any] | None]:
    """Field name -> the numpy dtype its annotation declares, or None, for every field.

    ``npt.NDArray[np.float32]``, ``np.ndarray[Any, np.dtype[np.float32]]`` and
    ``np.float32`` all declare float32 (also inside ``Optional``/``Annotated``);
    ``np.ndarray``, ``Any``, ``float`` and abstract types declare none. Factory
    schemas and by-value copies without their class body declare none. String
    annotations (``from __future__ import annotations``) are evaluated in the
    defining module.

    Raises:
        SchemaDefinitionError: a string annotation cannot be evaluated.
        TypeError: ``schema`` is not a schema (or named tuple) class.
    """
    fields = getattr(schema, "_fields", None)
    if not isinstance(schema, type) or not isinstance(fields, tuple):
        raise TypeError(f"declared_dtypes: expected a schema class, got {schema!r:.100}")
    annotations = _field_annotations(schema)
    result: dict[str, numpy.dtype[Any] | None] = dict.fromkeys(fields)
    np = sys.modules.get("numpy")
    for field, annotation in annotations.items():
        annotation = _resolve(schema, field, annotation)
        np = np or sys.modules.get("numpy")
        if np is not None:  # numpy types in an annotation mean numpy is imported
            result[field] = _dtype_of(annotation, np)
    return result


SchemaBaseMeta.class_statement = class_statement
