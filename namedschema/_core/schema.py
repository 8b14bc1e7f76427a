"""Schemas: the metaclasses, their generated code, class syntax, the factories.

Everything that defines a schema, in the order a definition runs: the limits a
definition must keep, the generated indexing code, the metaclasses, the
rlpyt-compatible factories, class syntax, and what type checkers see of
factory-made schemas. Standard library only (``import namedschema`` loads it).
The write checks, which need numpy, are loaded by name at the first write that
needs one (``writes``, through ``instance.install_write_check``: see the end).

Limits
------

Documented limits on what a schema may be, wherever it is built.

A schema can be built from untrusted data (a checkpoint, a pickle, a
``torch.load(weights_only=True)`` file), so its size is bounded before any
work proportional to it: a file cannot make the process spend seconds and
gigabytes building one class.

MAX_FIELDS           the most fields a schema may have (and a checkpoint's
                     schemas together)
check_field_count    raise SchemaError past MAX_FIELDS

Generated indexing code
-----------------------

Generated, unrolled ``__getitem__`` / ``__setitem__`` for named array tuples.

These two methods run in RL inner loops (``buffer[t] = step``,
``samples[idx]``). A loop over the fields pays for a frame, an iterator and
per-item bookkeeping; unrolling removes most of that, which is what takes
indexing well below rlpyt's class-per-type ``namedarraytuple``. The code
depends only on the number of fields (names never appear in it), so one pair
of functions is compiled per field count and shared by all schemas with that
many fields. Errors are handed to the generic reporters in ``instance``.

accessors_for   (getitem, setitem) for a field count, or None when too large
compile_source  compile generated code, its source registered in ``linecache``

Generated source is registered in ``linecache`` under its ``<namedschema ...>``
file name, so tracebacks through generated methods show their lines and
``inspect.getsource`` finds them. Entries are keyed by what the code depends
on (a field count here; field names for ``__new__``), so there is one per
distinct definition, not one per schema.

The metaclasses
---------------

The schema metaclasses: NamedTupleSchema and NamedArrayTupleSchema.

A schema is a class (so ``type(instance) is Schema`` and every namedtuple idiom
holds) whose metaclass adds three things a namedtuple class lacks:

* a random ``_schema_id`` and a copyreg reducer, so the class pickles by value
  and unpickles to one class per id in each process (see ``pickling``);
* a definition (kind, typename, fields, defaults) that ``same_definition``
  compares; the classes themselves compare and hash by identity, like
  namedtuple classes, since each call makes a distinct type;
* the array semantics of ``NamedArrayTuple`` for ``NamedArrayTupleSchema``.

Hot paths are the same machinery namedtuple uses: a generated ``__new__`` with
the real signature and C-level ``_tuplegetter`` descriptors for the fields.

NamedTupleSchema        metaclass and factory: ``NamedTupleSchema('P', 'x y')``
NamedArrayTupleSchema   the same, with indexing applied across fields
build_schema            make and register one schema (factories, unpickling,
                        the rlpyt patch use it; ``module_level`` derives its id)
same_definition         whether two schemas have one kind, typename, fields, defaults

Factories
---------

rlpyt-compatible function API over the schemas (the import-swap surface).

Same names and signatures as ``rlpyt.utils.collections``; every factory returns
a schema, so whatever it makes pickles by value. The ``is_*`` predicates
recognise classic classes (stdlib namedtuple, rlpyt's namedarraytuple) and
schemas alike.

namedtuple                  stdlib signature, returns a NamedTupleSchema
namedarraytuple             rlpyt signature, returns a NamedArrayTupleSchema
namedarraytuple_like        array schema with the name and fields of an example
NamedArrayTupleSchema_like  the same (rlpyt's name for its schema variant)
is_namedtuple[_class]       named tuple (not array) instance / class
is_namedarraytuple[_class]  named array tuple instance / class

Class syntax
------------

Class syntax for schemas: ``class Samples(NamedArrayTuple): obs: np.ndarray``.

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

What type checkers see
----------------------

What type checkers see of factory-made schemas (nothing here exists at run time).

A schema made by a call (``NamedArrayTupleSchema("Samples", "obs reward")``,
``namedarraytuple(...)``) has fields no type checker can know. The factories
are annotated to return ``type[DynamicNamedTuple]`` /
``type[DynamicNamedArrayTuple]``: instances whose field attributes are ``Any``
but whose schema methods (``_replace``, ``_fields``, indexing returning the
same type, ...) keep their types. Class-syntax schemas need none of this:
their annotations are their fields.

DynamicNamedTuple        instances of a factory-made NamedTupleSchema
DynamicNamedArrayTuple   instances of a factory-made NamedArrayTupleSchema
"""

from __future__ import annotations

import copyreg
import hashlib
import importlib
import keyword
import linecache
import sys
import threading
import typing
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar, cast, overload

from ..errors import FieldError, SchemaClassError, SchemaError
from . import pickling as _pickle
from .instance import (
    SCALAR_RULES,
    NamedArrayTuple,
    NamedTuple,
    SchemaBaseMeta,
    check_write,
    install_write_check,
    raise_read_error,
    raise_write_error,
)
from .pickling import is_registered_schema

