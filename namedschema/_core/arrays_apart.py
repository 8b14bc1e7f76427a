"""Whether the pickler now running keeps arrays out of the pickle (``namedschema.save``'s).

The checkpoint's pickler stores every array raw in the file and keeps views as
views itself. Reductions that would otherwise turn views into offsets for plain
pickle (``namedschema.rlpyt.patch.pickling``) ask :func:`arrays_kept_apart` and
hand the arrays over as they are. The flag lives here, below both layers: the
checkpoint sets it, the patch reads it, and neither looks into the other.

keeping_arrays_apart   context manager: the flag is set while it runs
arrays_kept_apart      whether the flag is set (in this thread or task)
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["keeping_arrays_apart", "arrays_kept_apart"]

_kept_apart = contextvars.ContextVar("namedschema_arrays_kept_apart", default=False)


@contextlib.contextmanager
def keeping_arrays_apart() -> Iterator[None]:
    """Set the flag while the block runs: the pickler in it stores arrays itself."""
    token = _kept_apart.set(True)
    try:
        yield
    finally:
        _kept_apart.reset(token)


def arrays_kept_apart() -> bool:
    """True inside :func:`keeping_arrays_apart`: arrays go to the pickler's own store."""
    return _kept_apart.get()
