"""namedschema: named tuples and named array tuples that pickle by value.

Schemas (``NamedTupleSchema``, ``NamedArrayTupleSchema``) are classes made at
run time, like ``collections.namedtuple``'s, that carry their definition into
every pickle, so instances load in any process, fresh interpreters included.

NamedTupleSchema, NamedArrayTupleSchema   the schema metaclasses / factories
NamedTuple, NamedArrayTuple               base classes of every instance; subclass
                                          one to define a schema with class syntax
namedtuple, namedarraytuple, ...          rlpyt-compatible functions (import swap)
save, load, inspect                       checkpoints (namedschema.checkpoint, lazy)
BackgroundSave                            what save(..., background=True) returns (lazy)
upgrade                                   map saved schemas onto today's (namedschema.evolution, lazy)
patch_rlpyt, unpatch_rlpyt                rlpyt drop-in (namedschema.rlpyt.patch, lazy)
ReplayBuffer, PrioritizedReplayBuffer     replay buffers that resume exactly (namedschema.training.replay, lazy)
RunCheckpoint                             checkpoint and resume a whole training loop (lazy)
namedschema.buffer                        rlpyt's buffer helpers, shared memory
namedschema.testing                       check_resume: does a training command resume exactly?
namedschema.errors                        the exception classes (re-exported here)
same_definition                           whether two schemas have one definition
declared_dtypes, has_class_body           what a class-syntax schema declares: field
                                          dtypes, and whether its body runs here

Layers, lowest first: a module imports only its own layer and lower ones (function
bodies included), and nothing inside the package imports a front door
(tests/meta/test_layers.py reads this table and checks it):

    standalone     rlpyt/atari_py_adapter.py (loaded from its file: imports nothing)
    leaves         errors.py _process.py _version.py
    core           _core/ _pickle.py
    integrations   integrations/
    state          state/
    buffer         buffer/
    evolution      evolution/
    rlpyt.patch    rlpyt/patch/ rlpyt/pickling.py
    checkpoint     checkpoint/
    training       training/
    rlpyt.resume   rlpyt/resume/
    ray            ray/
    sb3            sb3/
    testing        testing/
    front doors    __init__.py rlpyt/__init__.py
    apps           apps/ __main__.py

The lazy names load their module on first use, so ``import namedschema``
costs only the core (the standard library). They are not in ``__all__``:
``from namedschema import *`` would otherwise import them all and replace
the stdlib ``inspect`` module in the importing namespace. Type checkers see
them through the ``TYPE_CHECKING`` imports below, with their real signatures.
"""

import typing as _typing

# Pickles call ``namedschema._pickle.rebuild_schema``; cloudpickle pickles that function
# by value (with the core's registry and lock) unless its module is already imported.
from . import _pickle as _pickle
from ._core.attrdict import AttrDict
from ._core.instance import NamedArrayTuple
from ._core.pickling import on_schema_use as _on_schema_use
from ._core.schema import (  # also installs class syntax
    NamedArrayTupleSchema_like,
    declared_dtypes,
    has_class_body,
    is_namedarraytuple,
    is_namedarraytuple_class,
    is_namedtuple,
    is_namedtuple_class,
    namedarraytuple,
    namedarraytuple_like,
    namedtuple,
)

if _typing.TYPE_CHECKING:
    # Type checkers read ``class Point(namedschema.NamedTuple): x: int`` as they read a
    # ``typing.NamedTuple``: unpacking and indexing then keep each field's type. At run
    # time the class statement makes a schema (namedschema._core.instance.NamedTuple).
    from typing import NamedTuple as NamedTuple
else:
    from ._core.instance import NamedTuple
from ._core.schema import NamedArrayTupleSchema, NamedTupleSchema, same_definition
from ._version import __version__ as __version__
from .errors import (
    BackgroundSaveError,
    ExtraFieldError,
    FieldError,
    FieldMismatchError,
    FormatError,
    MissingClassError,
    MissingFieldError,
    MissingModuleError,
    NamedSchemaError,
    NotDataError,
    SaveError,
    SchemaClassError,
    SchemaConflictError,
    SchemaDefinitionError,
    SchemaError,
    SchemaEvolutionError,
    StructureMismatchError,
    UnpicklableError,
    UnsafeLoadError,
)
from .integrations import hook_loaded as _hook_loaded

if _typing.TYPE_CHECKING:  # what the lazy names below are, for type checkers
    # ``x as x``: an explicit re-export (PEP 484), though not in __all__.
    from .checkpoint import BackgroundSave as BackgroundSave
    from .checkpoint import inspect as inspect
    from .checkpoint import load as load
    from .checkpoint import save as save
    from .evolution import upgrade as upgrade
    from .rlpyt.patch import patch_rlpyt as patch_rlpyt
    from .rlpyt.patch import unpatch_rlpyt as unpatch_rlpyt
    from .training.replay import PrioritizedReplayBuffer as PrioritizedReplayBuffer
    from .training.replay import ReplayBuffer as ReplayBuffer
    from .training.run_checkpoint import RunCheckpoint as RunCheckpoint

# Heavier parts load on first use, so ``import namedschema`` costs only the core.
_LAZY = {
    "save": "checkpoint",
    "BackgroundSave": "checkpoint",
    "load": "checkpoint",
    "inspect": "checkpoint",
    "upgrade": "evolution._upgrade",
    "ReplayBuffer": "training.replay",
    "PrioritizedReplayBuffer": "training.replay",
    "RunCheckpoint": "training.run_checkpoint",
    "patch_rlpyt": "rlpyt.patch.install",
    "unpatch_rlpyt": "rlpyt.patch.install",
}


if not _typing.TYPE_CHECKING:  # checkers see the imports above, and flag any other name
    def __getattr__(name):
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'namedschema' has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AttrDict",
    "BackgroundSaveError",
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
    "SaveError",
    "SchemaClassError",
    "SchemaConflictError",
    "SchemaDefinitionError",
    "SchemaError",
    "SchemaEvolutionError",
    "StructureMismatchError",
    "UnpicklableError",
    "UnsafeLoadError",
    "declared_dtypes",
    "has_class_body",
    "is_namedarraytuple",
    "is_namedarraytuple_class",
    "is_namedtuple",
    "is_namedtuple_class",
    "namedarraytuple",
    "namedarraytuple_like",
    "namedtuple",
    "same_definition",
]

# No import hook: torch's weights_only allowlist and cloudpickle (so Ray) are hooked
# now if imported, else at the next schema made, unpickled or pickled after their import
# (namedschema.integrations; ``namedschema.integrations.install()`` hooks them at import).
_hook_loaded()
_on_schema_use(_hook_loaded)
