"""Layout: group the graph's arrays into blocks of memory and place them in the file.

Arrays that view one base array, or overlap in memory, share one block: the
span of memory from the lowest to the highest byte they touch, stored once, so
they come back as views of one block. A block holding a single sparse view
(more than half of its span unused) stores a C-order copy of its elements
instead. A block holding one contiguous array of a dtype safetensors knows is
declared with that dtype and shape, so safetensors readers get the array.

Alignment. A block whose span starts at an address that is not a multiple
of its largest item size (a view such as ``x.imag`` or ``x.view(uint8)[1:]``
grouped with others) is stored after as many zero bytes as that address is
past the multiple, so that every array keeps, relative to the 64-aligned
block in the file and in memory, the alignment it had when saved: torch's
kernels assume it (complex128 at a multiple of 16, where numpy needs 8).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._core.tree import extent, memory_owner, overlap_groups
from .arrays import StoredArray
from .blocks import CompactCopy, MemorySpan, RawBytes, Source
from .constants import ALIGN, ST_DTYPES
from .header import ArrayEntry, BlockEntry, TensorEntry
from .pages import PAGE

PICKLE_TENSOR = "__pickle__"

#: Blocks at least this large keep the page offset of their memory in files laid out
#: for incremental saves (and are the blocks whose changes those saves track).
MIN_CONGRUENT = 64 * 1024


def congruence(source: object, nbytes: int) -> int | None:
    """The page offset a block should have in the file, or None for plain alignment."""
    if not isinstance(source, MemorySpan) or nbytes < MIN_CONGRUENT:
        return None
    return source.lo % PAGE if source.lo % ALIGN == 0 else 0


@dataclass(frozen=True)
class Layout:
    """Where everything goes: blocks (checksums still 0), their sources, arrays, tensors."""

    blocks: tuple[BlockEntry, ...]
    sources: tuple[Source, ...]         # what to write for each block
    arrays: tuple[ArrayEntry, ...]
    tensors: dict[str, TensorEntry]     # the safetensors table, padding included

    @property
    def data_bytes(self) -> int:
        """Bytes of all data blocks together."""
        return sum(b.nbytes for b in self.blocks)


@dataclass(frozen=True)
class _Group:
    members: list[int]                  # indices into the array table
    lo: int                             # start address of the span
    nbytes: int                         # bytes stored (lead, span; or the compact copy)
    lead: int = 0                       # zero bytes stored before the span (alignment)
    compact: bool = False               # store a C-order copy of its one array
    st_dtype: str = "U8"                # how the safetensors table declares it
    st_shape: tuple[int, ...] = ()      # set by _declare


def plan(entries: list[StoredArray], pickled: bytes | None = None) -> Layout:
    """The layout of ``entries`` (the array table), plus a pickle block if given."""
    groups = [_declare(g, entries) for g in _group(entries)]
    names = _block_names(groups, entries)
    arrays = []
    placement: dict[int, tuple[int, int, tuple[int, ...]]] = {}
    for index, g in enumerate(groups):
        for i in g.members:
            view = entries[i].view
            placement[i] = ((index, 0, _c_strides(view)) if g.compact else
                            (index, view.__array_interface__["data"][0] - g.lo + g.lead,
                             view.strides))
    for i, e in enumerate(entries):
        block, offset, strides = placement.get(i, (None, 0, _c_strides(e.view)))
        arrays.append(ArrayEntry(block, offset, tuple(e.view.shape), tuple(strides),
                                 e.view.dtype.str, e.path, e.torch, e.requires_grad))
    declared = [(name, g.st_dtype, g.st_shape, g.nbytes)
                for name, g in zip(names, groups, strict=True)]
    sources: list[Source] = [
        CompactCopy(entries[g.members[0]].view) if g.compact
        else MemorySpan(g.lo, g.nbytes - g.lead, g.lead) for g in groups]
    if pickled is not None:
        declared.append((PICKLE_TENSOR, "U8", (len(pickled),), len(pickled)))
        sources.append(RawBytes(pickled))
    tensors = tensor_table(declared)
    blocks = tuple(BlockEntry(name, tensors[name].start, nbytes, 0)
                   for name, _d, _s, nbytes in declared)
    return Layout(blocks, tuple(sources), tuple(arrays), tensors)


def _owner_key(entry: StoredArray) -> tuple[str, int]:
    """Equal for arrays that view one base array (or one tensor storage)."""
    if not isinstance(entry.obj, np.ndarray):
        return ("storage", entry.obj.untyped_storage().data_ptr())
    return ("object", id(memory_owner(entry.view)))


def _group(entries: list[StoredArray]) -> list[_Group]:
    """Non-empty arrays grouped by shared base or overlapping memory, in table order."""
    extents = [extent(entry.view) for entry in entries]
    owners = [_owner_key(entry) for entry in entries]
    groups = []
    for members, (lo, hi) in overlap_groups(extents, owners):
        lead = lo % max(entries[i].view.itemsize for i in members)
        groups.append(_Group(members, lo, hi - lo + lead, lead))
    return groups


def _declare(g: _Group, entries: list[StoredArray]) -> _Group:
    """The group with its storage decided: compact or not, and its safetensors declaration."""
    nbytes, compact, st_dtype = g.nbytes, False, "U8"
    st_shape: tuple[int, ...] | None = None
    if len(g.members) == 1:
        entry = entries[g.members[0]]
        view = entry.view
        # BF16 would be exact, but safetensors.numpy cannot read it: use U8.
        st = None if entry.torch == "bfloat16" else ST_DTYPES.get(view.dtype.str)
        if nbytes > 2 * view.nbytes:
            # A sparse view of a large array: store only its elements.
            compact, nbytes = True, view.nbytes
        if st is not None and nbytes == view.nbytes:
            if compact or view.flags.c_contiguous:
                st_dtype, st_shape = st, tuple(view.shape)
            elif view.flags.f_contiguous:
                st_dtype, st_shape = st, tuple(reversed(view.shape))
    if st_shape is None:
        st_shape = (nbytes,)
    return _Group(g.members, g.lo, nbytes, 0 if compact else g.lead, compact, st_dtype,
                  st_shape)


def _block_names(groups: list[_Group], entries: list[StoredArray]) -> list[str]:
    """A distinct tensor name per block: the path of its first array."""
    used: set[str] = set()
    names = []
    for g in groups:
        base = entries[g.members[0]].path or "root"
        # Names starting with "__" are the format's own (__metadata__, __pad__.N, ...).
        base = name = base if not base.startswith("__") else f"array.{base}"
        suffix = 0
        while name in used:
            suffix += 1
            name = f"{base}#{suffix}"
        used.add(name)
        names.append(name)
    return names


def _c_strides(arr: np.ndarray) -> tuple[int, ...]:
    strides, step = [], arr.itemsize
    for n in reversed(arr.shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def tensor_table(blocks: list[tuple[str, str, tuple[int, ...], int]]) -> dict[str, TensorEntry]:
    """Tensor entries for ``(name, dtype, shape, nbytes)`` blocks, with padding after each.

    Each block is followed by a ``__pad__.K`` tensor of zeros when needed so
    that the next one starts ALIGN-aligned in the file (the data section starts
    aligned: the header is padded so that 8 + its length is a multiple).
    """
    table: dict[str, TensorEntry] = {}
    offset = pads = 0
    for tname, dtype, shape, nbytes in blocks:
        table[tname] = TensorEntry(dtype, shape, offset, offset + nbytes)
        offset += nbytes
        pad = -offset % ALIGN
        if pad:
            table[f"__pad__.{pads}"] = TensorEntry("U8", (pad,), offset, offset + pad)
            pads += 1
            offset += pad
    return table
