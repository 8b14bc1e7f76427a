"""Deprecated alias of :mod:`namedschema.checkpoint` (the name shadows the builtin ``format``).

Importing it warns; it re-exports the public names only and goes away in
namedschema 0.3. Use ``namedschema.save/load/inspect`` or
``namedschema.checkpoint``.
"""

import warnings

from .checkpoint import (
    FORMAT_NAME,
    FORMAT_VERSION,
    CheckpointInfo,
    FieldInfo,
    inspect,
    load,
    save,
)

warnings.warn("namedschema.format is deprecated; use namedschema.checkpoint "
              "(or namedschema.save/load/inspect)", DeprecationWarning, stacklevel=2)

__all__ = ["save", "load", "inspect", "CheckpointInfo", "FieldInfo",
           "FORMAT_NAME", "FORMAT_VERSION"]
