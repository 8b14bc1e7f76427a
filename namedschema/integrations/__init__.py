"""Integrations of schemas with other libraries: torch, cloudpickle and Ray, pytrees.

Most of them need no code: schema instances are tuples that pickle through
``__getnewargs__``, so Ray, ``torch.multiprocessing`` and protocol-5
out-of-band pickling handle them as they handle any tuple, and pytree
libraries recognise them as namedtuples. What does need code lives here,
and nothing in this package imports an optional dependency:

* torch: ``torch.load(..., weights_only=True)`` accepts schemas once two
  entries are on torch's allowlist (``_torch_hook``);
* cloudpickle (so Ray, joblib's loky workers, srsly): schema classes are
  shipped by id, one class per schema in every process (``_cloudpickle_hook``).

When they are installed. ``import namedschema`` installs no import hook: it
hooks the libraries already imported (``hook_loaded``) and has the core call
``hook_loaded`` again (``_core.pickling.on_schema_use``) whenever a schema is
made, rebuilt (unpickled) or pickled, so a library imported later is hooked
before the next schema travels through it. That covers everything but a process whose last schema
event came before the library's import and which then uses the library on
schemas directly: a fresh process that only ``torch.load``\\ s a weights-only
file (``import namedschema; import torch; torch.load(f)``), or a program that
made every schema before importing cloudpickle or Ray and then pickles
instances with it (its first pickle ships the class by value). Such
programs call :func:`install` once (it hooks the libraries imported and,
through an import hook, those imported later), or import the library first.

hook_loaded        hook the supported libraries imported by now; never imports one
install            hook them now, and those imported later (a ``sys.meta_path`` finder)
_torch_hook        lets ``torch.load(..., weights_only=True)`` accept schemas
_cloudpickle_hook  makes cloudpickle (so Ray) ship schema classes by id
import_hooks       run a callback right after a module is imported (explicit uses only)
torch              helpers for torch users (imports torch): ``safe_globals``,
                   ``register_safe_globals``, ``batch_dims``, ``share_memory_``
"""

import sys

__all__ = ["install", "hook_loaded"]


#: The modules whose presence makes a hook due (``_torch_hook._WATCHED`` and
#: ``_cloudpickle_hook.MODULES``; a test keeps them equal): a process that imported none
#: of them loads neither hook module.
_TORCH_MODULE = "torch.serialization"
_CLOUDPICKLE_MODULES = ("cloudpickle.cloudpickle", "ray.cloudpickle.cloudpickle",
                        "joblib.externals.cloudpickle.cloudpickle",
                        "srsly.cloudpickle.cloudpickle")

#: ``len(sys.modules)`` when ``hook_loaded`` last looked (a list: set without ``global``).
_seen = [-1]


def hook_loaded() -> None:
    """Hook torch and the cloudpickle copies that are imported now; cheap, imports none.

    It runs at every schema made, unpickled or pickled: when no module was
    imported since its last look, it returns at once (tens of nanoseconds).
    """
    count = len(sys.modules)
    if count == _seen[0]:
        return
    _seen[0] = count
    modules = sys.modules
    if _TORCH_MODULE in modules:
        from . import _torch_hook
        _torch_hook.register_if_loaded()
    if any(name in modules for name in _CLOUDPICKLE_MODULES):
        from . import _cloudpickle_hook
        _cloudpickle_hook.patch_loaded()


def install() -> None:
    """Hook torch and cloudpickle now if imported, else right after each is imported.

    Idempotent; imports neither. For the libraries not yet imported it puts a
    finder in ``sys.meta_path`` (:mod:`~namedschema.integrations.import_hooks`),
    which waits for their import: call it where a library is used on schemas
    with no schema made, unpickled or pickled since it was imported (see above).
    """
    from . import _cloudpickle_hook, _torch_hook
    _torch_hook.install()
    _cloudpickle_hook.install()

