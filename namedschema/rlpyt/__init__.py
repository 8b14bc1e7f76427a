"""rlpyt support: resume a training run exactly, and the rlpyt drop-in patch.

resumable   make an rlpyt runner continue from its checkpoint (namedschema.rlpyt.resume)
checkpoint_history, CheckpointStat
            what each checkpoint of a resumable runner wrote (kind, bytes, why full)
WorkerError a parallel sampler's worker failed in a resumable run (raised in the
            main process instead of rlpyt's wait forever; ``SamplerWorkerError``,
            its deprecated name, is the same class)
patch_rlpyt, unpatch_rlpyt, is_patched, RlpytPatch
            the drop-in (namedschema.rlpyt.patch); ``RlpytImportError`` is the
            deprecated name of the MissingModuleError raised without rlpyt
namedschema.rlpyt.atari_py_adapter
            ``install()`` makes ``import atari_py`` give an adapter over ale-py,
            so rlpyt's own ``AtariEnv`` runs on Python 3.11+ (unless a real
            atari_py is installed)
namedschema.rlpyt.patch.pickling
            the reductions the patch gives rlpyt's replay buffers, sum trees,
            ``RWLock`` and ``AttrDict``, so plain pickle keeps views and locks right

Nothing here imports rlpyt (or torch) until a name is used.
"""

from importlib import import_module
from typing import TYPE_CHECKING

# Pickles of patched rlpyt objects call ``namedschema.rlpyt.pickling.*``; cloudpickle
# pickles those by value unless their module is already imported.
from . import pickling as pickling

if TYPE_CHECKING:  # what the lazy names below are, for type checkers (``x as x``: re-exports)
    from ..errors import ResumeError as ResumeError
    from ..errors import ResumeWarning as ResumeWarning
    from ..errors import RlpytImportError as RlpytImportError
    from ..errors import SamplerWorkerError as SamplerWorkerError
    from ..errors import WorkerError as WorkerError
    from .patch.install import RlpytPatch as RlpytPatch
    from .patch.install import is_patched as is_patched
    from .patch.install import patch_rlpyt as patch_rlpyt
    from .patch.install import unpatch_rlpyt as unpatch_rlpyt
    from .resume.checkpoint_writer import CheckpointStat as CheckpointStat
    from .resume.checkpoint_writer import checkpoint_history as checkpoint_history
    from .resume.runner import resumable as resumable
    from .resume.state import register_handler as register_handler

# public name -> submodule that defines it; loaded on first use.
_LAZY = {
    "resumable": "resume.runner",
    "checkpoint_history": "resume.checkpoint_writer",
    "CheckpointStat": "resume.checkpoint_writer",
    "ResumeError": "resume.runner",
    "ResumeWarning": "resume.runner",
    "SamplerWorkerError": "resume.workers",
    "WorkerError": "resume.workers",
    "register_handler": "resume.state",
    "patch_rlpyt": "patch.install",
    "unpatch_rlpyt": "patch.install",
    "is_patched": "patch.install",
    "RlpytPatch": "patch.install",
    "RlpytImportError": "patch.install",
}


if not TYPE_CHECKING:  # checkers see the imports above, and flag any other name
    def __getattr__(name):
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(_LAZY)  # noqa: PLE0605 -- the lazy table is the one list of names
