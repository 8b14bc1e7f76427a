"""The top-level API as type checkers see it."""

from typing import Any, assert_type

import numpy as np

import namedschema
import namedschema.checkpoint
from namedschema import (
    FieldError,
    NamedSchemaError,
    SchemaClassError,
    SchemaConflictError,
    SchemaDefinitionError,
)


class Step(namedschema.NamedArrayTuple):
    obs: np.ndarray
    reward: float = 0.0


class Pair(namedschema.NamedTuple):
    left: int
    right: int


step = Step(np.zeros(3))
assert_type(namedschema.is_namedtuple(Pair(1, 2)), bool)
assert_type(namedschema.is_namedarraytuple(step), bool)
assert_type(namedschema.is_namedtuple_class(Pair), bool)
assert_type(namedschema.is_namedarraytuple_class(Step), bool)
assert_type(namedschema.namedarraytuple_like(step), type[Step])
assert_type(namedschema.__version__, str)

# Instances are instances of the base classes and of tuple.
nt: tuple[object, ...] = step  # namedschema.NamedTuple is typing.NamedTuple to checkers
nat: namedschema.NamedArrayTuple = step
pair_tuple: tuple[object, ...] = Pair(1, 2)

# The error hierarchy: class-syntax errors are ValueErrors and TypeErrors.
value_error: ValueError = SchemaClassError("x")
type_error: TypeError = SchemaClassError("x")
definition_error: SchemaDefinitionError = SchemaClassError("x")
base_error: NamedSchemaError = SchemaConflictError("x")
assert issubclass(FieldError, NamedSchemaError)

# The lazily imported parts are attributes of the package.
assert callable(namedschema.save) and callable(namedschema.load)
assert callable(namedschema.inspect) and callable(namedschema.patch_rlpyt)

# ... with their real signatures.
assert_type(namedschema.load("replay.nsb", mmap_mode="r"), Any)
assert_type(namedschema.save({"samples": step}, "replay.nsb"), None)
info: namedschema.checkpoint.CheckpointInfo = namedschema.inspect("replay.nsb")
