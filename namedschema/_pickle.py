"""The name pickles give schema classes: ``namedschema._pickle.rebuild_schema``.

A pickled schema class is a call to this function (see ``_core.pickling``). Its
module path is part of every pickle and checkpoint written since 0.1, so it stays
here however the package is arranged.
"""

from ._core.pickling import rebuild_schema

__all__ = ["rebuild_schema"]
