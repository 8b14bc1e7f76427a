"""The pickle path: a whole graph that is not data, with its arrays kept out of the pickle.

Arrays the file can store raw are sent to the array table as persistent
references ``("array", i)``, so they are written once, raw, and loaded as
views of their blocks like those of a data graph.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from ..errors import StructureMismatchError
from .arrays import ArrayTable, is_storable


class _Pickler(pickle.Pickler):
    """Protocol-5 pickler sending every storable array to the array table."""

    def __init__(self, file: io.BytesIO, arrays: ArrayTable):
        super().__init__(file, protocol=5)
        self._arrays = arrays

    def persistent_id(self, obj: Any) -> Any:
        if not is_storable(obj):
            return None
        try:
            return ("array", self._arrays.add(obj, f"pickled[{len(self._arrays.entries)}]"))
        except StructureMismatchError:
            return None  # e.g. a CUDA tensor: let torch pickle it itself


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, arrays: list):
        super().__init__(file)
        self._arrays = arrays

    def persistent_load(self, pid: Any) -> Any:
        if (type(pid) is tuple and len(pid) == 2 and pid[0] == "array"
                and type(pid[1]) is int and 0 <= pid[1] < len(self._arrays)):
            return self._arrays[pid[1]]
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def dumps(obj: Any, arrays: ArrayTable) -> bytes:
    """A protocol-5 pickle of ``obj`` whose storable arrays are added to ``arrays``."""
    buffer = io.BytesIO()
    _Pickler(buffer, arrays).dump(obj)
    return buffer.getvalue()


def loads(data: Any, arrays: list) -> Any:
    """Unpickle ``data`` (a buffer), resolving array references into ``arrays``."""
    return _Unpickler(io.BytesIO(memoryview(data)), arrays).load()
