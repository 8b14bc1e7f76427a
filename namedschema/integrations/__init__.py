"""Integrations of schemas with other libraries: torch, cloudpickle and Ray, pytrees.

Most of them need no code: schema instances are tuples that pickle through
``__getnewargs__``, so Ray, ``torch.multiprocessing`` and protocol-5
out-of-band pickling handle them as they handle any tuple, and pytree
libraries recognise them as namedtuples. What does need code lives here,
and nothing in this package imports an optional dependency at import time:
hooks wait for the library to be imported.

install            install every hook below (``import namedschema`` runs it)
_torch_hook        lets ``torch.load(..., weights_only=True)`` accept schemas
_cloudpickle_hook  makes cloudpickle (so Ray) ship schema classes by id
import_hooks      run a callback right after a module is imported
torch              helpers for torch users (imports torch): ``safe_globals``,
                   ``register_safe_globals``, ``batch_dims``, ``share_memory_``
"""

from . import _cloudpickle_hook, _torch_hook

__all__ = ["install"]


def install() -> None:
    """Install the torch and cloudpickle hooks; cheap, idempotent, imports neither."""
    _torch_hook.install()
    _cloudpickle_hook.install()
