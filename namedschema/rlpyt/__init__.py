"""rlpyt support: resume a training run exactly, and the rlpyt drop-in patch.

resumable   make an rlpyt runner continue from its checkpoint (namedschema.rlpyt.resume)
SamplerWorkerError
            a parallel sampler's worker failed in a resumable run (raised in the
            main process instead of rlpyt's wait forever)
patch_rlpyt, unpatch_rlpyt, is_patched, RlpytPatch, RlpytImportError
            the drop-in (namedschema.rlpyt.patch)
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

# public name -> submodule that defines it; loaded on first use.
_LAZY = {
    "resumable": "resume.runner",
    "ResumeError": "resume.runner",
    "ResumeWarning": "resume.runner",
    "SamplerWorkerError": "resume.workers",
    "register_handler": "resume.state",
    "patch_rlpyt": "patch.install",
    "unpatch_rlpyt": "patch.install",
    "is_patched": "patch.install",
    "RlpytPatch": "patch.install",
    "RlpytImportError": "patch.install",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(_LAZY)
