"""rlpyt's sample types that no fresh interpreter can find by name (rlpyt issue #111).

rlpyt assigns some module globals only when a buffer is built
(``BufferSamples`` in ``rlpyt.replays.frame``, ``SamplesToBuffer`` in
``rlpyt.replays.sequence.n_step``: ``None`` until then), and makes others at
run time in no module at all (``namedarraytuple_like``: an ``EnvInfo`` "of"
``rlpyt.utils.collections``). A pickle that names them loads nowhere but in
the process that wrote it. This module knows them:

LAZY_GLOBALS        the lazily assigned globals, ``(module, name)``
GLOBALS_KEY         the key under which a patched buffer's state carries their schemas
used_lazy_globals   the lazily assigned schemas a replay buffer of this class uses
assign_lazy_globals set them, as the buffer's constructor would, when a buffer loads
refuse_unloadable   raise for a class a pickle would name but a fresh process not find
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from ..._core.schema import NamedTupleSchema
from ...errors import UnpicklableError

__all__ = ["LAZY_GLOBALS", "GLOBALS_KEY", "used_lazy_globals", "assign_lazy_globals",
           "refuse_unloadable"]

LAZY_GLOBALS = (("rlpyt.replays.frame", "BufferSamples"),
                ("rlpyt.replays.sequence.n_step", "SamplesToBuffer"))
GLOBALS_KEY = "_namedschema_rlpyt_globals"


def used_lazy_globals(cls) -> dict[str, Any]:
    """``{"module:name": schema}`` of the lazy globals that ``cls``'s modules hold as schemas."""
    modules = {c.__module__ for c in cls.__mro__}
    used = {}
    for module_name, name in LAZY_GLOBALS:
        value = getattr(sys.modules.get(module_name), name, None)
        if module_name in modules and isinstance(value, NamedTupleSchema):
            used[f"{module_name}:{name}"] = value
    return used


def assign_lazy_globals(used: dict[str, Any]) -> None:
    """Assign rlpyt's lazy globals (as the buffer constructor does) from :func:`used_lazy_globals`.

    As in rlpyt, the buffer built (here: loaded) last sets them.
    """
    for key, schema in used.items():
        module_name, _, name = key.partition(":")
        if (module_name, name) not in LAZY_GLOBALS:
            continue
        module = sys.modules.get(module_name)
        if module is None:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
        setattr(module, name, schema)


def refuse_unloadable(cls) -> None:
    """Raise UnpicklableError if pickling class ``cls`` by name would make an unloadable file.

    Called for rlpyt's classes by :func:`namedschema.save`'s pickler. Schemas
    (rlpyt patched by :func:`namedschema.patch_rlpyt`) pickle by value and pass.
    """
    module_name = getattr(cls, "__module__", None) or ""
    if isinstance(cls, NamedTupleSchema) or not (module_name == "rlpyt"
                                                 or module_name.startswith("rlpyt.")):
        return
    name = getattr(cls, "__qualname__", "?")
    where = f"{module_name}.{name}"
    if (module_name, name) in LAZY_GLOBALS:
        why = ("rlpyt assigns this class to a module global only when it builds a buffer, "
               "so a fresh interpreter would not find it and could not load the file "
               "(rlpyt issue #111)")
    elif getattr(sys.modules.get(module_name), name, None) is not cls:
        why = (f"rlpyt made this class at run time; {module_name} does not hold it, so "
               "no process could load it by name")
    else:
        return
    raise UnpicklableError(where, f"class {where}",
                           why + ": call namedschema.patch_rlpyt() before rlpyt builds its "
                           "objects (its types then pickle by value), or checkpoint the "
                           "run with namedschema.rlpyt.resumable")