if TYPE_CHECKING:
    from collections.abc import Sized
    from types import CodeType, FunctionType, ModuleType

    # The shared unrolled (``__getitem__``, ``__setitem__``) of a field count.
    _Accessors = tuple[Callable[[Any, Any], Any], Callable[[Any, Any, Any], None]]

__all__ = ["accessors_for", "build_schema", "check_field_count", "class_statement",
           "compile_source", "declared_dtypes", "has_class_body", "is_named",
           "is_named_class", "is_namedarraytuple", "is_namedarraytuple_class",
           "is_namedtuple", "is_namedtuple_class", "MAX_FIELDS", "MAX_UNROLLED_FIELDS",
           "namedarraytuple", "namedarraytuple_like", "NamedArrayTupleSchema",
           "NamedArrayTupleSchema_like", "namedtuple", "NamedTupleSchema",
           "same_definition"]


# --------------------------------------------------------------------------
# Limits
# --------------------------------------------------------------------------

MAX_FIELDS = 100_000


def check_field_count(kind: str, typename: str, count: int) -> None:
    """Refuse a schema of more than MAX_FIELDS fields, naming it."""
    if count > MAX_FIELDS:
        raise SchemaError(
            f"{kind} {typename!r}: {count:,} fields, more than the limit of "
            f"{MAX_FIELDS:,} fields a schema may have")


# --------------------------------------------------------------------------
# Generated indexing code
# --------------------------------------------------------------------------

MAX_UNROLLED_FIELDS = 64
_cache: dict[int, _Accessors] = {}


def _source(n: int) -> str:
    names = [f"f{i}" for i in range(n)]
    values = [f"v{i}" for i in range(n)]
    unpack = (", ".join(names) + ("," if n == 1 else "")) if n else "()"
    unpack_values = (", ".join(values) + ("," if n == 1 else "")) if n else "()"
    reads = "".join(f"None if {f} is None else {f}[loc], " for f in names)
    # Writes field by field check first that every value's dtype is its
    # field's very dtype (one identity test each); anything else (other
    # dtypes, Python numbers, None, nested tuples) goes through _check_write,
    # which refuses what would change a value before any field is written.
    same = " and ".join(f"{v}.dtype is {f}.dtype" for f, v in zip(names, values, strict=True))
    dtypes = "".join(f"{f}.dtype, " for f in names)
    lines = [
        "def __getitem__(self, loc):",
        f"    {unpack} = self",
        "    try:",
        f"        return _tuple_new(self.__class__, ({reads}))",
        "    except Exception as exc:",
        "        _raise_read_error(self, loc, exc)",
        "",
        "def __setitem__(self, loc, value):",
        f"    {unpack} = self",
        # The same schema first: one class test, no isinstance call (x[3] = y of one schema
        # is the write a training loop makes most).
        "    if value.__class__ is self.__class__ or (isinstance(value, tuple)"
        " and getattr(value, '_fields', None) == self._fields):",
        f"        {unpack_values} = value",
        # No None field or value and all dtypes matching: just write. A None has no
        # dtype (AttributeError: the checked route below). Each write has its own
        # try (free until it raises) to name its field, rather than a counter kept
        # up to date: this route is the hot one.
        "        try:",
        f"            if {same or 'True'}:",
    ]
    for i, (f, v) in enumerate(zip(names, values, strict=True)):
        lines += ["                try:",
                  f"                    {f}[loc] = {v}",
                  "                except Exception as exc:",
                  f"                    _raise_write_error(self, {i}, loc, value, exc)"]
    lines += [
        "                return",
        "        except AttributeError as exc:",
        "            if isinstance(exc, _FieldError):",  # a write failed: already worded
        "                raise",
        "        _check_write(self, loc, value, True)",
        "        j = 0",
        "        try:",
    ]
    # ``j`` tracks the field being written, for the error message; it starts at 0.
    for i, (f, v) in enumerate(zip(names, values, strict=True)):
        lines += [f"            j = {i}"] * (i > 0) + [
                  f"            if {f} is not None or {v} is not None:",
                  f"                {f}[loc] = {v}"]
    lines += ["            return",
              "        except Exception as exc:",
              "            _raise_write_error(self, j, loc, value, exc)",
              "    j = 0",
              # A Python number broadcast within bounds that hold it in every
              # field (remembered per number type and field dtypes) is not checked.
              # 0 and 1 (also 0.0, 1.0, False, True) fit every dtype.
              "    kind = value.__class__",
              "    if not ((kind is _int or kind is _float or kind is _bool)"
              " and (value == 0 or value == 1)):",
              "        try:",
              f"            low, high, whole = _rules[(kind, {dtypes})]",
              "            fits = low <= value <= high and (not whole or value == int(value))",
              "        except Exception:",
              "            fits = False",
              "        if not fits:",
              "            _check_write(self, loc, value, False)",
              "    try:"] + ["        pass"] * (n == 0)
    for i, f in enumerate(names):
        lines += [f"        j = {i}"] * (i > 0) + [
                  f"        if {f} is not None:",
                  f"            {f}[loc] = value"]
    lines += ["    except Exception as exc:",
              "        _raise_write_error(self, j, loc, value, exc)", ""]
    return "\n".join(lines)


