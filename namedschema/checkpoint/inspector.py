"""Where pickles made before issue 29 find CheckpointInfo, FieldInfo: ``namedschema.checkpoint.inspector``.

The classes live in ``namedschema.checkpoint._read``; a pickle stores a class by module and name,
so this path stays importable for pickles written before the modules were merged.
"""

from ._read import CheckpointInfo, FieldInfo

__all__ = ["CheckpointInfo", "FieldInfo"]
