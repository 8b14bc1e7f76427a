"""Whole-buffer checkpoints: save any object graph with its arrays written raw, once.

save          write an object graph to a checkpoint file, atomically
load          read a checkpoint, fully or memory-mapped, refusing pickle by default
inspect       describe a checkpoint from its header alone (a ``CheckpointInfo``)
CheckpointInfo  what ``inspect`` returns: printable tree plus attributes
FieldInfo     one stored array as ``inspect`` reports it
FORMAT_NAME   the value of the ``format`` metadata key
FORMAT_VERSION  the format version this module writes (independent of the package)

File format, version 1.0
------------------------

A checkpoint is a valid `safetensors <https://github.com/huggingface/safetensors>`_
file::

    8 bytes     little-endian unsigned header length N
    N bytes     UTF-8 JSON header, padded with spaces so that 8 + N is a
                multiple of 64
    data        the blocks, back to back, in header order

The header maps tensor names to ``{"dtype", "shape", "data_offsets"}``
(offsets relative to the data section, contiguous, in order, without holes,
as safetensors requires) and has a ``__metadata__`` object of strings:

``format``
    ``"namedschema.checkpoint"``. Files without it are not checkpoints, even
    when they are valid safetensors files written by other tools.
``format_version``
    ``"MAJOR.MINOR"``. Readers accept any minor version of the major versions
    they know; a file whose features they do not know is refused (below).
``header_crc32``
    eight hex digits: CRC-32 of the raw header bytes with this value replaced
    by ``00000000``. Any change to the header is detected on every load.
``namedschema``
    the description, a JSON object:

    ``blocks``: one entry per stored block of memory,
    ``{"tensor": name, "nbytes": n, "crc32": "8 hex digits"}``. A block is the
    span of memory that a group of arrays share (arrays are grouped when they
    view one base array or overlap in memory), stored once. When a block holds
    exactly one array in C (or Fortran) order with a dtype safetensors knows,
    the tensor is declared with that dtype and shape (the reversed shape for
    Fortran order), so safetensors readers get the array itself; otherwise it
    is declared ``U8`` with shape ``[nbytes]``. Tensors named ``__pad__.K``
    are zero padding that keeps every block 64-byte aligned in the file.

    ``arrays``: one entry per array object,
    ``{"block", "offset", "shape", "strides", "dtype", "path"}`` plus, for
    torch tensors, ``"torch": dtype name`` and ``"requires_grad"``. ``dtype``
    is numpy's ``dtype.str`` and must be one of the bool, integer, float and
    complex types in ``_ALLOWED_DTYPES`` (either byte order). Every array is
    rebuilt as a view ``np.ndarray(shape, dtype, buffer=block, offset=offset,
    strides=strides)``, so arrays that shared memory share it again. An
    empty array has ``"block": null``.

    ``schemas``: ``{"kind", "typename", "fields", "defaults", "id",
    "module"}`` for each schema (``kind`` is ``NamedTupleSchema`` or
    ``NamedArrayTupleSchema``; ``defaults`` are structure nodes). Loading
    rebuilds them through the pickle registry, so one ``id`` is one class per
    process. A stdlib namedtuple is recorded as a ``NamedTupleSchema`` with an
    id derived from its definition; an rlpyt namedarraytuple class as a
    ``NamedArrayTupleSchema``.

    ``structure``: the object graph as a JSON node, or ``null`` when pickled.
    Nodes: JSON ``null``/``true``/``false``/numbers/strings for ``None``, bool,
    int, float, str; ``{"float": "nan"|"inf"|"-inf"}``;
    ``{"list": [...]}``, ``{"tuple": [...]}``, ``{"dict": [[key, node], ...]}``
    (str keys, order kept); ``{"array": i}``; ``{"nt": s, "values": [...]}``
    for an instance of schema ``s``; ``{"schema": s}`` for a schema class
    itself. The data path keeps array identity (one array object stored once
    is one object after loading) but not container identity: a list that
    appears twice comes back as two equal lists.

    ``pickle``: ``null``, or ``{"block": b, "reason": text}`` when the graph
    holds objects that are not data. Block ``b`` then holds a protocol-5
    pickle of the whole graph whose arrays are persistent references
    ``("array", i)`` into ``arrays``; pickle keeps all identity.
    ``load`` refuses such files unless ``allow_pickle=True``.

    ``features``: names of optional features the file uses; a reader must
    refuse a file listing a feature it does not know. Version 1.0 writes
    ``[]``.

    ``checkpoint_id`` (random hex) and ``parent`` (``null``): reserved for
    incremental checkpoints, see below.

Incremental checkpoints (planned). A later minor version can add a feature
``"delta"``: a delta file sets ``parent`` to the ``checkpoint_id`` of the file
it updates and gives some blocks a ``"rows"`` entry, a list of
``[byte_start, byte_stop]`` ranges of the parent's block that the stored bytes
replace (the rows of a ring buffer written since the parent). Full files, such
as every file written now, have ``parent: null`` and no features, so they stay
valid, and a reader that does not know ``"delta"`` refuses a delta file
rather than loading half a buffer.

Writing. ``save`` writes ``.<name>.tmp-<host>-<pid>-<random>`` in the
target's directory (``<name>`` is the target's file name, or its first 40
characters, ``~`` and a hash when it is longer than 200 bytes; ``<host>`` is
eight hex digits of a hash of the host name and pid namespace, ``<pid>`` the
saver's process id), fills it, syncs it, renames it over the target and syncs
the directory, so the target always holds a complete checkpoint. A saver that
is killed leaves its temporary file behind; before writing, every later save
to the same target removes such files, and only those whose name carries its
own ``<host>`` and whose ``<pid>`` is no longer writing: no process has that
pid, or it is a zombie, or it started more than 10 seconds after the file was
last modified (the pid was reused). Whatever cannot be decided (no ``/proc``,
files of other hosts, other targets, anything not a regular file) is kept.

Trust. ``load`` checks the length prefix, the header checksum, every dtype
against the allowlist (object, structured and string dtypes are never made
from file bytes), every shape against numpy's size limit (the itemsize times
the product of the nonzero dimensions must fit in ``intp``, for empty arrays
too), every shape, stride and offset against its block, and every block
against the real file size, before anything is allocated or mapped.
Data checksums are checked with ``verify=True``.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import io
import json
import math
import mmap
import os
import pickle
import re
import secrets
import socket
import stat
import struct
import sys
import uuid
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from . import _pickle
from ._factories import _is_classic_namedtuple_class, _is_classic_nat_class
from ._schema import NamedTupleSchema
from .errors import FormatError, StructureMismatchError, UnsafeLoadError

__all__ = ["save", "load", "inspect", "CheckpointInfo", "FieldInfo",
           "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "namedschema.checkpoint"
FORMAT_VERSION = "1.0"
_READ_MAJOR = 1
_KNOWN_FEATURES: frozenset = frozenset()

_ALIGN = 64
_CHUNK = 16 * 2**20
_MAX_HEADER = 100_000_000  # the limit safetensors itself enforces
_ZERO_CRC = "00000000"
_MAX_INDEX = 2**62
# numpy refuses a shape whose nonzero dimensions times the itemsize exceed
# this, even when another dimension is 0.
_MAX_NBYTES = int(np.iinfo(np.intp).max)

# Built from kind letters and sizes rather than from file text, so that a
# header can only ever name one of these.
_ALLOWED_DTYPES: frozenset = frozenset(
    [f"{order}{code}" for order in "<>" for code in
     ("i2", "i4", "i8", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16")]
    + ["|b1", "|i1", "|u1"])

# numpy dtype.str -> safetensors dtype name (little-endian only).
_ST_DTYPES = {"|b1": "BOOL", "|u1": "U8", "|i1": "I8", "<u2": "U16", "<i2": "I16",
              "<u4": "U32", "<i4": "I32", "<u8": "U64", "<i8": "I64",
              "<f2": "F16", "<f4": "F32", "<f8": "F64", "<c8": "C64"}
_ST_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "BF16": 2, "F16": 2,
                "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "C64": 8,
                "F8_E4M3": 1, "F8_E5M2": 1}

# torch dtypes numpy cannot hold: stored through a numpy view of equal size.
_TORCH_VIA = {"bfloat16": "int16"}
_TORCH_DTYPES = frozenset({
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128"})


# --------------------------------------------------------------------------
# Encoding the structure
# --------------------------------------------------------------------------

class _NotData(Exception):
    """The graph holds an object the data path cannot describe."""

    def __init__(self, path, obj, why=""):
        cls = type(obj)
        super().__init__(f"{path or '<root>'}: {cls.__module__}.{cls.__qualname__}"
                         + (f" ({why})" if why else ""))


def _torch():
    # Never import torch: if the caller has tensors, torch is already loaded.
    return sys.modules.get("torch")


def _is_tensor(obj) -> bool:
    torch = _torch()
    return torch is not None and type(obj) is torch.Tensor


def _tensor_view(tensor, path):
    """(numpy view, torch dtype name) of a CPU tensor, sharing its memory."""
    if tensor.device.type != "cpu":
        raise StructureMismatchError(path or "<root>", "a CPU tensor",
                                     f"a tensor on {tensor.device}",
                                     "move it with .cpu() before saving")
    if tensor.layout is not _torch().strided:
        raise StructureMismatchError(path or "<root>", "a strided (dense) tensor",
                                     f"layout {tensor.layout}")
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in _TORCH_DTYPES:
        raise StructureMismatchError(path or "<root>", "a tensor of a numeric or bool "
                                     "dtype numpy can view", f"dtype {name}")
    tensor = tensor.detach()
    if name in _TORCH_VIA:
        tensor = tensor.view(getattr(_torch(), _TORCH_VIA[name]))
    return tensor.numpy(), name


def _path_join(path, key):
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


class _Arrays:
    """The array table, shared by both encoding paths; one entry per object."""

    def __init__(self):
        self.entries = []      # (original object, numpy view, torch dtype or None, path)
        self._index = {}       # id(original) -> index

    def add(self, obj, path):
        index = self._index.get(id(obj))
        if index is not None:
            return index
        if isinstance(obj, np.ndarray):
            view, torch_dtype = obj, None
        else:
            view, torch_dtype = _tensor_view(obj, path)
        index = len(self.entries)
        self.entries.append((obj, view, torch_dtype, path))
        self._index[id(obj)] = index
        return index


def _storable_ndarray(obj) -> bool:
    return type(obj) in (np.ndarray, np.memmap) and obj.dtype.str in _ALLOWED_DTYPES


class _Encoder:
    """Describe a graph as JSON nodes, or raise _NotData at the first non-data object."""

    def __init__(self):
        self.arrays = _Arrays()
        self.schemas = []
        self._schema_index = {}  # id(class) -> index (classes compare by value)
        self._classes = []       # keeps classes alive so ids stay unique

    def encode(self, obj, path=""):
        if obj is None or obj is True or obj is False or type(obj) is str:
            return obj
        kind = type(obj)
        if kind is int:
            if obj.bit_length() > 10_000:  # beyond what json.loads will parse back
                raise _NotData(path, obj, "an int too large for JSON")
            return obj
        if kind is float:
            return obj if math.isfinite(obj) else {"float": repr(obj)}
        if kind is list:
            return {"list": [self.encode(v, _path_join(path, i)) for i, v in enumerate(obj)]}
        if kind is tuple:
            return {"tuple": [self.encode(v, _path_join(path, i)) for i, v in enumerate(obj)]}
        if kind is dict:
            items = []
            for key, value in obj.items():
                if type(key) is not str:
                    raise _NotData(path, key, "dict key that is not a str")
                items.append([key, self.encode(value, _path_join(path, key))])
            return {"dict": items}
        if _storable_ndarray(obj) or _is_tensor(obj):
            return {"array": self.arrays.add(obj, path)}
        if isinstance(obj, np.generic) and obj.dtype.str in _ALLOWED_DTYPES:
            # A numpy scalar: stored as a 0-d array, rebuilt with arr[()].
            return {"scalar": self.arrays.add(np.asarray(obj), path)}
        if isinstance(obj, type):
            if isinstance(obj, NamedTupleSchema) and "_schema_id" in obj.__dict__:
                return {"schema": self._schema(obj, path)}
            raise _NotData(path, obj, f"the class {obj.__qualname__}")
        if (isinstance(kind, NamedTupleSchema) and "_schema_id" in kind.__dict__) or (
                _is_classic_namedtuple_class(kind)
                and (kind.__bases__ == (tuple,) or _is_classic_nat_class(kind))):
            index = self._schema(kind, path)
            base = path or (kind._typename if isinstance(kind, NamedTupleSchema)
                            else kind.__name__)
            return {"nt": index, "values": [self.encode(v, _path_join(base, f))
                                            for f, v in zip(kind._fields, obj)]}
        raise _NotData(path, obj)

    def _schema(self, cls, path):
        index = self._schema_index.get(id(cls))
        if index is not None:
            return index
        defaults_enc = _Encoder()
        defaults = [defaults_enc.encode(v, f"{path}<defaults>")
                    for v in cls._field_defaults.values()]
        if defaults_enc.arrays.entries or defaults_enc.schemas:
            raise _NotData(path, cls, "schema defaults that are arrays or schemas")
        module = cls.__module__ if isinstance(cls.__module__, str) else None
        if isinstance(cls, NamedTupleSchema):
            entry = {"kind": type(cls).__name__, "typename": cls._typename,
                     "fields": list(cls._fields), "id": cls._schema_id}
        else:
            kind = ("NamedArrayTupleSchema" if _is_classic_nat_class(cls)
                    else "NamedTupleSchema")
            typename, fields = cls.__name__, list(cls._fields)
            # A stable id per definition, so every load of it is one class.
            digest = hashlib.blake2b(json.dumps(
                [kind, module, typename, fields, defaults]).encode(), digest_size=16)
            entry = {"kind": kind, "typename": typename, "fields": fields,
                     "id": "classic-" + digest.hexdigest()}
        entry["defaults"] = defaults
        entry["module"] = module
        index = len(self.schemas)
        self.schemas.append(entry)
        self._schema_index[id(cls)] = index
        self._classes.append(cls)
        return index


class _Pickler(pickle.Pickler):
    """Protocol-5 pickler sending every storable array to the array table."""

    def __init__(self, file, arrays):
        super().__init__(file, protocol=5)
        self._arrays = arrays

    def persistent_id(self, obj):
        if not (_storable_ndarray(obj) or _is_tensor(obj)):
            return None
        try:
            return ("array", self._arrays.add(obj, f"pickled[{len(self._arrays.entries)}]"))
        except StructureMismatchError:
            return None  # e.g. a CUDA tensor: let torch pickle it itself


# --------------------------------------------------------------------------
# Layout: group arrays into blocks of memory
# --------------------------------------------------------------------------

def _extent(arr):
    """(lo, hi) absolute byte addresses the array touches, or None if empty."""
    if arr.size == 0:
        return None
    lo = hi = arr.__array_interface__["data"][0]
    for n, s in zip(arr.shape, arr.strides):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + arr.itemsize


def _root_key(obj, view):
    if not isinstance(obj, np.ndarray):
        return ("storage", obj.untyped_storage().data_ptr())
    base = view
    while isinstance(base.base, np.ndarray):
        base = base.base
    return ("object", id(base.base if base.base is not None else base))


class _RawMemory:
    """Exposes a span of process memory to numpy through the array interface."""

    def __init__(self, address, nbytes):
        self.__array_interface__ = {"data": (address, True), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}


@dataclass
class _Block:
    arrays: list                # indices into the array table
    lo: int = 0                 # start address of the span
    nbytes: int = 0
    compact: bool = False       # write a C-order copy of its one array
    st_dtype: str = "U8"
    st_shape: list | None = None
    name: str = ""
    crc: int = 0
    raw: bytes | None = None    # the pickle block's bytes


def _layout(entries):
    """Group array indices into blocks; return (blocks, per-array (block, offset))."""
    parent = list(range(len(entries)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    extents, by_root = {}, {}
    for i, (obj, view, _tdtype, _path) in enumerate(entries):
        ext = _extent(view)
        if ext is None:
            continue
        extents[i] = ext
        key = _root_key(obj, view)
        if key in by_root:
            parent[find(i)] = find(by_root[key])
        else:
            by_root[key] = i
    # Arrays that overlap in memory belong together whatever their bases say.
    ordered = sorted(extents, key=lambda i: extents[i][0])
    reach, last = -1, None
    for i in ordered:
        lo, hi = extents[i]
        if last is not None and lo < reach:
            parent[find(i)] = find(last)
        if hi > reach:
            reach, last = hi, i
    groups = collections.defaultdict(list)
    for i in ordered:
        groups[find(i)].append(i)
    blocks, placement = [], {}
    for members in sorted(groups.values(), key=min):
        members.sort()
        lo = min(extents[i][0] for i in members)
        hi = max(extents[i][1] for i in members)
        block = _Block(members, lo, hi - lo)
        if len(members) == 1:
            _obj, view, tdtype, _p = entries[members[0]]
            # BF16 would be exact, but safetensors.numpy cannot read it: use U8.
            st = None if tdtype == "bfloat16" else _ST_DTYPES.get(view.dtype.str)
            if block.nbytes > 2 * view.nbytes:
                # A sparse view of a large array: store only its elements.
                block.compact, block.nbytes = True, view.nbytes
            if st is not None and block.nbytes == view.nbytes:
                if block.compact or view.flags.c_contiguous:
                    block.st_dtype, block.st_shape = st, list(view.shape)
                elif view.flags.f_contiguous:
                    block.st_dtype, block.st_shape = st, list(reversed(view.shape))
        if block.st_shape is None:
            block.st_shape = [block.nbytes]
        for i in members:
            _obj, view, _t, _p = entries[i]
            if block.compact:
                placement[i] = (len(blocks), 0, _c_strides(view))
            else:
                placement[i] = (len(blocks),
                                view.__array_interface__["data"][0] - lo, view.strides)
        blocks.append(block)
    return blocks, placement


def _c_strides(arr):
    strides, step = [], arr.itemsize
    for n in reversed(arr.shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _block_chunks(block, entries):
    """Yield ``(buffer, is_copy)`` pairs covering the block, each about _CHUNK bytes.

    ``is_copy`` marks buffers made here (the elements of a sparse view), as
    opposed to views of memory the caller already holds.
    """
    if block.raw is not None:
        view = memoryview(block.raw)
        for start in range(0, len(view), _CHUNK):
            yield view[start:start + _CHUNK], False
        return
    if block.compact:
        # A compact block holds one non-empty array of at least one dimension
        # (a 0-d array always spans exactly its own bytes).
        arr = entries[block.arrays[0]][1]
        step = max(_CHUNK // (arr.nbytes // arr.shape[0]), 1)
        for start in range(0, arr.shape[0], step):
            yield memoryview(np.ascontiguousarray(arr[start:start + step])).cast("B"), True
        return
    span = np.asarray(_RawMemory(block.lo, block.nbytes))
    for start in range(0, block.nbytes, _CHUNK):
        yield memoryview(span[start:start + _CHUNK]), False


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

class _Progress:
    """A plain-text progress bar on stderr."""

    def __init__(self, total, label, enabled):
        self.total, self.label, self.enabled = max(total, 1), label, enabled
        self.done, self._shown = 0, -1

    def advance(self, n):
        if not self.enabled:
            return
        self.done += n
        percent = min(100, self.done * 100 // self.total)
        if percent != self._shown:
            self._shown = percent
            bar = "#" * (percent * 30 // 100)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {percent:3d}% "
                             f"{self.done / 2**20:,.1f}/{self.total / 2**20:,.1f} MiB")
            if percent == 100:
                sys.stderr.write("\n")
            sys.stderr.flush()


def _write_all(fd, buf):
    view = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
    while view.nbytes:
        written = os.write(fd, view)
        view = view[written:]


def _build_header(blocks, arrays_meta, schemas, structure, pickle_meta,
                  checkpoint_id, header_crc=_ZERO_CRC):
    """The header as bytes (unpadded); fixed-width fields keep its length stable."""
    described = {
        "blocks": [{"tensor": b.name, "nbytes": b.nbytes, "crc32": f"{b.crc:08x}"}
                   for b in blocks],
        "arrays": arrays_meta,
        "schemas": schemas,
        "structure": structure,
        "pickle": pickle_meta,
        "features": [],
        "checkpoint_id": checkpoint_id,
        "parent": None,
    }
    meta = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "namedschema": json.dumps(described, separators=(",", ":"),
                                      allow_nan=False),
            "header_crc32": header_crc}
    header = {"__metadata__": meta}
    offset = 0
    pads = 0
    for b in blocks:
        header[b.name] = {"dtype": b.st_dtype, "shape": b.st_shape,
                          "data_offsets": [offset, offset + b.nbytes]}
        offset += b.nbytes
        pad = -offset % _ALIGN
        if pad:
            header[f"__pad__.{pads}"] = {"dtype": "U8", "shape": [pad],
                                         "data_offsets": [offset, offset + pad]}
            pads += 1
            offset += pad
    return json.dumps(header, separators=(",", ":")).encode()


def _finish_header(raw, length):
    """Pad to ``length`` and fill in the header checksum."""
    raw = raw + b" " * (length - len(raw))
    crc = zlib.crc32(raw)
    marker = b'"header_crc32":"' + _ZERO_CRC.encode() + b'"'
    return raw.replace(marker, b'"header_crc32":"' + f"{crc:08x}".encode() + b'"', 1)


def save(obj, path, *, progress=False):
    """Save an object graph, writing every array raw and once, atomically.

    Arrays (numpy, and torch CPU tensors) anywhere in ``obj`` are written
    straight from their memory, one block per underlying buffer, so views of
    one array come back as views of one array. A graph of schemas, stdlib
    namedtuples, tuples, lists, str-keyed dicts, None, bool, int, float, str
    and arrays is stored as JSON; anything else is pickled into the file and
    then needs ``load(..., allow_pickle=True)``. The file is written to a
    temporary file in the same directory, synced and renamed over ``path``,
    so an existing file at ``path`` is never damaged. Temporary files that
    earlier savers of ``path`` left when they were killed are removed first
    (the rule is in the module documentation); those of live savers are kept.

    Args:
        obj: the object graph to save.
        path: destination file (str or path-like).
        progress: show a progress bar on stderr.

    Raises:
        StructureMismatchError: a tensor is not on the CPU or has a dtype
            numpy cannot view.
        OSError: the file cannot be written (the old file stays intact).

    >>> import numpy as np, tempfile, os, namedschema
    >>> Step = namedschema.NamedArrayTupleSchema('Step', 'obs reward')
    >>> buf = Step(np.zeros((8, 4), np.uint8), np.arange(8.0))
    >>> path = os.path.join(tempfile.mkdtemp(), 'buf.nsb')
    >>> namedschema.save({'buffer': buf, 'recent': buf.obs[-2:]}, path)
    >>> back = namedschema.load(path)
    >>> back['buffer'].reward[3], np.shares_memory(back['recent'], back['buffer'].obs)
    (np.float64(3.0), True)
    """
    path = os.fspath(path)
    encoder = _Encoder()
    pickle_reason = None
    try:
        structure = encoder.encode(obj)
    except _NotData as exc:
        pickle_reason = str(exc)
    except RecursionError:
        pickle_reason = "<root>: structure nested too deeply for the data path"
    if pickle_reason is not None:
        encoder = _Encoder()
        structure = None
        buffer = io.BytesIO()
        _Pickler(buffer, encoder.arrays).dump(obj)
        pickled = buffer.getvalue()
    entries = encoder.arrays.entries
    blocks, placement = _layout(entries)
    arrays_meta = []
    for i, (_obj, view, tdtype, apath) in enumerate(entries):
        block, offset, strides = placement.get(i, (None, 0, _c_strides(view)))
        entry = {"block": block, "offset": offset, "shape": list(view.shape),
                 "strides": list(strides), "dtype": view.dtype.str, "path": apath}
        if tdtype is not None:
            entry["torch"] = tdtype
            entry["requires_grad"] = bool(_obj.requires_grad)
        arrays_meta.append(entry)
    used = set()
    for block in blocks:
        base = entries[block.arrays[0]][3] or "root"
        # Names starting with "__" are the format's own (__metadata__, __pad__.N, ...).
        base = name = base if not base.startswith("__") else f"array.{base}"
        suffix = 0
        while name in used:
            suffix += 1
            name = f"{base}#{suffix}"
        used.add(name)
        block.name = name
    pickle_meta = None
    if pickle_reason is not None:
        block = _Block([], 0, len(pickled), raw=pickled, name="__pickle__",
                       st_shape=[len(pickled)])
        pickle_meta = {"block": len(blocks), "reason": pickle_reason}
        blocks.append(block)
    checkpoint_id = uuid.uuid4().hex
    args = (blocks, arrays_meta, encoder.schemas, structure, pickle_meta, checkpoint_id)
    raw = _build_header(*args)
    length = len(raw) + (-(8 + len(raw)) % _ALIGN)
    _write_atomic(path, blocks, entries, args, length,
                  _Progress(sum(b.nbytes for b in blocks), "saving", progress))


def _unlink_quietly(name):
    try:
        os.unlink(name)
    except OSError:
        pass


def _write_atomic(path, blocks, entries, header_args, length, progress):
    directory = os.path.dirname(os.path.abspath(path))
    prefix = _temp_prefix(os.path.basename(path), _host_tag())
    _remove_stale_temps(directory, prefix)
    tmp = os.path.join(directory, f"{prefix}{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                 0o666)
    try:
        try:
            _write_all(fd, struct.pack("<Q", length) + b" " * length)
            _write_blocks(fd, blocks, entries, progress)
            header = _finish_header(_build_header(*header_args), length)
            if len(header) != length:  # pragma: no cover - fixed-width fields
                raise FormatError(f"{path!r}: internal error: header length changed")
            os.lseek(fd, 8, os.SEEK_SET)
            _write_all(fd, header)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    _fsync_dir(directory)


# --------------------------------------------------------------------------
# Temporary files left by savers that died
# --------------------------------------------------------------------------

# A live process whose start time is this much after a temp file's mtime did
# not write it; the slack covers the 1 s resolution of the boot time and
# small clock adjustments, and errs towards keeping files.
_STALE_SLACK = 10.0
_TEMP_TAIL = re.compile(r"([0-9]{1,10})-[0-9a-f]{8}", re.ASCII)


def _temp_prefix(basename, tag):
    """``.<basename>.tmp-<tag>-``: the start of every temp file name for one target.

    Very long target names are shortened (with a hash of the full name, so
    the prefix still belongs to exactly one target) to keep the temp name
    within the usual 255-byte limit.
    """
    if len(os.fsencode(basename)) > 200:
        digest = hashlib.blake2b(os.fsencode(basename), digest_size=8).hexdigest()
        basename = f"{basename[:40]}~{digest}"
    return f".{basename}.tmp-{tag}-"


def _host_tag():
    """Eight hex digits naming this host and pid namespace, where pids mean something."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return hashlib.blake2b(f"{socket.gethostname()}\0{namespace}".encode(),
                           digest_size=4).hexdigest()


