"""The header as typed records, and the trust boundary: every check of header data.

A header read from a file is untrusted. ``read_header`` is the only code that
looks at its JSON: it bounds every length, count and nesting before work
proportional to it, checks every field's type and range, and returns frozen
records whose fields are named. Everything after it (blocks, arrays, nodes,
inspect) reads those records, never the JSON, and may rely on:

* every tensor entry has a known dtype, and its offsets match its shape;
  the tensors tile the data section without holes or overlaps, and the data
  section ends where the file ends;
* every block names a distinct tensor and lies inside the file;
* every array has an allowed dtype, a shape numpy can make, and touches only
  bytes inside its block (an empty array has no block);
* every schema entry has a str kind, id and typename and a list of str fields;
* the pickle entry, if any, names an existing block.

The structure itself is a tree of nodes checked node by node by the node table
(``nodes.py``), where each node kind is defined once.

Writing builds the same records (``Header.encode``), so the two sides cannot
disagree on a field's name or form.
"""

from __future__ import annotations

import json
import math
import re
import struct
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, NoReturn

import numpy as np

from .._core.instance import printable
from .._core.schema import MAX_FIELDS
from .._core.tree import byte_span
from ..errors import FormatError
from .chunktable import ChunkTable, first_fields
from .constants import (
    ALIGN,
    ALLOWED_DTYPES,
    COMPRESSED_FEATURE,
    FORMAT_NAME,
    FORMAT_VERSION,
    KNOWN_FEATURES,
    MAX_HEADER,
    MAX_INDEX,
    MAX_NBYTES,
    MAX_NDIM,
    PLACED_FEATURE,
    RAW_CRCS_FEATURE,
    READ_MAJOR,
    ST_ITEMSIZE,
    TORCH_DTYPES,
    ZERO_CRC,
    torch_numpy_dtype,
)
from .jsontext import parse_bounded
from .metadata import metadata_problem
from .sniff import looks_like

_CRC_MARKER = b'"header_crc32":"'
_CRC_TEXT = re.compile(r"[0-9a-f]{8}", re.ASCII)
_MAX_MESSAGE = 2000  # characters of a message; file strings quoted in it may be huge
# torch lets only floating point and complex tensors require gradients.
_GRAD_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "complex64",
                          "complex128"})


def fail(name: str, message: str, cause: BaseException | None = None) -> NoReturn:
    """Raise the FormatError for file ``name``, its message escaped and bounded.

    Every message about a file goes through here, so text taken from the file
    (names, reasons) never reaches a terminal with its control characters.
    """
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "..."
    raise FormatError(printable(f"{name!r}: {message}")) from cause


def _as_int(value: Any, name: str, what: str, minimum: int = 0) -> int:
    if type(value) is not int or value < minimum:
        fail(name, f"{what} is not an integer >= {minimum}: {value!r}")
    return value


