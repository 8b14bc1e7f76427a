"""The pickle path: a whole graph that is not data, with its arrays kept out of the pickle.

Arrays the file can store raw are sent to the array table as persistent
references ``("array", i)``, so they are written once, raw, and loaded as
views of their blocks like those of a data graph. Each is named by the path
that reaches it in the graph (:mod:`.naming`), so ``inspect`` can tell them
apart. An import that fails while unpickling raises MissingModuleError or
MissingClassError: a problem of this process, not of the file.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from .._core.pickling import keeping_arrays_apart
from ..errors import MissingClassError, MissingModuleError, StructureMismatchError
from .arrays import ArrayTable, is_storable
from .naming import ArrayNames, array_paths


class _Pickler(pickle.Pickler):
    """Protocol-5 pickler sending every storable array to the array table."""

    def __init__(self, file: io.BytesIO, arrays: ArrayTable, names: ArrayNames) -> None:
        super().__init__(file, protocol=5)
        self._arrays = arrays
        self._names = names

    def reducer_override(self, obj: Any) -> Any:
        # Classes are pickled by name: refuse rlpyt's that no fresh process can
        # find (rlpyt issue #111), rather than write a file that cannot load.
        if isinstance(obj, type) and (getattr(obj, "__module__", None) or "").startswith(
                "rlpyt"):
            from ..rlpyt.patch.lazy_globals import refuse_unloadable
            refuse_unloadable(obj)
        return NotImplemented

    def persistent_id(self, obj: Any) -> Any:
        if not is_storable(obj):
            return None
        name = self._names.name_of(obj) or f"pickled[{len(self._arrays.entries)}]"
        try:
            return ("array", self._arrays.add(obj, name))
        except StructureMismatchError:
            return None  # e.g. a CUDA tensor: let torch pickle it itself


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, arrays: list[Any]) -> None:
        super().__init__(file)
        self._arrays = arrays

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except ImportError as exc:
            raise MissingModuleError(module, name, f"{type(exc).__name__}: {exc}") from exc
        except AttributeError as exc:
            raise MissingClassError(module, name, f"{type(exc).__name__}: {exc}") from exc

    def persistent_load(self, pid: Any) -> Any:
        if (type(pid) is tuple and len(pid) == 2 and pid[0] == "array"
                and type(pid[1]) is int and 0 <= pid[1] < len(self._arrays)):
            return self._arrays[pid[1]]
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def dumps(obj: Any, arrays: ArrayTable) -> bytes:
    """A protocol-5 pickle of ``obj`` whose storable arrays are added to ``arrays``."""
    buffer = io.BytesIO()
    # Reductions that turn views into offsets for plain pickle (rlpyt's buffers under
    # the patch) hand the arrays over as they are: the array table keeps views.
    with keeping_arrays_apart():
        _Pickler(buffer, arrays, array_paths(obj, is_storable)).dump(obj)
    return buffer.getvalue()


def loads(data: Any, arrays: list[Any]) -> Any:
    """Unpickle ``data`` (a buffer), resolving array references into ``arrays``."""
    try:
        return _Unpickler(io.BytesIO(memoryview(data)), arrays).load()
    except ModuleNotFoundError as exc:  # an import inside a reduce function
        if isinstance(exc, MissingModuleError):
            raise
        raise MissingModuleError(exc.name or "?", "<import>", f"{type(exc).__name__}: "
                                 f"{exc}") from exc
