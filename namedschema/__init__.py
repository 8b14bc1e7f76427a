"""namedschema: named tuples and named array tuples that pickle by value.

Schemas (``NamedTupleSchema``, ``NamedArrayTupleSchema``) are classes made at
run time, like ``collections.namedtuple``'s, that carry their definition into
every pickle, so instances load in any process, fresh interpreters included.

NamedTupleSchema, NamedArrayTupleSchema   the schema metaclasses / factories
NamedTuple, NamedArrayTuple               base classes of every instance; subclass
                                          one to define a schema with class syntax
namedtuple, namedarraytuple, ...          rlpyt-compatible functions (import swap)
save, load, inspect                       checkpoints (namedschema.checkpoint, lazy)
upgrade                                   map saved schemas onto today's (namedschema.evolution, lazy)
patch_rlpyt, unpatch_rlpyt                rlpyt drop-in (namedschema.rlpyt.patch, lazy)
namedschema.buffer                        rlpyt's buffer helpers, shared memory
namedschema.errors                        the exception classes (re-exported here)
"""

import typing as _typing

from . import _classdef  # noqa: F401 - installs class syntax (class P(NamedTuple): ...)
from ._attrdict import AttrDict
from ._factories import (
    NamedArrayTupleSchema_like,
    is_namedarraytuple,
    is_namedarraytuple_class,
    is_namedtuple,
    is_namedtuple_class,
    namedarraytuple,
    namedarraytuple_like,
    namedtuple,
)
from ._instance import NamedArrayTuple, NamedTuple
from ._schema import NamedArrayTupleSchema, NamedTupleSchema
from .errors import (
    ExtraFieldError,
    FieldError,
    FieldMismatchError,
    FormatError,
    MissingClassError,
    MissingFieldError,
    MissingModuleError,
    NamedSchemaError,
    NotDataError,
    SchemaClassError,
    SchemaConflictError,
    SchemaDefinitionError,
    SchemaEvolutionError,
    StructureMismatchError,
    UnpicklableError,
    UnsafeLoadError,
)

__version__ = "0.1.0"

if _typing.TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from .checkpoint import inspect, load, save
    from .evolution import upgrade
    from .rlpyt_compat import patch_rlpyt, unpatch_rlpyt

# Heavier parts load on first use, so ``import namedschema`` costs only the core.
_LAZY = {
    "save": "checkpoint",
    "load": "checkpoint",
    "inspect": "checkpoint",
    "upgrade": "evolution",
    "patch_rlpyt": "rlpyt.patch",
    "unpatch_rlpyt": "rlpyt.patch",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'namedschema' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AttrDict",
    "ExtraFieldError",
    "FieldError",
    "FieldMismatchError",
    "FormatError",
    "MissingClassError",
    "MissingFieldError",
    "MissingModuleError",
    "NamedArrayTuple",
    "NamedArrayTupleSchema",
    "NamedArrayTupleSchema_like",
    "NamedSchemaError",
    "NamedTuple",
    "NamedTupleSchema",
    "NotDataError",
    "SchemaClassError",
    "SchemaConflictError",
    "SchemaDefinitionError",
    "SchemaEvolutionError",
    "StructureMismatchError",
    "UnpicklableError",
    "UnsafeLoadError",
    "is_namedarraytuple",
    "is_namedarraytuple_class",
    "is_namedtuple",
    "is_namedtuple_class",
    "namedarraytuple",
    "namedarraytuple_like",
    "namedtuple",
    "save",
    "load",
    "inspect",
    "upgrade",
    "patch_rlpyt",
    "unpatch_rlpyt",
]

# Hooks that wait for torch / cloudpickle to be imported (neither is imported
# here): torch.load(weights_only=True) accepts schemas, and cloudpickle (so Ray)
# ships schema classes by id.
from .integrations import install as _install_integrations  # noqa: E402

_install_integrations()