# --------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorEntry:
    """One safetensors tensor: a block, or zero padding (``__pad__.K``)."""

    dtype: str                  # safetensors dtype name
    shape: tuple[int, ...]
    start: int                  # offsets relative to the data section
    end: int

    def to_json(self) -> dict[str, Any]:
        """The entry as the header's JSON object."""
        return {"dtype": self.dtype, "shape": list(self.shape),
                "data_offsets": [self.start, self.end]}

    @classmethod
    def from_json(cls, name: str, tname: str, info: Any) -> TensorEntry:
        """Tensor ``tname``'s entry read from file ``name``'s header (FormatError if bad)."""
        if not isinstance(info, dict):
            fail(name, f"tensor {tname!r}: entry is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in ST_ITEMSIZE:
            fail(name, f"tensor {tname!r}: unsupported dtype {dtype!r}")
        if (not isinstance(shape, list) or not isinstance(offsets, list) or len(offsets) != 2
                or len(shape) > MAX_NDIM):
            fail(name, f"tensor {tname!r}: malformed shape or data_offsets")
        count = 1
        for n in shape:
            # Bounded before multiplying: at most MAX_NDIM factors of 63 bits.
            count *= _as_int(n, name, f"tensor {tname!r}: a dimension")
            if count > MAX_NBYTES:
                fail(name, f"tensor {tname!r}: shape is too large")
        start = _as_int(offsets[0], name, f"tensor {tname!r}: start offset")
        end = _as_int(offsets[1], name, f"tensor {tname!r}: end offset")
        if end < start or end - start != count * ST_ITEMSIZE[dtype]:
            fail(name, f"tensor {tname!r}: data_offsets {offsets} do not match shape "
                 f"{shape} of {dtype}")
        return cls(dtype, tuple(shape), start, end)


@dataclass(frozen=True)
class BlockEntry:
    """One stored span of memory: the tensor holding it and its checksum (of the raw
    bytes); a compressed one has its chunk table (``chunktable``)."""

    tensor: str
    start: int                  # offset in the data section (from the tensor entry)
    nbytes: int
    crc32: int
    table: ChunkTable | None = None

    @property
    def stored(self) -> int:
        """Bytes of the block in the file (its padding excluded)."""
        return self.nbytes if self.table is None else self.table.stored

    def to_json(self) -> dict[str, Any]:
        """The entry as the header's JSON object."""
        out = {"tensor": self.tensor, "nbytes": self.nbytes, "crc32": f"{self.crc32:08x}"}
        return out if self.table is None else {**out, **self.table.to_json()}

    @classmethod
    def from_json(cls, name: str, index: int, raw: Any, tensors: dict[str, TensorEntry],
                  seen: set[str], where: str | None = None) -> BlockEntry:
        """``where`` names the block in messages (its first field), if known."""
        if (not isinstance(raw, dict) or not isinstance(raw.get("tensor"), str)
                or raw["tensor"] not in tensors or raw["tensor"] in seen):
            fail(name, f"block {index} does not name a distinct tensor of the file")
        tensor = tensors[raw["tensor"]]
        nbytes = _as_int(raw.get("nbytes"), name, f"block {index}: nbytes")
        table = None
        if raw.get("codec") is not None:
            try:
                table = ChunkTable.from_json(raw, nbytes, tensor.dtype, tensor.end - tensor.start)
            except ValueError as exc:
                fail(name, f"{where or f'block {index}'}: {exc}")
        elif nbytes != tensor.end - tensor.start:
            fail(name, f"block {index}: nbytes {nbytes} does not match its tensor "
                 f"({tensor.end - tensor.start} bytes)")
        crc = raw.get("crc32")
        # Exactly what the writer writes: eight lower-case ASCII hex digits
        # (int(crc, 16) alone would take " 1234567", "0x123456" or other digits).
        if not isinstance(crc, str) or not _CRC_TEXT.fullmatch(crc):
            fail(name, f"block {index}: malformed checksum {crc!r:.40}")
        return cls(raw["tensor"], tensor.start, nbytes, int(crc, 16), table)


@dataclass(frozen=True)
class ArrayEntry:
    """One array object: a strided view of a block (``block`` None when empty)."""

    block: int | None
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str                  # numpy dtype.str, a member of ALLOWED_DTYPES
    path: str                   # where it was found in the saved graph
    torch: str | None = None    # torch dtype name for tensors
    requires_grad: bool = False

    @property
    def nbytes(self) -> int:
        """Bytes of the array's elements."""
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    def to_json(self) -> dict[str, Any]:
        """The entry as the header's JSON object."""
        out: dict[str, Any] = {"block": self.block, "offset": self.offset,
                               "shape": list(self.shape), "strides": list(self.strides),
                               "dtype": self.dtype, "path": self.path}
        if self.torch is not None:
            out["torch"] = self.torch
            out["requires_grad"] = self.requires_grad
        return out

    @classmethod
    def from_json(cls, name: str, index: int, raw: Any,
                  blocks: tuple[BlockEntry, ...]) -> ArrayEntry:
        """Array entry ``index`` read from file ``name``'s header (FormatError if malformed)."""
        if not isinstance(raw, dict):
            fail(name, f"array {index}: entry is not an object")
        path = raw["path"] if isinstance(raw.get("path"), str) else f"array {index}"
        where = f"field {path!r}"
        dtype = raw.get("dtype")
        if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES:
            fail(name, f"{where}: dtype {dtype!r} is not allowed (only bool, integer, "
                 "float and complex types are loaded)")
        itemsize = np.dtype(dtype).itemsize
        shape, strides = raw.get("shape"), raw.get("strides")
        if (not isinstance(shape, list) or not isinstance(strides, list)
                or len(shape) != len(strides) or len(shape) > MAX_NDIM):
            fail(name, f"{where}: malformed shape or strides")
        shape = [_as_int(n, name, f"{where}: a dimension") for n in shape]
        strides = [_as_int(s, name, f"{where}: a stride", minimum=-MAX_INDEX)
                   for s in strides]
        offset = _as_int(raw.get("offset"), name, f"{where}: offset")
        # Checked for empty arrays too, and before the block bounds: stride-0
        # views could otherwise claim any element count.
        if (math.prod(n for n in shape if n) * itemsize > MAX_NBYTES
                or max((abs(s) for s in strides), default=0) > MAX_INDEX
                or offset > MAX_INDEX):
            fail(name, f"{where}: shape {tuple(shape)} with strides {tuple(strides)} "
                 "is too large for numpy")
        block = raw.get("block")
        if math.prod(shape) == 0:
            block = None
        else:
            if type(block) is not int or not 0 <= block < len(blocks):
                fail(name, f"{where}: refers to block {block!r}, which does not exist")
            lo, hi = byte_span(offset, shape, strides)
            if lo < 0 or hi + itemsize > blocks[block].nbytes:
                fail(name, f"{where}: shape {tuple(shape)} with strides {tuple(strides)} "
                     f"at offset {offset} reaches outside its block of "
                     f"{blocks[block].nbytes} bytes")
        torch_dtype = raw.get("torch")
        requires_grad = raw.get("requires_grad", False)
        if type(requires_grad) is not bool:
            fail(name, f"{where}: requires_grad is not true or false: {requires_grad!r:.40}")
        if torch_dtype is not None:
            if not isinstance(torch_dtype, str) or torch_dtype not in TORCH_DTYPES:
                fail(name, f"{where}: torch dtype {torch_dtype!r} is not allowed")
            if np.dtype(dtype) != torch_numpy_dtype(torch_dtype):
                fail(name, f"{where}: torch dtype {torch_dtype} stored as {dtype}")
            # What torch can view: strides in whole, non-negative elements (a
            # tensor saved from torch never has others).
            if any(s < 0 or s % itemsize for s in strides):
                fail(name, f"{where}: torch tensor strides {tuple(strides)} are not "
                     f"non-negative multiples of its element size {itemsize}")
            if requires_grad and torch_dtype not in _GRAD_DTYPES:
                fail(name, f"{where}: requires_grad on a {torch_dtype} tensor (only "
                     "floating point and complex tensors can require gradients)")
        elif requires_grad:
            fail(name, f"{where}: requires_grad on an array that is not a torch tensor")
        return cls(block, offset, tuple(shape), tuple(strides), dtype, path,
                   torch_dtype, requires_grad)


@dataclass(frozen=True)
class SchemaEntry:
    """A schema class by value; ``defaults`` are structure nodes without references."""

    kind: str                   # NamedTupleSchema or NamedArrayTupleSchema
    typename: str
    fields: tuple[str, ...]
    id: str
    defaults: tuple[Any, ...] = ()
    module: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry as the header's JSON object."""
        return {"kind": self.kind, "typename": self.typename, "fields": list(self.fields),
                "id": self.id, "defaults": list(self.defaults), "module": self.module}

    @classmethod
    def from_json(cls, name: str, index: int, raw: Any) -> SchemaEntry:
        """Schema entry ``index`` read from file ``name``'s header (FormatError if malformed)."""
        why = None
        if not isinstance(raw, dict):
            why = "it is not an object"
        elif not isinstance(raw.get("typename"), str):
            why = "typename must be a str"
        elif (not isinstance(raw.get("fields"), list)
              or not all(type(f) is str for f in raw["fields"])):
            why = "fields must be a list of str"
        elif not isinstance(raw.get("kind"), str):
            why = f"unknown kind {raw.get('kind')!r}"
        elif not isinstance(raw.get("id"), str):
            why = f"invalid id {raw.get('id')!r}"
        elif not isinstance(raw.get("defaults", []), list):
            why = "defaults must be a list"
        elif len(raw["fields"]) > MAX_FIELDS:
            why = f"{len(raw['fields']):,} fields, more than the limit of {MAX_FIELDS:,}"
        if why is not None:
            fail(name, f"structure: schema {index} is invalid: {why}")
        module = raw.get("module")
        return cls(raw["kind"], raw["typename"], tuple(raw["fields"]), raw["id"],
                   tuple(raw.get("defaults", [])), module if isinstance(module, str) else None)


@dataclass(frozen=True)
class PickleEntry:
    """The block holding a pickle of the whole graph, and why it was needed."""

    block: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The entry as the header's JSON object."""
        return {"block": self.block, "reason": self.reason}

    @classmethod
    def from_json(cls, name: str, raw: Any, n_blocks: int) -> PickleEntry:
        """The pickle entry read from file ``name``'s header (FormatError if malformed)."""
        if (not isinstance(raw, dict) or type(raw.get("block")) is not int
                or not 0 <= raw["block"] < n_blocks):
            fail(name, "pickle entry is malformed")
        return cls(raw["block"], str(raw.get("reason", "?")))


@dataclass(frozen=True)
class SaveRecord:
    """What the save that made a file's current state wrote (``"saved"``, optional)."""

    kind: str                   # "full" or "incremental"
    bytes_written: int          # data bytes that save wrote
    ranges: int                 # byte ranges it wrote
    data_bytes: int             # data bytes of the checkpoint

    def to_json(self) -> dict[str, Any]:
        """The record as the header's JSON object."""
        return {"kind": self.kind, "bytes_written": self.bytes_written,
                "ranges": self.ranges, "data_bytes": self.data_bytes}

    @classmethod
    def from_json(cls, name: str, raw: Any) -> SaveRecord | None:
        """The record of the last save read from file ``name``'s header, None when absent."""
        if raw is None:
            return None
        if (not isinstance(raw, dict) or raw.get("kind") not in ("full", "incremental")
                or any(type(raw.get(k)) is not int or raw[k] < 0
                       for k in ("bytes_written", "ranges", "data_bytes"))):
            fail(name, "the record of the last save is malformed")
        return cls(raw["kind"], raw["bytes_written"], raw["ranges"], raw["data_bytes"])


@dataclass(frozen=True)
class Description:
    """The ``namedschema`` metadata value: everything needed to rebuild the graph."""

    blocks: tuple[BlockEntry, ...]
    arrays: tuple[ArrayEntry, ...]
    schemas: tuple[SchemaEntry, ...]
    structure: Any                  # the root node, None when pickled
    pickle: PickleEntry | None
    checkpoint_id: str
    features: tuple[str, ...] = ()
    parent: str | None = None
    saved: SaveRecord | None = None     # written by incremental-mode saves only
    metadata: dict[str, str] = field(default_factory=dict)  # the caller's plain strings

    def to_json(self) -> dict[str, Any]:
        """The description as the header's JSON object."""
        out: dict[str, Any] = {"blocks": [b.to_json() for b in self.blocks],
                "arrays": [a.to_json() for a in self.arrays],
                "schemas": [s.to_json() for s in self.schemas],
                "structure": self.structure,
                "pickle": None if self.pickle is None else self.pickle.to_json(),
                "features": list(self.features),
                "checkpoint_id": self.checkpoint_id,
                "parent": self.parent}
        if self.saved is not None:
            out["saved"] = self.saved.to_json()
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out


@dataclass(frozen=True)
class Header:
    """A whole header: the tensor table (blocks and padding, in file order) and description.

    ``name``, ``file_size`` and ``data_start`` say where a header read by
    ``read_header`` came from; a header being written leaves them at their
    defaults.
    """

    description: Description
    tensors: dict[str, TensorEntry]
    version: str = FORMAT_VERSION
    name: str = ""
    file_size: int = 0
    data_start: int = 0

    @property
    def blocks(self) -> tuple[BlockEntry, ...]:
        """The data blocks, in file order."""
        return self.description.blocks

    @property
    def arrays(self) -> tuple[ArrayEntry, ...]:
        """The array entries, in array-table order."""
        return self.description.arrays

    @property
    def data_bytes(self) -> int:
        """Bytes of all data blocks together."""
        return sum(b.nbytes for b in self.blocks)

    def block_file_start(self, index: int) -> int:
        """Absolute file offset of block ``index``."""
        return self.data_start + self.blocks[index].start

    def block_field(self, index: int) -> str:
        """The path of the first array stored in block ``index``, else its tensor name."""
        return next((a.path for a in self.arrays if a.block == index),
                    self.blocks[index].tensor)

    def with_crcs(self, crcs) -> Header:
        """This header with the blocks' checksums set (known only once the data is written)."""
        blocks = tuple(replace(b, crc32=c) for b, c in zip(self.blocks, crcs, strict=True))
        return replace(self, description=replace(self.description, blocks=blocks))

    def encode(self, length: int | None = None) -> bytes:
        """The header bytes, padded to ``length`` (at least the minimum) and checksummed.

        Every variable part that changes between ``encoded_length`` and the
        final ``encode`` (the block checksums, the header checksum) is fixed
        width, so the length measured before the data is written still holds.
        """
        meta = {"format": FORMAT_NAME, "format_version": self.version,
                "namedschema": json.dumps(self.description.to_json(), separators=(",", ":"),
                                          allow_nan=False),
                "header_crc32": ZERO_CRC}
        doc: dict[str, Any] = {"__metadata__": meta}
        doc.update((tname, t.to_json()) for tname, t in self.tensors.items())
        raw = json.dumps(doc, separators=(",", ":")).encode()
        if length is None:
            length = len(raw) + (-(8 + len(raw)) % ALIGN)
        if len(raw) > length:  # pragma: no cover - fixed-width fields
            raise FormatError(f"{self.name!r}: internal error: header length changed")
        raw += b" " * (length - len(raw))
        crc = zlib.crc32(raw)
        return raw.replace(_CRC_MARKER + ZERO_CRC.encode(),
                           _CRC_MARKER + f"{crc:08x}".encode(), 1)


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------

def read_header(f: BinaryIO, name: str, file_size: int) -> Header:
    """Read and check the header of the open file ``f`` (``name`` for messages)."""
    if file_size < 8:
        fail(name, f"is not a namedschema file: {file_size} bytes, too short for a "
             f"namedschema header (incomplete write?){looks_like(f)}")
    prefix = f.read(8)
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER:
        fail(name, f"is not a namedschema file: header length {length} is "
             f"implausible (limit {MAX_HEADER}){looks_like(f)}")
    if 8 + length > file_size:
        start = f.read(2)  # a checkpoint's JSON header starts with '{"'
        fail(name, f"is truncated: header needs {length} bytes, file has "
             f"{file_size - 8} after the length prefix (incomplete write?)"
             + (looks_like(f) if start != b'{"' else ""))
    raw = f.read(length)
    if len(raw) != length:
        fail(name, "is truncated while reading the header (file changed?)")
    try:
        doc = parse_bounded(name, raw.decode("utf-8"), "header")
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, FormatError):
            raise
        fail(name, f"is not a namedschema file: header is not valid JSON ({exc})"
             f"{looks_like(f)}", exc)
    if not isinstance(doc, dict):
        fail(name, f"is not a namedschema file: header is not a JSON object{looks_like(f)}")
    meta = doc.get("__metadata__")
    meta, version = _check_metadata(name, meta, raw)
    desc = _parse_description(name, meta)

    data_start = 8 + length
    data_size = file_size - data_start
    tensors = {tname: TensorEntry.from_json(name, tname, info)
               for tname, info in doc.items() if tname != "__metadata__"}
    data_end = _check_tiling(name, tensors)
    raw_blocks = desc.get("blocks")
    if not isinstance(raw_blocks, list):
        fail(name, "blocks entry is missing")
    raw_arrays = desc.get("arrays")
    if not isinstance(raw_arrays, list):
        fail(name, "arrays entry is missing")
    seen: set[str] = set()
    blocks = []
    where = first_fields(raw_arrays)
    for i, b in enumerate(raw_blocks):
        blocks.append(BlockEntry.from_json(name, i, b, tensors, seen, where.get(i)))
        seen.add(blocks[-1].tensor)
    if any(b.table for b in blocks) and COMPRESSED_FEATURE not in desc.get("features", []):
        fail(name, f"has compressed blocks but does not list the feature "
             f"{COMPRESSED_FEATURE!r}")
    if any(b.table and b.table.offsets is not None for b in blocks) and \
            PLACED_FEATURE not in desc.get("features", []):
        fail(name, f"has chunk tables with offsets but does not list the feature "
             f"{PLACED_FEATURE!r}")
    if any(b.table and b.table.raw_crcs is not None for b in blocks) and \
            RAW_CRCS_FEATURE not in desc.get("features", []):
        fail(name, f"has chunk tables with raw checksums but does not list the feature "
             f"{RAW_CRCS_FEATURE!r}")
    arrays = tuple(ArrayEntry.from_json(name, i, a, tuple(blocks))
                   for i, a in enumerate(raw_arrays))
    # Truncation is reported per field, naming the first array in the block.
    for index, b in enumerate(blocks):
        start = data_start + b.start
        if start + b.stored > file_size:
            field_name = next((a.path for a in arrays if a.block == index), b.tensor)
            fail(name, f"field {field_name!r} is truncated: expected {b.stored} bytes, "
                 f"found {max(0, file_size - start)} (incomplete write?)")
    if data_end > data_size:
        fail(name, f"is truncated: the header describes {data_end} bytes of data, "
             f"found {data_size} (incomplete write?)")
    if data_end < data_size:
        fail(name, f"has {data_size - data_end} bytes after the last block "
             "(corrupt header or appended data?)")
    raw_pickle = desc.get("pickle")
    pickle = None if raw_pickle is None else PickleEntry.from_json(name, raw_pickle,
                                                                  len(blocks))
    raw_schemas = desc.get("schemas", [])
    if not isinstance(raw_schemas, list):
        fail(name, "schemas entry is not a list")
    schemas = tuple(SchemaEntry.from_json(name, i, s) for i, s in enumerate(raw_schemas))
    total_fields = sum(len(s.fields) for s in schemas)
    if total_fields > MAX_FIELDS:
        fail(name, f"structure: its schemas have {total_fields:,} fields in all, more "
             f"than the limit of {MAX_FIELDS:,}")
    parent = desc.get("parent")
    description = Description(
        blocks=tuple(blocks), arrays=arrays, schemas=schemas,
        structure=desc.get("structure"), pickle=pickle,
        checkpoint_id=str(desc.get("checkpoint_id")),
        features=tuple(desc.get("features", [])),
        parent=parent if isinstance(parent, str) else None,
        saved=SaveRecord.from_json(name, desc.get("saved")),
        metadata=_metadata(name, desc.get("metadata", {})))
    return Header(description, tensors, version, name, file_size, data_start)