def compile_source(source: str, filename: str) -> CodeType:
    """Compile ``source`` for ``exec`` and register it in ``linecache`` as ``filename``."""
    code = compile(source, filename, "exec")
    # mtime None: linecache.checkcache keeps the entry (there is no file to check).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return code


def accessors_for(n_fields: int) -> _Accessors | None:
    """Shared unrolled (``__getitem__``, ``__setitem__``) for ``n_fields`` fields."""
    if n_fields > MAX_UNROLLED_FIELDS:
        return None
    pair = _cache.get(n_fields)
    if pair is None:
        namespace: dict[str, Any]
        namespace = {"_tuple_new": tuple.__new__, "_raise_read_error": raise_read_error,
                     "_raise_write_error": raise_write_error, "_check_write": check_write,
                     "_rules": SCALAR_RULES, "_int": int, "_float": float, "_bool": bool,
                     "_FieldError": FieldError}
        code = compile_source(_source(n_fields),
                              f"<namedschema accessors for {n_fields} fields>")
        exec(code, namespace)
        getitem, setitem = namespace["__getitem__"], namespace["__setitem__"]
        getitem.__doc__ = ("Return a new instance of the same schema with ``loc`` "
                           "applied to every field (None fields stay None).")
        setitem.__doc__ = ("Assign ``value`` at ``loc`` in every field: field by field "
                           "if it has the same fields, else broadcast.")
        pair = _cache.setdefault(n_fields, (getitem, setitem))
    return pair


# --------------------------------------------------------------------------
# The metaclasses
# --------------------------------------------------------------------------

try:  # CPython's C descriptor, as used by collections.namedtuple
    from _collections import _tuplegetter
except ImportError:  # pragma: no cover - other interpreters
    from operator import itemgetter as _itemgetter

    def _tuplegetter(index: int, doc: str) -> property:
        return property(_itemgetter(index), doc=doc)


_tuple_new = tuple.__new__
_field_docs: dict[int, str] = {}


def _field_doc(index: int) -> str:
    """Docstring of field getter ``index``; shared between schemas to save memory."""
    doc = _field_docs.get(index)
    if doc is None:
        doc = _field_docs[index] = sys.intern(f"Alias for field number {index}")
    return doc


def calling_module(depth: int) -> tuple[str, bool]:
    """(module name, whether the call is module-level code) of a caller frame."""
    try:
        frame = sys._getframe(depth + 1)
    except (AttributeError, ValueError, TypeError):  # pragma: no cover
        return "__main__", False
    return frame.f_globals.get("__name__", "__main__"), frame.f_code.co_name == "<module>"


# Module-level schemas get ids derived from their definition, so that a
# process which imports the same module (a ``spawn`` worker, a Ray worker)
# makes a schema with the same id and unpickling there returns that module's
# own class. The occurrence count keeps two identical definitions in one
# module distinct, as separate factory calls must be.
_module_level_seen: dict[str, int] = {}
_seen_lock = threading.Lock()


def _module_level_id(kind: str, module: str | None, typename: str, fields: tuple[str, ...],
                     defaults: tuple[Any, ...] | None) -> str | None:
    first = _pickle.derived_schema_id(kind, module, typename, fields, defaults)
    if first is None:
        return None
    with _seen_lock:
        count = _module_level_seen.get(first, 0)
        _module_level_seen[first] = count + 1
    if count == 0:
        return first
    return _pickle.derived_schema_id(kind, module, typename, fields, defaults, count)


def _normalize_names(kind: str, typename: str, field_names: str | Iterable[str], rename: bool,
                     reserved: frozenset[str]) -> tuple[str, tuple[str, ...]]:
    """Validate like collections.namedtuple; return (typename, fields)."""
    typename = sys.intern(str(typename))
    if isinstance(field_names, str):
        field_names = field_names.replace(",", " ").split()
    try:
        field_names = list(map(str, field_names))
    except TypeError:
        raise TypeError(f"{kind} {typename!r}: field_names must be a string or an "
                        f"iterable of strings, got {type(field_names).__name__}") from None
    check_field_count(kind, typename, len(field_names))

    if rename:
        seen = set()
        for index, name in enumerate(field_names):
            if (not name.isidentifier() or keyword.iskeyword(name)
                    or unicodedata.normalize("NFKC", name) != name
                    or name.startswith("_") or name in seen or name in reserved):
                field_names[index] = f"_{index}"
            seen.add(name)

    for name, what in [(typename, "type name")] + [(n, "field name") for n in field_names]:
        if not name.isidentifier():
            raise SchemaError(
                f"{kind} {typename!r}: {what} {name!r} is not a valid identifier")
        if unicodedata.normalize("NFKC", name) != name:
            # Python reads identifiers in NFKC form ('\ufb01' is read as 'fi'), so
            # such a name could never be used as an attribute or keyword.
            raise SchemaError(
                f"{kind} {typename!r}: {what} {name!r} is not in NFKC normal form "
                f"(Python would read it as {unicodedata.normalize('NFKC', name)!r})")
        if keyword.iskeyword(name):
            raise SchemaError(
                f"{kind} {typename!r}: {what} {name!r} is a keyword")

    seen = set()
    for name in field_names:
        if name.startswith("_") and not rename:
            raise SchemaError(
                f"{kind} {typename!r}: field name {name!r} starts with an "
                "underscore (reserved for schema methods such as _fields)")
        if name in seen:
            raise SchemaError(
                f"{kind} {typename!r}: duplicate field name {name!r}")
        if name in reserved:
            raise SchemaError(
                f"{kind} {typename!r}: field name {name!r} would hide the "
                f"method {kind}.{name}() that every instance has "
                f"(reserved: {', '.join(sorted(reserved))})")
        seen.add(name)
    return typename, tuple(field_names)