@functools.cache
def _boot_time():
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return int(line.split()[1])
    raise OSError("no btime in /proc/stat")


def _process_state(pid):
    """(state letter, start time in seconds since the epoch) of a process, from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        text = f.read()
    # The command name (field 2) is in parentheses and may hold spaces or ')'.
    fields = text[text.rindex(b")") + 2:].split()
    start_ticks = int(fields[19])
    return fields[0].decode("ascii", "replace"), \
        _boot_time() + start_ticks / os.sysconf("SC_CLK_TCK")


def _writer_may_be_alive(pid, mtime):
    """Whether process ``pid`` may still be writing a file last modified at ``mtime``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    except (OverflowError, ValueError):
        return False  # no process can have that pid
    try:
        state, started = _process_state(pid)
    except (OSError, ValueError, IndexError):
        return True  # cannot tell whether the pid was reused: keep the file
    if state in ("Z", "X"):
        return False  # dead, not yet reaped: it will write nothing more
    return started <= mtime + _STALE_SLACK


def _remove_stale_temps(directory, prefix):
    """Remove temp files of this target left by savers of this host that are dead."""
    if os.name != "posix":  # os.kill(pid, 0) only probes on POSIX
        return
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if e.name.startswith(prefix)]
    except OSError:
        return
    for name in names:
        match = _TEMP_TAIL.fullmatch(name, len(prefix))
        if match is None or int(match[1]) <= 0:
            continue
        full = os.path.join(directory, name)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and not _writer_may_be_alive(int(match[1]), st.st_mtime):
            _unlink_quietly(full)


