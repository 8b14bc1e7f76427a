"""rlpyt-compatible function API over the schemas (the import-swap surface).

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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from .instance import NamedArrayTuple, NamedTuple
from .pickling import is_registered_schema
from .schema import NamedArrayTupleSchema, NamedTupleSchema, build_schema, calling_module

if TYPE_CHECKING:
    from .dynamic_types import DynamicNamedArrayTuple, DynamicNamedTuple

_NAT = TypeVar("_NAT", bound=NamedArrayTuple)

__all__ = [
    "namedtuple", "namedarraytuple", "namedarraytuple_like",
    "NamedArrayTupleSchema_like", "is_namedtuple", "is_namedarraytuple",
    "is_namedtuple_class", "is_namedarraytuple_class",
]

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
    return build_schema(NamedTupleSchema, typename, field_names, rename=rename,
                        defaults=defaults, module=caller_module if module is None else module,
                        module_level=module_level)


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


def is_classic_namedtuple_class(obj) -> bool:
    """True for a class-per-type named tuple (stdlib namedtuple, rlpyt's), not a schema test."""
    return (isinstance(obj, type) and issubclass(obj, tuple) and obj is not tuple
            and all(hasattr(obj, a) for a in _CLASSIC_NT_ATTRS))


def is_classic_nat_class(obj) -> bool:
    """True for a class-per-type named array tuple such as rlpyt's ``namedarraytuple``."""
    # rlpyt's namedarraytuple: a namedtuple subclass overriding __getitem__
    # and adding get()/items().
    return (is_classic_namedtuple_class(obj)
            and obj.__getitem__ is not tuple.__getitem__
            and hasattr(obj, "get") and hasattr(obj, "items"))


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
