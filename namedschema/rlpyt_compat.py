"""Old name of :mod:`namedschema.rlpyt.patch` (the rlpyt drop-in), kept importable.

``import namedschema.rlpyt_compat`` gives that very module, so its functions,
classes and state are one and the same under both names.
"""

import sys

from .rlpyt import patch as _patch

sys.modules[__name__] = _patch