def _fsync_dir(directory):
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dfd)


class _Crc:
    """A running CRC-32 fed in order by a worker thread."""

    def __init__(self):
        self.value = 0

    def update(self, chunk):
        self.value = zlib.crc32(chunk, self.value)


# Every this many bytes a background fdatasync starts the disk writing what is
# already in the page cache while later chunks are still being copied, so that
# less is left for the final fsync.
_SYNC_EVERY = 256 * 2**20
# Buffers this module made (copies of sparse views) may wait this long for
# their checksum; views of the caller's arrays may wait without bound.
_MAX_COPIES_PENDING = 3 * _CHUNK


def _write_blocks(fd, blocks, entries, progress):
    """Write every block and its padding at the file position, and set each block's crc.

    The checksums run in a worker thread and may lag behind the writes: the
    calling thread writes at the speed of the page cache, and whatever is
    left of the checksums overlaps the data's fdatasync.
    """
    fdatasync = getattr(os, "fdatasync", os.fsync)
    with ThreadPoolExecutor(1, thread_name_prefix="namedschema-crc") as crc_pool, \
            ThreadPoolExecutor(1, thread_name_prefix="namedschema-sync") as sync_pool:
        checks, crcs, copies = [], [], collections.deque()
        copied = unsynced = 0
        syncing = None
        for block in blocks:
            crc = _Crc()
            crcs.append((block, crc))
            for chunk, is_copy in _block_chunks(block, entries):
                checks.append(crc_pool.submit(crc.update, chunk))
                _write_all(fd, chunk)
                progress.advance(chunk.nbytes)
                if is_copy:
                    copies.append((checks[-1], chunk.nbytes))
                    copied += chunk.nbytes
                    while copied > _MAX_COPIES_PENDING:
                        done, nbytes = copies.popleft()
                        done.result()
                        copied -= nbytes
                unsynced += chunk.nbytes
                if unsynced >= _SYNC_EVERY and (syncing is None or syncing.done()):
                    if syncing is not None:
                        syncing.result()  # raise its error, if any
                    syncing = sync_pool.submit(fdatasync, fd)
                    unsynced = 0
            pad = -block.nbytes % _ALIGN
            if pad:
                _write_all(fd, bytes(pad))
        if syncing is not None:
            syncing.result()
        if not all(c.done() for c in checks):
            fdatasync(fd)  # the disk writes the data while the checksums finish
        for check in checks:
            check.result()
    for block, crc in crcs:
        block.crc = crc.value