def _make_new(typename: str, fields: tuple[str, ...], defaults: tuple[Any, ...] | None
              ) -> FunctionType:
    """Generate ``__new__`` with the schema's real signature (fast keyword calls)."""
    params = ", ".join(fields)
    values = params + ("," if len(fields) == 1 else "")
    source = (f"def __new__(_cls{', ' if fields else ''}{params}):\n"
              f"    return _tuple_new(_cls, ({values}))\n")
    # Field names are validated identifiers that cannot start with '_', so
    # they never collide with '_cls' / '_tuple_new'. No builtins are exposed.
    namespace: dict[str, Any] = {"_tuple_new": _tuple_new, "__builtins__": {},
                                 "__name__": f"namedschema_{typename}"}
    # Named by the fields, all the code depends on (one linecache entry for each).
    if len(params) > 120:
        digest = hashlib.blake2b(params.encode(), digest_size=8).hexdigest()
        filename = f"<namedschema __new__ of {len(fields)} fields {digest}>"
    else:
        filename = f"<namedschema __new__({params})>"
    exec(compile_source(source, filename), namespace)
    new: FunctionType = namespace["__new__"]
    new.__qualname__ = f"{typename}.__new__"
    new.__doc__ = f"Create new instance of {typename}({values})"
    if defaults is not None:
        new.__defaults__ = defaults
    return new


def _make_make(typename: str, n_fields: int,
               _tuple_new: Callable[[type[Any], Iterable[Any]], tuple[Any, ...]] = _tuple_new,
               _len: Callable[[Sized], int] = len
               ) -> classmethod[Any, [Iterable[Any]], tuple[Any, ...]]:
    def _make(cls: type[Any], iterable: Iterable[Any]) -> tuple[Any, ...]:
        """Make a new instance from a sequence or iterable of field values."""
        result = _tuple_new(cls, iterable)
        if _len(result) != n_fields:
            raise TypeError(f"{typename}._make: expected {n_fields} values, "
                            f"got {len(result)}")
        return result
    _make.__qualname__ = f"{typename}._make"
    return classmethod(_make)


