"""Factory-made schemas: fields are unknown (Any), the schema API keeps its types."""

from typing import Any, assert_type

import numpy as np

import namedschema
from namedschema import (
    NamedArrayTupleSchema,
    NamedTupleSchema,
    namedarraytuple,
    namedarraytuple_like,
    namedtuple,
)
from namedschema._core.schema import DynamicNamedArrayTuple, DynamicNamedTuple

Point = NamedTupleSchema("Point", "x y", defaults=(0,))
assert_type(Point, type[DynamicNamedTuple])
p = Point(1, y=2)
assert_type(p, DynamicNamedTuple)
assert_type(p.x, Any)
assert_type(p._replace(x=3), DynamicNamedTuple)
assert_type(p._fields, tuple[str, ...])
assert_type(Point._make([1, 2]), DynamicNamedTuple)

Batch = NamedArrayTupleSchema("Batch", ["obs", "act"])
assert_type(Batch, type[DynamicNamedArrayTuple])
b = Batch(np.zeros(3), np.ones(3))
assert_type(b, DynamicNamedArrayTuple)
assert_type(b[1:], DynamicNamedArrayTuple)
assert_type(b.obs, Any)

assert_type(namedtuple("P", "a b"), type[DynamicNamedTuple])
assert_type(namedtuple("P", ["a"], defaults=[1], module="m"), type[DynamicNamedTuple])
assert_type(namedarraytuple("S", "a b"), type[DynamicNamedArrayTuple])
assert_type(namedarraytuple("S", "a b", False), type[DynamicNamedArrayTuple])
assert_type(namedarraytuple("S", "a b", return_namedtuple_cls=True),
            tuple[type[DynamicNamedArrayTuple], type[DynamicNamedTuple]])
nat, nt = namedarraytuple("S", ["a"], True, classname_suffix=True)
assert_type(nat, type[DynamicNamedArrayTuple])
assert_type(nt, type[DynamicNamedTuple])


class Step(namedschema.NamedArrayTuple):
    obs: np.ndarray


assert_type(namedarraytuple_like(Step), type[Step])
assert_type(namedarraytuple_like(Step(np.zeros(2))), type[Step])
assert_type(namedarraytuple_like(Point), type[DynamicNamedArrayTuple])
assert_type(namedschema.NamedArrayTupleSchema_like(Step), type[Step])

assert_type(namedschema.is_namedtuple(p), bool)
assert_type(namedschema.is_namedarraytuple_class(Batch), bool)
assert isinstance(Batch, NamedArrayTupleSchema) and isinstance(Point, NamedTupleSchema)