# --------------------------------------------------------------------------
# Reading and checking the header
# --------------------------------------------------------------------------

@dataclass
class _Header:
    name: str
    file_size: int
    data_start: int
    meta: dict
    tensors: dict           # tensor name -> (start, end) absolute file offsets
    blocks: list            # (tensor name, start, nbytes, crc)
    arrays: list            # (block, offset, shape, strides, dtype str, path, torch, grad)
    schemas: list
    structure: object
    pickle: dict | None
    version: str


def _fail(name, message, cause=None):
    raise FormatError(f"{name!r}: {message}") from cause


def _reject_constant(text):
    raise ValueError(f"non-standard JSON constant {text}")


def _as_int(value, name, what, minimum=0):
    if type(value) is not int or value < minimum:
        _fail(name, f"{what} is not an integer >= {minimum}: {value!r}")
    return value


def _read_header(f, name, file_size):
    if file_size < 8:
        _fail(name, f"is not a namedschema file: {file_size} bytes, too short for a "
              "safetensors header (incomplete write?)")
    prefix = f.read(8)
    (length,) = struct.unpack("<Q", prefix)
    if length > _MAX_HEADER:
        _fail(name, f"is not a namedschema file: header length {length} is "
              f"implausible (limit {_MAX_HEADER})")
    if 8 + length > file_size:
        _fail(name, f"is truncated: header needs {length} bytes, file has "
              f"{file_size - 8} after the length prefix (incomplete write?)")
    raw = f.read(length)
    if len(raw) != length:
        _fail(name, "is truncated while reading the header (file changed?)")
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        _fail(name, f"is not a namedschema file: header is not valid JSON ({exc})", exc)
    if not isinstance(header, dict):
        _fail(name, "is not a namedschema file: header is not a JSON object")
    meta = header.get("__metadata__")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        if isinstance(meta, dict) and isinstance(meta.get("format"), str):
            what = f"its metadata says format {meta['format']!r}"
        else:
            what = "it has no namedschema metadata"
        _fail(name, f"is not a namedschema file: {what} (a safetensors file written "
              "by another tool? read it with safetensors.numpy.load_file)")
    version = meta.get("format_version")
    try:
        major, minor = (int(p) for p in str(version).split("."))
    except ValueError:
        _fail(name, f"has an unreadable format version {version!r}")
    if major != _READ_MAJOR:
        _fail(name, f"is format {major}.{minor}; this version of namedschema reads "
              f"{_READ_MAJOR}.x")
    stored_crc = meta.get("header_crc32")
    marker = b'"header_crc32":"'
    if not isinstance(stored_crc, str) or len(stored_crc) != 8 or raw.count(marker) != 1:
        _fail(name, "header checksum is missing or malformed (corrupt header)")
    zeroed = raw.replace(marker + stored_crc.encode(), marker + _ZERO_CRC.encode(), 1)
    if f"{zlib.crc32(zeroed):08x}" != stored_crc:
        _fail(name, "header is corrupt: its checksum does not match")
    try:
        desc = json.loads(meta["namedschema"], parse_constant=_reject_constant)
    except (KeyError, TypeError, ValueError, RecursionError) as exc:
        _fail(name, "namedschema description is missing or not valid JSON", exc)
    if not isinstance(desc, dict):
        _fail(name, "namedschema description is not a JSON object")
    features = desc.get("features", [])
    if not isinstance(features, list) or set(map(str, features)) - _KNOWN_FEATURES:
        _fail(name, f"uses features {features!r} that this version of namedschema "
              "does not know; upgrade namedschema")
    data_start = 8 + length
    data_size = file_size - data_start
    tensors, data_end = _check_tensors(name, header, data_size, data_start)
    blocks = _check_blocks(name, desc, tensors)
    arrays = _check_arrays(name, desc, blocks)
    # Truncation is reported per field, naming the first array in the block.
    for index, (tname, start, nbytes, _crc) in enumerate(blocks):
        end = start + nbytes
        if end > file_size:
            field_name = _block_field(arrays, index, tname)
            found = max(0, file_size - start)
            _fail(name, f"field {field_name!r} is truncated: expected {nbytes} bytes, "
                  f"found {found} (incomplete write?)")
    if data_end > data_size:
        _fail(name, f"is truncated: the header describes {data_end} bytes of data, "
              f"found {data_size} (incomplete write?)")
    if data_end < data_size:
        _fail(name, f"has {data_size - data_end} bytes after the last block "
              "(corrupt header or appended data?)")
    pickle_meta = desc.get("pickle")
    if pickle_meta is not None:
        if (not isinstance(pickle_meta, dict)
                or type(pickle_meta.get("block")) is not int
                or not 0 <= pickle_meta["block"] < len(blocks)):
            _fail(name, "pickle entry is malformed")
    schemas = desc.get("schemas", [])
    if not isinstance(schemas, list):
        _fail(name, "schemas entry is not a list")
    return _Header(name, file_size, data_start, meta, tensors, blocks, arrays, schemas,
                   desc.get("structure"), pickle_meta, f"{major}.{minor}")