def _defaults_equal(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x is y:
            continue
        try:
            if not bool(x == y):
                return False
        except Exception:  # e.g. arrays: ambiguous truth value
            return False
    return True


def same_definition(a: object, b: object) -> bool:
    """True if schemas ``a`` and ``b`` have one kind, typename, fields and defaults.

    Schema classes compare by identity; this compares what defines them.
    Defaults compare with ``==`` (identity first; arrays, whose ``==`` has no
    truth value, only by identity). False when either is not a schema made by
    a factory.

    >>> same_definition(NamedTupleSchema('P', 'x y'), NamedTupleSchema('P', 'x y'))
    True
    >>> NamedTupleSchema('P', 'x y') == NamedTupleSchema('P', 'x y')
    False
    """
    if not (_pickle.is_registered_schema(a) and _pickle.is_registered_schema(b)):
        return False
    x, y = cast(Any, a), cast(Any, b)  # schema classes
    return (type(x) is type(y) and x._typename == y._typename and x._fields == y._fields
            and _defaults_equal(tuple(x._field_defaults.values()),
                                tuple(y._field_defaults.values())))


class NamedTupleSchema(SchemaBaseMeta):
    """A named tuple type that pickles by value.

    ``NamedTupleSchema(typename, field_names, *, rename=False, defaults=None,
    module=None)`` accepts exactly what ``collections.namedtuple`` accepts and
    returns a new class, a subclass of ``tuple`` and of
    :class:`namedschema.NamedTuple`, whose instances behave like namedtuple
    instances. Unlike a namedtuple class, it (and so its instances) can be
    pickled anywhere and loaded in a process that never defined it.

    Each call makes a new class, as namedtuple does, and classes compare and
    hash by identity, as namedtuple classes do (:func:`same_definition`
    compares definitions).
    A schema made by module-level code gets an id derived from its module
    and definition, so a process that imports the same module (a ``spawn``
    worker) makes the very class that instances pickled here load as.

    Args:
        typename: name of the new type (a valid identifier).
        field_names: a sequence of strings, or one string of names separated
            by spaces and/or commas.
        rename: replace invalid or duplicate field names by ``_<index>``.
        defaults: default values for the rightmost fields.
        module: value for ``__module__`` (defaults to the caller's module).

    Raises:
        SchemaError: (a ValueError) a name is invalid, a keyword,
            duplicated, starts with an underscore, or is not NFKC-normal.
        TypeError: ``field_names`` or ``defaults`` is not iterable, or there
            are more defaults than fields.

    >>> Point = NamedTupleSchema('Point', 'x y', defaults=(0,))
    >>> p = Point(1)
    >>> p
    Point(x=1, y=0)
    >>> type(p) is Point, isinstance(p, tuple)
    (True, True)
    >>> import pickle; pickle.loads(pickle.dumps(p)) == p
    True

    .. versionadded:: 0.1.0
    """

    _instance_base: type[NamedTuple] = NamedTuple
    _reserved: frozenset[str] = frozenset()

    # Set on every schema class by build_schema (declared for type checkers).
    _typename: str
    _fields: tuple[str, ...]
    _field_defaults: dict[str, Any]
    _schema_id: str

    # For type checkers: a call makes a class whose fields they cannot know; a
    # class statement below a schema calls the metaclass with three arguments.
    @overload
    def __new__(mcls, typename: str, field_names: str | Iterable[str], /, *,
                rename: bool = False, defaults: Iterable[Any] | None = None,
                module: str | None = None) -> type[DynamicNamedTuple]: ...
    @overload
    def __new__(mcls, typename: str, field_names: tuple[type, ...],
                namespace: dict[str, Any], /, **kwargs: Any) -> NamedTupleSchema: ...

    def __new__(mcls, typename: str, field_names: str | Iterable[Any],
                namespace: dict[str, Any] | None = None, /, *, rename: bool = False,
                defaults: Iterable[Any] | None = None, module: str | None = None,
                **kwargs: Any) -> Any:
        if namespace is not None:
            # A class statement subclassing a schema: ``class P(Schema): ...``.
            if not isinstance(namespace, dict) or not isinstance(field_names, tuple):
                raise TypeError(f"{mcls.__name__}() takes 2 positional arguments "
                                "but 3 were given (rename, defaults and module "
                                "are keyword-only)")
            if "_schema_id" in namespace and "_fields" in namespace:
                # dill rebuilds a class by calling its metaclass with the full
                # class dict; route that to the registry so ids stay unique.
                return _pickle.rebuild_schema(
                    mcls.__name__, namespace["_schema_id"], namespace["_typename"],
                    namespace["_fields"], tuple(namespace["_field_defaults"].values()),
                    namespace.get("__module__"))
            return super().__new__(mcls, typename, field_names, namespace, **kwargs)
        if kwargs:
            raise TypeError(f"{mcls.__name__}() got unexpected keyword arguments "
                            f"{sorted(kwargs)}")
        caller_module, module_level = calling_module(1)
        return build_schema(mcls, typename, field_names, rename=rename, defaults=defaults,
                            module=caller_module if module is None else module,
                            module_level=module_level)

    # Equality and hashing are type's: by identity, as for namedtuple classes.
    # Two calls with one definition make two distinct types (isinstance tells
    # them apart), so dicts, sets and functools.singledispatch must too; use
    # same_definition() to compare definitions.


class NamedArrayTupleSchema(NamedTupleSchema):
    """A named tuple type whose indexing and assignment act on every field.

    Instances are :class:`namedschema.NamedArrayTuple`: ``x[loc]`` returns a
    new instance with ``loc`` applied to every field and ``x[loc] = y`` writes
    into every field (field by field when ``y`` has the same fields). The
    field names ``get`` and ``items`` are refused, because instances have
    methods of those names. Otherwise as :class:`NamedTupleSchema`.

    >>> import numpy as np
    >>> Sample = NamedArrayTupleSchema('Sample', 'obs reward')
    >>> s = Sample(np.zeros((4, 2)), np.arange(4.0))
    >>> s[1:3].reward
    array([1., 2.])
    >>> s[0] = Sample(np.ones(2), 7.0)
    >>> s.reward
    array([7., 1., 2., 3.])

    .. versionadded:: 0.1.0
    """

    _instance_base = NamedArrayTuple
    _reserved = frozenset({"get", "items"})

    if TYPE_CHECKING:  # the inherited __new__, with this kind's return type
        @overload
        def __new__(mcls, typename: str, field_names: str | Iterable[str], /, *,
                    rename: bool = False, defaults: Iterable[Any] | None = None,
                    module: str | None = None) -> type[DynamicNamedArrayTuple]: ...
        @overload
        def __new__(mcls, typename: str, field_names: tuple[type, ...],
                    namespace: dict[str, Any], /,
                    **kwargs: Any) -> NamedArrayTupleSchema: ...
        def __new__(mcls, /, *args: Any, **kwargs: Any) -> Any: ...


def build_schema(mcls: type[NamedTupleSchema], typename: str, field_names: str | Iterable[str],
                 *, rename: bool = False, defaults: Iterable[Any] | None = None,
                 module: str | None = None, schema_id: str | None = None,
                 module_level: bool = False) -> NamedTupleSchema:
    """Make, register and return one schema class of metaclass ``mcls``.

    The factories, class syntax, unpickling and the rlpyt patch all make
    schemas here.

    ``module_level`` marks a call from module-level code: the id is then
    derived from the definition, and if this process already holds a live
    schema under that id (it arrived in a pickle before the module was
    imported), that class is returned so both sides agree.
    """
    typename, fields = _normalize_names(mcls.__name__, typename, field_names,
                                        rename, mcls._reserved)
    field_defaults = {}
    if defaults is not None:
        try:
            defaults = tuple(defaults)
        except TypeError:
            raise TypeError(f"{mcls.__name__} {typename!r}: defaults must be an "
                            f"iterable, got {type(defaults).__name__}") from None
        if len(defaults) > len(fields):
            raise TypeError(f"{mcls.__name__} {typename!r}: got {len(defaults)} "
                            f"default values for {len(fields)} fields")
        field_defaults = dict(zip(fields[len(fields) - len(defaults):], defaults, strict=True))
    if schema_id is None and module_level:
        schema_id = _module_level_id(mcls.__name__, module, typename, fields, defaults)
        existing = _pickle.lookup_schema(schema_id) if schema_id else None
        # Adopt a class that arrived in a pickle or file first only if its
        # definition is exactly this one (defaults by type and value);
        # otherwise this module's own class is built and takes the id over.
        if (existing is not None and type(existing) is mcls
                and existing._typename == typename and existing._fields == fields
                and _pickle.same_value(tuple(existing._field_defaults.values()),
                                       tuple(field_defaults.values()))):
            # (a module-level definition: ``module`` is its module's name)
            _pickle.adopt_rebuilt(existing, cast(str, module))
            return existing
    if schema_id is None:
        schema_id = uuid.uuid4().hex

    namespace: dict[str, Any] = {
        # A one-field signature reads "P(x,)", as namedtuple writes it.
        "__doc__": f"{typename}({', '.join(fields)}{',' if len(fields) == 1 else ''})",
        "__slots__": (),
        "__module__": module,
        "__qualname__": typename,
        "__new__": _make_new(typename, fields, defaults),
        "__match_args__": fields,
        "_fields": fields,
        "_field_defaults": field_defaults,
        "_typename": typename,
        "_schema_id": schema_id,
        "_make": _make_make(typename, len(fields)),
    }
    for index, name in enumerate(fields):
        namespace[name] = _tuplegetter(index, _field_doc(index))
    if mcls._instance_base is NamedArrayTuple:
        accessors = accessors_for(len(fields))
        if accessors is not None:
            namespace["__getitem__"], namespace["__setitem__"] = accessors
    cls = type.__new__(mcls, typename, (mcls._instance_base,), namespace)
    _pickle.register_schema(cls, schema_id)
    return cls


def _builder(mcls: type[NamedTupleSchema]) -> Callable[..., NamedTupleSchema]:
    def build(typename: str, fields: Sequence[str], *, defaults: Iterable[Any] | None,
              module: str | None, schema_id: str | None) -> NamedTupleSchema:
        return build_schema(mcls, typename, fields, defaults=defaults, module=module,
                            schema_id=schema_id)
    return build


for _mcls in (NamedTupleSchema, NamedArrayTupleSchema):
    _pickle.KINDS[_mcls.__name__] = (_mcls, _builder(_mcls))
    copyreg.pickle(_mcls, _pickle.reduce_schema)
del _mcls


# --------------------------------------------------------------------------
# Factories
# --------------------------------------------------------------------------

_NAT = TypeVar("_NAT", bound=NamedArrayTuple)


_CLASSIC_NT_ATTRS = ("_fields", "_asdict", "_make", "_replace")


def namedtuple(typename: str, field_names: str | Iterable[str], *, rename: bool = False,
               defaults: Iterable[Any] | None = None,
               module: str | None = None) -> type[DynamicNamedTuple]:
    """``collections.namedtuple``'s signature, returning a :class:`NamedTupleSchema`.

    >>> Point = namedtuple('Point', ['x', 'y'])
    >>> Point(1, y=2)
    Point(x=1, y=2)
    """
    caller_module, module_level = calling_module(1)
    return cast("type[DynamicNamedTuple]", build_schema(
        NamedTupleSchema, typename, field_names, rename=rename, defaults=defaults,
        module=caller_module if module is None else module, module_level=module_level))


@overload
def namedarraytuple(typename: str, field_names: str | Iterable[str],
                    return_namedtuple_cls: Literal[False] = False,
                    classname_suffix: bool = False) -> type[DynamicNamedArrayTuple]: ...
@overload
def namedarraytuple(typename: str, field_names: str | Iterable[str],
                    return_namedtuple_cls: Literal[True],
                    classname_suffix: bool = False,
                    ) -> tuple[type[DynamicNamedArrayTuple], type[DynamicNamedTuple]]: ...
@overload
def namedarraytuple(typename: str, field_names: str | Iterable[str],
                    return_namedtuple_cls: bool, classname_suffix: bool = False,
                    ) -> (type[DynamicNamedArrayTuple]
                          | tuple[type[DynamicNamedArrayTuple], type[DynamicNamedTuple]]): ...


def namedarraytuple(typename: str, field_names: str | Iterable[str],
                    return_namedtuple_cls: bool = False, classname_suffix: bool = False) -> Any:
    """rlpyt's ``namedarraytuple``, returning a :class:`NamedArrayTupleSchema`.

    Args:
        typename: name of the type.
        field_names: as for ``namedtuple``; ``get`` and ``items`` are refused.
        return_namedtuple_cls: also return a plain ``NamedTupleSchema`` with
            the same fields (rlpyt returns the namedtuple base class here).
        classname_suffix: append ``_nat`` to the array type's name (and
            ``_nt`` to the plain one's), as rlpyt does.

    >>> Points = namedarraytuple('Points', ['x', 'y'])
    >>> import numpy as np
    >>> p = Points(np.array([0, 1]), y=np.array([10, 11]))
    >>> p[1:]
    Points(x=array([1]), y=array([11]))
    """
    module, module_level = calling_module(1)
    nt_typename = typename
    if classname_suffix:
        nt_typename, typename = typename + "_nt", typename + "_nat"
    nat = build_schema(NamedArrayTupleSchema, typename, field_names, module=module,
                       module_level=module_level)
    if return_namedtuple_cls:
        return nat, build_schema(NamedTupleSchema, nt_typename, nat._fields, module=module,
                                 module_level=module_level)
    return nat


def is_classic_namedtuple_class(obj: Any) -> bool:
    """True for a class-per-type named tuple (stdlib namedtuple, rlpyt's), not a schema test."""
    return (isinstance(obj, type) and issubclass(obj, tuple) and obj is not tuple
            and all(hasattr(obj, a) for a in _CLASSIC_NT_ATTRS))


def is_classic_nat_class(obj: Any) -> bool:
    """True for a class-per-type named array tuple such as rlpyt's ``namedarraytuple``."""
    # rlpyt's namedarraytuple: a namedtuple subclass overriding __getitem__
    # and adding get()/items().
    return (is_classic_namedtuple_class(obj)
            and obj.__getitem__ is not tuple.__getitem__
            and hasattr(obj, "get") and hasattr(obj, "items"))


def is_named_class(cls: Any) -> bool:
    """Whether ``cls`` is a named tuple class: a schema (array tuple or not), a
    stdlib or ``typing`` named tuple, or rlpyt's classic ``namedarraytuple``."""
    return isinstance(cls, NamedTupleSchema) or is_classic_namedtuple_class(cls)


def is_named(obj: Any) -> bool:
    """Whether ``obj`` is an instance of a named tuple class (see :func:`is_named_class`)."""
    return isinstance(obj, tuple) and is_named_class(type(obj))


def is_namedtuple_class(obj: object) -> bool:
    """True for named tuple classes that are not array tuples (classic or schema)."""
    if isinstance(obj, NamedTupleSchema):
        return not issubclass(obj, NamedArrayTuple)
    return is_classic_namedtuple_class(obj) and not is_classic_nat_class(obj)


def is_namedarraytuple_class(obj: object) -> bool:
    """True for named array tuple classes (rlpyt's classic ones or schemas)."""
    if isinstance(obj, NamedTupleSchema):
        return issubclass(obj, NamedArrayTuple)
    return is_classic_nat_class(obj)


def is_namedtuple(obj: object) -> bool:
    """True if ``obj`` is a named tuple instance that is not an array tuple."""
    return is_namedtuple_class(type(obj))


def is_namedarraytuple(obj: object) -> bool:
    """True if ``obj`` is a named array tuple instance (classic or schema)."""
    return is_namedarraytuple_class(type(obj))


def _name_and_fields(example: Any) -> tuple[str, tuple[str, ...]] | None:
    """(typename, fields) of a named tuple instance or class, or None."""
    cls: Any = example if isinstance(example, type) else type(example)
    if isinstance(cls, NamedTupleSchema) or issubclass(cls, NamedTuple):
        return cls._typename, cls._fields
    if is_classic_namedtuple_class(cls):
        return cls.__name__, tuple(cls._fields)
    return None


@overload
def namedarraytuple_like(namedtuple_or_class: type[_NAT] | _NAT,
                         classname_suffix: bool = False) -> type[_NAT]: ...
@overload
def namedarraytuple_like(namedtuple_or_class: Any,
                         classname_suffix: bool = False) -> type[DynamicNamedArrayTuple]: ...


def namedarraytuple_like(namedtuple_or_class: Any, classname_suffix: bool = False) -> Any:
    """An array schema with the name and fields of a named tuple instance or class.

    An array-tuple schema instance or class is returned as is (its class);
    anything else named (stdlib namedtuple, rlpyt's classic types, plain
    schemas) gets a new :class:`NamedArrayTupleSchema`.

    Raises:
        TypeError: the input is not a named tuple instance or class.
    """
    ntc = namedtuple_or_class
    cls = ntc if isinstance(ntc, type) else type(ntc)
    if isinstance(cls, NamedArrayTupleSchema) and is_registered_schema(cls):
        return cls
    found = _name_and_fields(ntc)
    if found is None:
        raise TypeError("namedarraytuple_like: expected a named tuple or named "
                        f"array tuple instance or class, got {type(ntc).__name__}")
    typename, fields = found
    if classname_suffix:
        typename += "_nat"
    return NamedArrayTupleSchema(typename, fields, module=cls.__module__
                                 if isinstance(cls.__module__, str) else None)


@overload
def NamedArrayTupleSchema_like(example: type[_NAT] | _NAT) -> type[_NAT]: ...
@overload
def NamedArrayTupleSchema_like(example: Any) -> type[DynamicNamedArrayTuple]: ...


def NamedArrayTupleSchema_like(example: Any) -> Any:  # rlpyt\'s name
    """rlpyt's name for :func:`namedarraytuple_like` (returns a schema)."""
    return namedarraytuple_like(example)


# --------------------------------------------------------------------------
# Class syntax
# --------------------------------------------------------------------------

if TYPE_CHECKING:
    import numpy  # only for annotations: the core does not import numpy


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


def _refuse(base: type, name: str, what: str, cause: BaseException | None = None
            ) -> NoReturn:
    raise SchemaClassError(f"class {name}({base.__name__}): {what}") from cause


def _is_classvar(annotation: object) -> bool:
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        return text.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is typing.ClassVar or typing.get_origin(annotation) is typing.ClassVar


def _protected(base: type) -> frozenset[Any]:
    return frozenset(dir(base)) - _MAY_REPLACE | _SCHEMA_OWNED | _SILENT_FALLBACK


def _owner(base: type, name: str) -> str:
    for klass in base.__mro__:
        if name in klass.__dict__:
            return klass.__name__
    return base.__name__


_PROTECTED: dict[type, frozenset[Any]] = {NamedTuple: _protected(NamedTuple),
                                          NamedArrayTuple: _protected(NamedArrayTuple)}


def _namespace_annotations(namespace: Mapping[str, Any]) -> dict[str, Any]:
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


def _split_body(base: type, name: str, namespace: Mapping[str, Any]
                ) -> tuple[list[str], tuple[Any, ...], dict[str, Any], dict[str, Any]]:
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
    members: dict[str, Any] = {}
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


def _class_syntax(base: type, name: str, namespace: Mapping[str, Any]) -> NamedTupleSchema:
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
    except SchemaError as exc:  # a name Python itself would reject
        message = str(exc).removeprefix(f"{kind.__name__} {name!r}: ")
        _refuse(base, name, message, exc)
    if BODY_MARK in cls.__dict__:  # pragma: no cover - module-level ids are unique
        raise SchemaError(f"class {name}: schema id {cls._schema_id} is already "
                                  "taken by another class-syntax schema")
    # A new class, or one loaded by value before this module-level statement
    # ran (same id): either way it gets the body, so instances already loaded
    # gain the methods too.
    _attach_body(cls, body)
    return cls


def _attach_body(cls: type, body: dict[str, Any]) -> None:
    cell = body.pop("__classcell__", None)
    for key, value in body.items():
        setattr(cls, key, value)
    for key, value in body.items():
        set_name = getattr(type(value), "__set_name__", None)
        if set_name is not None:
            set_name(value, cls, key)
    if cell is not None:
        cell.cell_contents = cls


def _subclass_of_schema(mcls: type, name: str, bases: tuple[type, ...],
                        namespace: dict[str, Any], kwargs: dict[str, Any]) -> SchemaBaseMeta:
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


def _base_names(bases: Iterable[object]) -> str:
    return ", ".join(getattr(b, "__name__", repr(b)) for b in bases)


def class_statement(mcls: type, name: str, bases: tuple[type, ...], namespace: dict[str, Any],
                    kwargs: dict[str, Any]) -> SchemaBaseMeta:
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


def _field_annotations(schema: type[Any]) -> dict[str, Any]:
    annotations = schema.__dict__.get("__annotations__", {})
    return {f: annotations[f] for f in schema._fields if f in annotations}


def _resolve(schema: type[Any], field: str, annotation: object) -> Any:
    # Only a class body's own annotations get here: by-value copies carry none,
    # so nothing read from a file is ever evaluated.
    if not isinstance(annotation, str):
        return annotation
    module = sys.modules.get(schema.__module__)
    scope = dict(vars(module)) if module is not None else {}
    try:
        return eval(annotation, scope, dict(vars(schema)))  # the user's own annotation
    except Exception as exc:  # reported with schema and field
        raise SchemaError(
            f"{schema._typename}.{field}: cannot evaluate the annotation {annotation!r} "
            f"to find its declared dtype ({type(exc).__name__}: {exc})") from exc


def _dtype_of(annotation: Any, np: ModuleType) -> numpy.dtype[Any] | None:
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
            dtype: numpy.dtype[Any] = np.dtype(annotation)
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
        SchemaError: a string annotation cannot be evaluated.
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


# --------------------------------------------------------------------------
# What type checkers see
# --------------------------------------------------------------------------

if TYPE_CHECKING:
    from .instance import NamedArrayTuple, NamedTuple

    class DynamicNamedTuple(NamedTuple, metaclass=NamedTupleSchema):
        def __init__(self, *args: Any, **kwargs: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...

    class DynamicNamedArrayTuple(NamedArrayTuple, metaclass=NamedArrayTupleSchema):
        def __init__(self, *args: Any, **kwargs: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...


def _load_write_checks() -> Any:
    """The write checks (``writes``, which needs numpy), bound to the core's rules."""
    writes = importlib.import_module("namedschema._core.writes")
    return writes.write_checker(SCALAR_RULES, is_named)


install_write_check(_load_write_checks)