def _metadata(name: str, raw: Any) -> dict[str, str]:
    problem = metadata_problem(raw)
    if problem:
        fail(name, f"metadata entry: {problem}")
    return dict(raw)


def _check_metadata(name: str, meta: Any, raw: bytes) -> tuple[dict[str, Any], str]:
    """Check format name, version and header checksum; return ``(meta, "MAJOR.MINOR")``."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        if isinstance(meta, dict) and isinstance(meta.get("format"), str):
            what = f"its metadata says format {meta['format']!r}"
        else:
            what = "it has no namedschema metadata"
        fail(name, f"is not a namedschema file: {what} (a safetensors file written "
             "by another tool? read it with safetensors.numpy.load_file)")
    version = meta.get("format_version")
    try:
        major, minor = (int(p) for p in str(version).split("."))
    except ValueError:
        fail(name, f"has an unreadable format version {version!r}")
    if major != READ_MAJOR:
        fail(name, f"is format {major}.{minor}; this version of namedschema reads "
             f"{READ_MAJOR}.x")
    stored_crc = meta.get("header_crc32")
    if (not isinstance(stored_crc, str) or len(stored_crc) != 8
            or raw.count(_CRC_MARKER) != 1):
        fail(name, "header checksum is missing or malformed (corrupt header)")
    zeroed = raw.replace(_CRC_MARKER + stored_crc.encode(), _CRC_MARKER + ZERO_CRC.encode(), 1)
    if f"{zlib.crc32(zeroed):08x}" != stored_crc:
        fail(name, "header is corrupt: its checksum does not match")
    return meta, f"{major}.{minor}"


def _parse_description(name: str, meta: dict[str, Any]) -> dict:
    try:
        desc = parse_bounded(name, meta["namedschema"], "namedschema description")
    except (KeyError, TypeError, ValueError, RecursionError) as exc:
        if isinstance(exc, FormatError):
            raise
        fail(name, "namedschema description is missing or not valid JSON", exc)
    if not isinstance(desc, dict):
        fail(name, "namedschema description is not a JSON object")
    features = desc.get("features", [])
    if not isinstance(features, list) or set(map(str, features)) - KNOWN_FEATURES:
        fail(name, f"uses features {features!r:.200} that this version of namedschema "
             "does not know; upgrade namedschema")
    return desc


def _check_tiling(name: str, tensors: dict[str, TensorEntry]) -> int:
    """Check the tensors tile the data section from 0; return where they end."""
    position = 0
    for start, end, tname in sorted((t.start, t.end, n) for n, t in tensors.items()):
        if start != position:
            fail(name, f"tensor {tname!r}: data_offsets leave a hole or overlap at "
                 f"{position}")
        position = end
    return position