def _check_tensors(name, header, data_size, data_start):
    tensors, spans = {}, []
    for tname, info in header.items():
        if tname == "__metadata__":
            continue
        if not isinstance(info, dict):
            _fail(name, f"tensor {tname!r}: entry is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in _ST_ITEMSIZE:
            _fail(name, f"tensor {tname!r}: unsupported dtype {dtype!r}")
        if not isinstance(shape, list) or not isinstance(offsets, list) or len(offsets) != 2:
            _fail(name, f"tensor {tname!r}: malformed shape or data_offsets")
        count = 1
        for n in shape:
            count *= _as_int(n, name, f"tensor {tname!r}: a dimension")
        start = _as_int(offsets[0], name, f"tensor {tname!r}: start offset")
        end = _as_int(offsets[1], name, f"tensor {tname!r}: end offset")
        if end < start or end - start != count * _ST_ITEMSIZE[dtype]:
            _fail(name, f"tensor {tname!r}: data_offsets {offsets} do not match shape "
                  f"{shape} of {dtype}")
        spans.append((start, end, tname))
        tensors[tname] = (data_start + start, data_start + end)
    spans.sort()
    position = 0
    for start, end, tname in spans:
        if start != position:
            _fail(name, f"tensor {tname!r}: data_offsets leave a hole or overlap at "
                  f"{position}")
        position = end
    return tensors, position


def _check_blocks(name, desc, tensors):
    raw_blocks = desc.get("blocks")
    if not isinstance(raw_blocks, list):
        _fail(name, "blocks entry is missing")
    blocks, seen = [], set()
    for i, b in enumerate(raw_blocks):
        if (not isinstance(b, dict) or not isinstance(b.get("tensor"), str)
                or b["tensor"] not in tensors or b["tensor"] in seen):
            _fail(name, f"block {i} does not name a distinct tensor of the file")
        seen.add(b["tensor"])
        start, end = tensors[b["tensor"]]
        nbytes = _as_int(b.get("nbytes"), name, f"block {i}: nbytes")
        if nbytes != end - start:
            _fail(name, f"block {i}: nbytes {nbytes} does not match its tensor "
                  f"({end - start} bytes)")
        crc = b.get("crc32")
        if not isinstance(crc, str) or len(crc) != 8:
            _fail(name, f"block {i}: malformed checksum {crc!r}")
        try:
            crc = int(crc, 16)
        except ValueError as exc:
            _fail(name, f"block {i}: malformed checksum", exc)
        blocks.append((b["tensor"], start, nbytes, crc))
    return blocks


def _check_arrays(name, desc, blocks):
    raw_arrays = desc.get("arrays")
    if not isinstance(raw_arrays, list):
        _fail(name, "arrays entry is missing")
    arrays = []
    for i, a in enumerate(raw_arrays):
        if not isinstance(a, dict):
            _fail(name, f"array {i}: entry is not an object")
        apath = a.get("path") if isinstance(a.get("path"), str) else f"array {i}"
        where = f"field {apath!r}"
        dtype = a.get("dtype")
        if not isinstance(dtype, str) or dtype not in _ALLOWED_DTYPES:
            _fail(name, f"{where}: dtype {dtype!r} is not allowed (only bool, integer, "
                  "float and complex types are loaded)")
        itemsize = np.dtype(dtype).itemsize
        shape, strides = a.get("shape"), a.get("strides")
        if (not isinstance(shape, list) or not isinstance(strides, list)
                or len(shape) != len(strides) or len(shape) > 64):
            _fail(name, f"{where}: malformed shape or strides")
        shape = [_as_int(n, name, f"{where}: a dimension") for n in shape]
        strides = [_as_int(s, name, f"{where}: a stride", minimum=-2**62) for s in strides]
        offset = _as_int(a.get("offset"), name, f"{where}: offset")
        block = a.get("block")
        size = math.prod(shape)
        # Checked for empty arrays too, and before the block bounds: stride-0
        # views could otherwise claim any element count.
        if (math.prod(n for n in shape if n) * itemsize > _MAX_NBYTES
                or max((abs(s) for s in strides), default=0) > _MAX_INDEX
                or offset > _MAX_INDEX):
            _fail(name, f"{where}: shape {tuple(shape)} with strides {tuple(strides)} "
                  "is too large for numpy")
        if size == 0:
            block = None
        else:
            if type(block) is not int or not 0 <= block < len(blocks):
                _fail(name, f"{where}: refers to block {block!r}, which does not exist")
            lo = hi = offset
            for n, s in zip(shape, strides):
                if s < 0:
                    lo += (n - 1) * s
                else:
                    hi += (n - 1) * s
            if lo < 0 or hi + itemsize > blocks[block][2]:
                _fail(name, f"{where}: shape {tuple(shape)} with strides {tuple(strides)} "
                      f"at offset {offset} reaches outside its block of "
                      f"{blocks[block][2]} bytes")
        torch_dtype = a.get("torch")
        if torch_dtype is not None:
            if not isinstance(torch_dtype, str) or torch_dtype not in _TORCH_DTYPES:
                _fail(name, f"{where}: torch dtype {torch_dtype!r} is not allowed")
            expected = np.dtype(_TORCH_VIA[torch_dtype] if torch_dtype in _TORCH_VIA
                                else torch_dtype)
            if np.dtype(dtype) != expected:
                _fail(name, f"{where}: torch dtype {torch_dtype} stored as {dtype}")
        arrays.append((block, offset, tuple(shape), tuple(strides), dtype, apath,
                       torch_dtype, bool(a.get("requires_grad", False))))
    return arrays


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------

_MMAP_ACCESS = {"r": mmap.ACCESS_READ, "r+": mmap.ACCESS_WRITE, "c": mmap.ACCESS_COPY}


def _block_field(arrays, index, tname):
    """The path of the first array stored in block ``index``, else the tensor name."""
    return next((a[5] for a in arrays if a[0] == index), tname)


def _check_crc(header, index, value):
    tname, _start, _nbytes, crc = header.blocks[index]
    if value != crc:
        _fail(header.name, f"field {_block_field(header.arrays, index, tname)!r} is "
              f"corrupt: checksum {value:08x} does not match the stored {crc:08x}")


def _verify(header, blocks_data):
    for index, data in enumerate(blocks_data):
        value = 0
        for start in range(0, len(data), _CHUNK):
            value = zlib.crc32(data[start:start + _CHUNK], value)
        _check_crc(header, index, value)


def _read_blocks(f, header, verify):
    """Read every block into a new array; with ``verify``, check the checksums too.

    The checksums run in a worker thread behind the reads (they only read
    memory that is already filled), so they overlap the I/O.
    """
    blocks_data, crcs, checks = [], [], []
    with ThreadPoolExecutor(1, thread_name_prefix="namedschema-crc") as pool:
        for tname, start, nbytes, _crc in header.blocks:
            block = np.empty(nbytes, dtype=np.uint8)
            f.seek(start)
            view = memoryview(block)
            crc = _Crc()
            done = 0
            while done < nbytes:
                got = f.readinto(view[done:done + _CHUNK])
                if not got:
                    _fail(header.name, f"block {tname!r} is truncated: expected {nbytes} "
                          f"bytes, found {done} (file changed while reading?)")
                if verify:
                    checks.append(pool.submit(crc.update, view[done:done + got]))
                done += got
            crcs.append(crc)
            blocks_data.append(block)
        for check in checks:
            check.result()
    if verify:
        for index, crc in enumerate(crcs):
            _check_crc(header, index, crc.value)
    return blocks_data


def _map_blocks(f, header, mode):
    if not header.blocks or all(n == 0 for _t, _s, n, _c in header.blocks):
        return [np.empty(0, np.uint8) for _ in header.blocks]
    mapped = mmap.mmap(f.fileno(), 0, access=_MMAP_ACCESS[mode])
    if len(mapped) < header.file_size:
        _fail(header.name, "is truncated: the file shrank while it was being mapped")
    tensor_blocks = {a[0] for a in header.arrays if a[6] is not None}
    private = None
    if mode == "r" and tensor_blocks:
        # torch has no read-only tensors: a write to a read-only map would
        # crash the process, so blocks holding tensors are mapped copy-on-write.
        private = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    out = []
    for index, (_t, start, nbytes, _c) in enumerate(header.blocks):
        source = private if private is not None and index in tensor_blocks else mapped
        out.append(np.frombuffer(source, np.uint8, nbytes, start) if nbytes
                   else np.empty(0, np.uint8))
    return out


def _make_arrays(header, blocks_data):
    torch = None
    storages = {}  # block -> untyped storage, so tensors of one block share one
    result = []
    for block, offset, shape, strides, dtype, _p, torch_dtype, grad in header.arrays:
        if block is None:
            arr = np.empty(shape, np.dtype(dtype))
        else:
            arr = np.ndarray(shape, np.dtype(dtype), buffer=blocks_data[block],
                             offset=offset, strides=strides)
        if torch_dtype is not None:
            if torch is None:
                import torch  # the file holds tensors: torch is needed to rebuild them
            arr = _make_tensor(torch, arr, block, offset, strides, torch_dtype,
                               blocks_data, storages)
            if grad:
                arr.requires_grad_(True)
        result.append(arr)
    return result


def _make_tensor(torch, arr, block, offset, strides, torch_dtype, blocks_data, storages):
    tdtype = getattr(torch, torch_dtype)
    itemsize = torch.empty(0, dtype=tdtype).element_size()
    with warnings.catch_warnings():
        # Read-only maps give read-only tensors; torch warns about that.
        warnings.simplefilter("ignore", UserWarning)
        if (block is not None and offset % itemsize == 0
                and all(s >= 0 and s % itemsize == 0 for s in strides)):
            storage = storages.get(block)
            if storage is None:
                storage = storages[block] = torch.from_numpy(
                    blocks_data[block]).untyped_storage()
            tensor = torch.empty(0, dtype=tdtype)
            tensor.set_(storage, offset // itemsize, arr.shape,
                        [s // itemsize for s in strides])
            return tensor
        tensor = torch.from_numpy(arr)
    if torch_dtype in _TORCH_VIA:
        tensor = tensor.view(tdtype)
    return tensor


class _Decoder:
    def __init__(self, header, arrays):
        self.header, self.arrays = header, arrays
        self.classes = [None] * len(header.schemas)

    def fail(self, message, cause=None):
        _fail(self.header.name, f"structure: {message}", cause)

    def schema(self, index):
        if type(index) is not int or not 0 <= index < len(self.classes):
            self.fail(f"refers to schema {index!r}, which does not exist")
        cls = self.classes[index]
        if cls is None:
            entry = self.header.schemas[index]
            if not isinstance(entry, dict):
                self.fail(f"schema {index} is not an object")
            try:
                defaults = tuple(self.decode(d, allow_refs=False)
                                 for d in entry.get("defaults", []))
                fields = entry.get("fields")
                if not isinstance(fields, list) or not all(type(x) is str for x in fields):
                    raise TypeError("fields must be a list of str")
                if not isinstance(entry.get("typename"), str):
                    raise TypeError("typename must be a str")
                module = entry.get("module")
                cls = _pickle.rebuild_schema(
                    entry.get("kind"), entry.get("id"), entry["typename"], tuple(fields),
                    defaults, module if isinstance(module, str) else None)
            except (ValueError, TypeError) as exc:
                if isinstance(exc, FormatError):
                    raise
                self.fail(f"schema {index} is invalid: {exc}", exc)
            self.classes[index] = cls
        return cls

    def decode(self, node, allow_refs=True):
        if node is None or type(node) in (bool, int, float, str):
            return node
        if type(node) is not dict or len(node) not in (1, 2):
            self.fail(f"unknown node {node!r:.60}")
        if "list" in node and len(node) == 1 and type(node["list"]) is list:
            return [self.decode(v, allow_refs) for v in node["list"]]
        if "tuple" in node and len(node) == 1 and type(node["tuple"]) is list:
            return tuple(self.decode(v, allow_refs) for v in node["tuple"])
        if "dict" in node and len(node) == 1 and type(node["dict"]) is list:
            out = {}
            for item in node["dict"]:
                if type(item) is not list or len(item) != 2 or type(item[0]) is not str:
                    self.fail("malformed dict item")
                out[item[0]] = self.decode(item[1], allow_refs)
            return out
        if "float" in node and len(node) == 1 and node["float"] in ("nan", "inf", "-inf"):
            return float(node["float"])
        if allow_refs and "array" in node and len(node) == 1:
            index = node["array"]
            if type(index) is not int or not 0 <= index < len(self.arrays):
                self.fail(f"refers to array {index!r}, which does not exist")
            return self.arrays[index]
        if allow_refs and "scalar" in node and len(node) == 1:
            index = node["scalar"]
            if type(index) is not int or not 0 <= index < len(self.arrays) \
                    or not isinstance(self.arrays[index], np.ndarray):
                self.fail(f"refers to scalar {index!r}, which does not exist")
            return self.arrays[index][()]
        if allow_refs and "schema" in node and len(node) == 1:
            return self.schema(node["schema"])
        if allow_refs and "nt" in node and type(node.get("values")) is list:
            cls = self.schema(node["nt"])
            values = [self.decode(v, allow_refs) for v in node["values"]]
            if len(values) != len(cls._fields):
                self.fail(f"{cls._typename} has {len(cls._fields)} fields, the file "
                          f"gives {len(values)} values")
            return cls._make(values)
        self.fail(f"unknown node {node!r:.60}")


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, arrays):
        super().__init__(file)
        self._arrays = arrays

    def persistent_load(self, pid):
        if (type(pid) is tuple and len(pid) == 2 and pid[0] == "array"
                and type(pid[1]) is int and 0 <= pid[1] < len(self._arrays)):
            return self._arrays[pid[1]]
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def load(path, *, mmap_mode=None, allow_pickle=False, verify=False):
    """Load a checkpoint written by :func:`save`.

    Arrays that were views of one another come back as views of one block.
    With ``mmap_mode`` the blocks are memory-mapped instead of read, so
    opening takes milliseconds whatever the size and reads nothing until
    used; the arrays stay valid after the file is replaced by a new save.

    Args:
        path: the checkpoint file.
        mmap_mode: None to read everything into memory, or as in ``np.load``:
            ``'r'`` read-only, ``'r+'`` writes go to the file, ``'c'``
            copy-on-write (writes stay in memory). Torch tensors cannot be
            read-only, so with ``'r'`` their blocks are mapped copy-on-write.
        allow_pickle: allow files whose structure was pickled. Unpickling
            runs code chosen by whoever wrote the file: only allow it for
            files you trust.
        verify: check every block's CRC-32 (reads all data, even when mapped).

    Returns:
        The saved object graph.

    Raises:
        FormatError: (a ValueError) the file is not a checkpoint, is
            truncated, corrupt or of an unknown version.
        UnsafeLoadError: the file needs pickle and ``allow_pickle`` is false.
        OSError: the file cannot be read.
    """
    name = os.fspath(path)
    if mmap_mode is not None and mmap_mode not in _MMAP_ACCESS:
        raise ValueError(f"mmap_mode must be None, 'r', 'r+' or 'c', got {mmap_mode!r}")
    with open(name, "r+b" if mmap_mode == "r+" else "rb", buffering=0) as f:
        file_size = os.fstat(f.fileno()).st_size
        header = _read_header(f, name, file_size)
        if header.pickle is not None and not allow_pickle:
            raise UnsafeLoadError(
                f"{name!r} holds pickled objects ({str(header.pickle.get('reason', '?'))[:200]} "
                "is not plain data); loading it runs code chosen by whoever wrote the "
                "file. Pass allow_pickle=True only if you trust it.")
        if mmap_mode is None:
            blocks_data = _read_blocks(f, header, verify)
        else:
            blocks_data = _map_blocks(f, header, mmap_mode)
            if verify:
                _verify(header, blocks_data)
    arrays = _make_arrays(header, blocks_data)
    if header.pickle is not None:
        data = blocks_data[header.pickle["block"]]
        try:
            return _Unpickler(io.BytesIO(memoryview(data)), arrays).load()
        except Exception as exc:  # noqa: BLE001 - anything a bad pickle raises
            _fail(name, f"pickled structure cannot be loaded: {type(exc).__name__}: {exc}",
                  exc)
    try:
        return _Decoder(header, arrays).decode(header.structure)
    except RecursionError as exc:
        _fail(name, "structure is nested too deeply", exc)


# --------------------------------------------------------------------------
# Inspecting
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class FieldInfo:
    """One stored array as :func:`inspect` reports it.

    Attributes:
        path: dotted field path, such as ``Traj.obs.pos``.
        shape: the array's shape.
        dtype: numpy dtype name (``torch.*`` for tensors).
        nbytes: bytes of the array's elements.
        block: tensor name of the block holding it (None for empty arrays).
    """

    path: str
    shape: tuple
    dtype: str
    nbytes: int
    block: str | None


@dataclass(frozen=True)
class CheckpointInfo:
    """What :func:`inspect` found in a checkpoint's header; ``str()`` is a tree.

    Attributes:
        path: the file inspected.
        format_version: the file's format version, ``"1.0"``.
        file_size: size of the file in bytes.
        data_bytes: bytes of all blocks (what loading reads).
        needs_pickle: whether ``load`` needs ``allow_pickle=True``.
        pickle_reason: the first object that is not data, or None.
        fields: a :class:`FieldInfo` per stored array.
        checkpoint_id: the file's random id.
        tree: the structure as indented text.
    """

    path: str
    format_version: str
    file_size: int
    data_bytes: int
    needs_pickle: bool
    pickle_reason: str | None
    fields: tuple
    checkpoint_id: str
    tree: str

    def __str__(self):
        lines = [f"{self.path}: namedschema checkpoint, format {self.format_version}, "
                 f"{len(self.fields)} arrays, {_human(self.data_bytes)} of data, "
                 f"file {_human(self.file_size)}"]
        if self.needs_pickle:
            lines.append(f"needs allow_pickle=True: {self.pickle_reason}")
        lines.append(self.tree)
        return "\n".join(lines)


def _human(n):
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"


def _array_line(info):
    return f"{info.dtype} {info.shape} {_human(info.nbytes)}"


def _tree(node, schemas, fields, label, depth, lines, limit=2000):
    pad = "  " * depth
    if len(lines) >= limit:
        if len(lines) == limit:
            lines.append(f"{pad}...")
        return
    if isinstance(node, dict) and len(node) == 1 and "array" in node \
            and type(node["array"]) is int and 0 <= node["array"] < len(fields):
        lines.append(f"{pad}{label}{_array_line(fields[node['array']])}")
        return
    if isinstance(node, dict) and "nt" in node and type(node["nt"]) is int \
            and 0 <= node["nt"] < len(schemas) and isinstance(schemas[node["nt"]], dict) \
            and isinstance(node.get("values"), list) \
            and isinstance(schemas[node["nt"]].get("fields"), list):
        entry = schemas[node["nt"]]
        names = entry["fields"]
        lines.append(f"{pad}{label}{entry.get('typename')} ({entry.get('kind')})")
        for fname, value in zip(names, node["values"]):
            _tree(value, schemas, fields, f"{fname}: ", depth + 1, lines)
        return
    if isinstance(node, dict) and "nt" in node:
        raise FormatError(f"structure: malformed schema instance node {node!r:.60}")
    if isinstance(node, dict) and len(node) == 1 and "scalar" in node \
            and type(node["scalar"]) is int and 0 <= node["scalar"] < len(fields):
        lines.append(f"{pad}{label}{fields[node['scalar']].dtype} scalar")
        return
    for kind in ("list", "tuple", "dict"):
        if isinstance(node, dict) and kind in node and isinstance(node[kind], list):
            lines.append(f"{pad}{label}{kind} of {len(node[kind])}")
            for i, item in enumerate(node[kind]):
                if kind == "dict" and isinstance(item, list) and len(item) == 2:
                    _tree(item[1], schemas, fields, f"{item[0]!r}: ", depth + 1, lines)
                else:
                    _tree(item, schemas, fields, f"[{i}]: ", depth + 1, lines)
            return
    lines.append(f"{pad}{label}{json.dumps(node)[:60]}")


def inspect(path):
    """Describe a checkpoint from its header, without reading array data.

    Args:
        path: the checkpoint file.

    Returns:
        A :class:`CheckpointInfo`; ``print`` it for a tree of the structure
        with every field's dtype, shape and size.

    Raises:
        FormatError: the file is not a valid checkpoint header.

    >>> import numpy as np, tempfile, os, namedschema
    >>> P = namedschema.NamedTupleSchema('P', 'pos vel')
    >>> path = os.path.join(tempfile.mkdtemp(), 'p.nsb')
    >>> namedschema.save(P(np.zeros((3, 2), np.float32), np.ones(3)), path)
    >>> info = namedschema.inspect(path)
    >>> info.needs_pickle, [f.path for f in info.fields]
    (False, ['P.pos', 'P.vel'])
    >>> print(info.tree)
    P (NamedTupleSchema)
      pos: float32 (3, 2) 24 B
      vel: float64 (3,) 24 B
    """
    name = os.fspath(path)
    with open(name, "rb", buffering=0) as f:
        header = _read_header(f, name, os.fstat(f.fileno()).st_size)
    fields = []
    for block, _o, shape, _s, dtype, apath, torch_dtype, _g in header.arrays:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        fields.append(FieldInfo(apath, shape,
                                f"torch.{torch_dtype}" if torch_dtype else np.dtype(dtype).name,
                                nbytes, None if block is None else header.blocks[block][0]))
    for index, entry in enumerate(header.schemas):
        if (not isinstance(entry, dict) or not isinstance(entry.get("typename"), str)
                or not isinstance(entry.get("fields"), list)
                or not all(isinstance(f, str) for f in entry["fields"])):
            _fail(name, f"structure: schema {index} is invalid: needs a str typename "
                  "and a list of str fields")
    lines = []
    if header.structure is None:
        lines.append("<pickled object graph>")
        lines.extend(f"  {fi.path}: {_array_line(fi)}" for fi in fields)
    else:
        try:
            _tree(header.structure, header.schemas, fields, "", 0, lines)
        except FormatError as exc:
            _fail(name, str(exc), exc)
        except RecursionError as exc:
            _fail(name, "structure is nested too deeply", exc)
    desc_id = json.loads(header.meta["namedschema"]).get("checkpoint_id")
    return CheckpointInfo(
        path=name, format_version=header.version, file_size=header.file_size,
        data_bytes=sum(b[2] for b in header.blocks), needs_pickle=header.pickle is not None,
        pickle_reason=None if header.pickle is None else header.pickle.get("reason"),
        fields=tuple(fields), checkpoint_id=str(desc_id), tree="\n".join(lines))
