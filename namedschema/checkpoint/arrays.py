"""Arrays in and out: the table of arrays a graph holds, and arrays rebuilt from blocks.

ArrayTable        one entry per array object found while encoding (numpy or torch)
is_storable       whether an object is an array the file stores raw
make_arrays       numpy arrays / torch tensors rebuilt as views of loaded blocks
aligned_empty     a new byte array starting at a multiple of 64 (blocks are read into it)

torch is never imported to save (a graph holding tensors has loaded it) and
only imported to load when the file holds tensors.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core.optional import torch_if_loaded
from ..errors import StructureMismatchError
from .constants import ALLOWED_DTYPES, TORCH_DTYPES, TORCH_VIA, torch_alignment
from .header import ArrayEntry, fail


def _is_plain_tensor(obj: Any) -> bool:
    """A ``torch.Tensor`` itself: subclasses (``nn.Parameter``) go the pickle path."""
    torch = torch_if_loaded()
    return torch is not None and type(obj) is torch.Tensor


def is_storable(obj: Any) -> bool:
    """A numpy array of an allowed dtype, or a torch tensor (checked further when added)."""
    return (type(obj) in (np.ndarray, np.memmap) and obj.dtype.str in ALLOWED_DTYPES) \
        or _is_plain_tensor(obj)


def _tensor_view(tensor: Any, path: str) -> tuple[np.ndarray, str]:
    """(numpy view, torch dtype name) of a CPU tensor, sharing its memory."""
    torch = torch_if_loaded()
    if tensor.device.type != "cpu":
        raise StructureMismatchError(path or "<root>", "a CPU tensor",
                                     f"a tensor on {tensor.device}",
                                     "move it with .cpu() before saving")
    if tensor.layout is not torch.strided:
        raise StructureMismatchError(path or "<root>", "a strided (dense) tensor",
                                     f"layout {tensor.layout}")
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in TORCH_DTYPES:
        raise StructureMismatchError(path or "<root>", "a tensor of a numeric or bool "
                                     "dtype numpy can view", f"dtype {name}")
    for bit, what, how in (("is_conj", "a conjugate view (from .conj())", "resolve_conj"),
                           ("is_neg", "a negative view (from a conjugate's .imag)",
                            "resolve_neg")):
        if getattr(tensor, bit, lambda: False)():
            raise StructureMismatchError(
                path or "<root>", "a tensor whose memory holds its values", what,
                f"its memory holds other values than it shows; save tensor.{how}() "
                "(a copy), or the tensor it is a view of")
    tensor = tensor.detach()
    if name in TORCH_VIA:
        tensor = tensor.view(getattr(torch, TORCH_VIA[name]))
    return tensor.numpy(), name


@dataclass(frozen=True)
class StoredArray:
    """An array found in the graph: the object itself and the numpy view to write."""

    obj: Any                    # the numpy array or torch tensor
    view: np.ndarray            # its memory as numpy sees it
    torch: str | None           # torch dtype name for tensors
    path: str                   # where it was found, for messages and block names

    @property
    def requires_grad(self) -> bool:
        """Whether the entry is a torch tensor that requires grad."""
        return self.torch is not None and bool(self.obj.requires_grad)


class ArrayTable:
    """The arrays of a graph, one entry per object (identity kept), in encounter order."""

    def __init__(self) -> None:
        self.entries: list[StoredArray] = []
        self._index: dict[int, int] = {}    # id(object) -> index; entries keep it alive

    def add(self, obj: Any, path: str) -> int:
        """The index of ``obj``, adding it first if new."""
        index = self._index.get(id(obj))
        if index is not None:
            return index
        if isinstance(obj, np.ndarray):
            view, torch_dtype = obj, None
        else:
            view, torch_dtype = _tensor_view(obj, path)
        index = len(self.entries)
        self.entries.append(StoredArray(obj, view, torch_dtype, path))
        self._index[id(obj)] = index
        return index


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------

_BLOCK_ALIGN = 64  # as in the file: every dtype's alignment divides it


def aligned_empty(nbytes: int) -> np.ndarray:
    """A new uint8 array of ``nbytes`` whose data starts at a multiple of 64.

    Blocks are read into these, so that an array keeps in memory the
    alignment its block gives it in the file (whatever malloc returns).
    """
    raw = np.empty(nbytes + _BLOCK_ALIGN, np.uint8)
    start = -raw.__array_interface__["data"][0] % _BLOCK_ALIGN
    return raw[start:start + nbytes]

def _import_torch(name: str, entry: ArrayEntry) -> Any:
    try:
        import torch
    except ImportError as exc:
        fail(name, f"field {entry.path!r} is a torch tensor, and torch cannot be "
             f"imported here ({exc}); install torch to load this file", exc)
    return torch


def make_arrays(entries: tuple[ArrayEntry, ...], blocks_data: list, name: str = "",
                deferred: dict[int, Any] | None = None) -> list:
    """Every array of the table as a view of its loaded block (tensors share storages).

    A tensor views its block only where torch's alignment for its dtype is
    met (see ``constants.torch_alignment``); files written by this version
    always meet it, and a tensor of an older or crafted file that does not
    is loaded as an aligned copy instead, since torch's kernels may crash on
    misaligned data. The array of a block in ``deferred`` (a restore's compressed
    blocks left compressed, each holding one numpy array) is that block's object.
    """
    torch: Any = None
    storages: dict[int, Any] = {}  # block -> untyped storage, so tensors of one block share
    result: list[Any] = []
    for a in entries:
        if deferred is not None and a.block in deferred:
            result.append(deferred[a.block])
            continue
        if a.block is None:
            arr = np.empty(a.shape, np.dtype(a.dtype))
        else:
            arr = np.ndarray(a.shape, np.dtype(a.dtype), buffer=blocks_data[a.block],
                             offset=a.offset, strides=a.strides)
        if a.torch is not None:
            if torch is None:  # the file holds tensors: torch is needed to rebuild them
                torch = _import_torch(name, a)
            tensor = _make_tensor(torch, arr, a, a.torch, blocks_data, storages)
            if a.requires_grad:
                tensor.requires_grad_(True)
            result.append(tensor)
        else:
            result.append(arr)
    return result


def _make_tensor(torch: Any, arr: np.ndarray, a: ArrayEntry, torch_dtype: str,
                 blocks_data: list[Any], storages: dict[int, Any]) -> Any:
    tdtype = getattr(torch, torch_dtype)
    itemsize = torch_alignment(torch_dtype)  # = torch's element size
    # The header check guarantees strides in whole, non-negative elements.
    if arr.size and arr.__array_interface__["data"][0] % itemsize:
        # Misaligned for torch (numpy's alignment may be smaller): copy.
        copy = aligned_empty(arr.nbytes).view(arr.dtype).reshape(arr.shape)
        copy[...] = arr
        tensor = torch.from_numpy(copy)
        return tensor.view(tdtype) if torch_dtype in TORCH_VIA else tensor
    with warnings.catch_warnings():
        # Read-only maps give read-only tensors; torch warns about that.
        warnings.simplefilter("ignore", UserWarning)
        if (a.block is not None and a.offset % itemsize == 0
                and blocks_data[a.block].__array_interface__["data"][0] % itemsize == 0):
            storage = storages.get(a.block)
            if storage is None:
                storage = storages[a.block] = torch.from_numpy(
                    blocks_data[a.block]).untyped_storage()
            tensor = torch.empty(0, dtype=tdtype)
            tensor.set_(storage, a.offset // itemsize, arr.shape,
                        [s // itemsize for s in a.strides])
            return tensor
        tensor = torch.from_numpy(arr)
    if torch_dtype in TORCH_VIA:
        tensor = tensor.view(tdtype)
    return tensor
