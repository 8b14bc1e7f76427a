"""The schema metaclasses: NamedTupleSchema and NamedArrayTupleSchema.

A schema is a class (so ``type(instance) is Schema`` and every namedtuple idiom
holds) whose metaclass adds three things a namedtuple class lacks:

* a random ``_schema_id`` and a copyreg reducer, so the class pickles by value
  and unpickles to one class per id in each process (see ``_pickle``);
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
"""

from __future__ import annotations

import copyreg
import hashlib
import keyword
import sys
import threading
import unicodedata
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast, overload

from ..errors import SchemaDefinitionError
from . import pickling as _pickle
from .codegen import accessors_for, compile_source
from .instance import NamedArrayTuple, NamedTuple, SchemaBaseMeta
from .limits import check_field_count

if TYPE_CHECKING:
    from .dynamic_types import DynamicNamedArrayTuple, DynamicNamedTuple

try:  # CPython's C descriptor, as used by collections.namedtuple
    from _collections import _tuplegetter
except ImportError:  # pragma: no cover - other interpreters
    from operator import itemgetter as _itemgetter

    def _tuplegetter(index, doc):
        return property(_itemgetter(index), doc=doc)

__all__ = ["NamedTupleSchema", "NamedArrayTupleSchema", "build_schema", "same_definition"]

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


def _module_level_id(kind, module, typename, fields, defaults) -> str | None:
    first = _pickle.derived_schema_id(kind, module, typename, fields, defaults)
    if first is None:
        return None
    with _seen_lock:
        count = _module_level_seen.get(first, 0)
        _module_level_seen[first] = count + 1
    if count == 0:
        return first
    return _pickle.derived_schema_id(kind, module, typename, fields, defaults, count)


def _normalize_names(kind, typename, field_names, rename, reserved):
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
            raise SchemaDefinitionError(
                f"{kind} {typename!r}: {what} {name!r} is not a valid identifier")
        if unicodedata.normalize("NFKC", name) != name:
            # Python reads identifiers in NFKC form ('\ufb01' is read as 'fi'), so
            # such a name could never be used as an attribute or keyword.
            raise SchemaDefinitionError(
                f"{kind} {typename!r}: {what} {name!r} is not in NFKC normal form "
                f"(Python would read it as {unicodedata.normalize('NFKC', name)!r})")
        if keyword.iskeyword(name):
            raise SchemaDefinitionError(
                f"{kind} {typename!r}: {what} {name!r} is a keyword")

    seen = set()
    for name in field_names:
        if name.startswith("_") and not rename:
            raise SchemaDefinitionError(
                f"{kind} {typename!r}: field name {name!r} starts with an "
                "underscore (reserved for schema methods such as _fields)")
        if name in seen:
            raise SchemaDefinitionError(
                f"{kind} {typename!r}: duplicate field name {name!r}")
        if name in reserved:
            raise SchemaDefinitionError(
                f"{kind} {typename!r}: field name {name!r} would hide the "
                f"method {kind}.{name}() that every instance has "
                f"(reserved: {', '.join(sorted(reserved))})")
        seen.add(name)
    return typename, tuple(field_names)


def _make_new(typename, fields, defaults):
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
    new = namespace["__new__"]
    new.__qualname__ = f"{typename}.__new__"
    new.__doc__ = f"Create new instance of {typename}({values})"
    if defaults is not None:
        new.__defaults__ = defaults
    return new


def _make_make(typename, n_fields, _tuple_new=_tuple_new, _len=len):
    def _make(cls, iterable):
        """Make a new instance from a sequence or iterable of field values."""
        result = _tuple_new(cls, iterable)
        if _len(result) != n_fields:
            raise TypeError(f"{typename}._make: expected {n_fields} values, "
                            f"got {len(result)}")
        return result
    _make.__qualname__ = f"{typename}._make"
    return classmethod(_make)


def _defaults_equal(a: tuple, b: tuple) -> bool:
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
        SchemaDefinitionError: (a ValueError) a name is invalid, a keyword,
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

    def __new__(mcls, typename, field_names, namespace=None, /, *,
                rename=False, defaults=None, module=None, **kwargs):
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


def build_schema(mcls, typename, field_names, *, rename=False, defaults=None,
                 module=None, schema_id=None, module_level=False):
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
            _pickle.adopt_rebuilt(existing, module)
            return existing
    if schema_id is None:
        schema_id = uuid.uuid4().hex

    namespace = {
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


def _builder(mcls):
    def build(typename, fields, *, defaults, module, schema_id):
        return build_schema(mcls, typename, fields, defaults=defaults, module=module,
                            schema_id=schema_id)
    return build


for _mcls in (NamedTupleSchema, NamedArrayTupleSchema):
    _pickle.KINDS[_mcls.__name__] = (_mcls, _builder(_mcls))
    copyreg.pickle(_mcls, _pickle.reduce_schema)
del _mcls
