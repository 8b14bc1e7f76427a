"""The checkpoint format's fixed parts: constants, the header and its typed records.

Everything a reader needs before touching a block: the format's constants and allowed
dtypes, CRC-32 arithmetic, the strict JSON text of the header, the metadata check,
sniffing what kind of file a path holds, compressed blocks' chunk tables, and the
header itself (read, checked, written).
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, BinaryIO, NoReturn

import numpy as np

from .._core.instance import printable
from .._core.schema import MAX_FIELDS
from .._core.tree import byte_span
from ..errors import FormatError

__all__ = ["updated_crc", "crc_concat", "MAX_METADATA", "metadata_problem",
           "check_metadata_argument", "looks_like"]


# ---------------------------------------- constants
#
# The format's fixed values: its name and version, alignment, limits and dtype tables.
#
# Everything a header may name (dtypes, torch dtypes, safetensors dtypes) is a
# member of a table here, built from literals rather than from file text, so a
# header can only ever select one of these.

FORMAT_NAME = "namedschema.checkpoint"
FORMAT_VERSION = "1.0"
READ_MAJOR = 1                              # readers accept any 1.x file ...
# ... that lists only these features ("numpy-defaults": a schema default is a
# numpy scalar or array, held in a "numpy" node; "zstd-chunks": blocks stored
# as chunks, compressed with zstd or raw, listed in a chunk table; "zstd-chunk-offsets":
# chunk tables that place their chunks, written by incremental compressed saves;
# "zstd-chunk-raw-crcs": chunk tables that also list each chunk's raw CRC-32, which a
# save in a new process compares memory with)
COMPRESSED_FEATURE = "zstd-chunks"
PLACED_FEATURE = "zstd-chunk-offsets"
RAW_CRCS_FEATURE = "zstd-chunk-raw-crcs"
KNOWN_FEATURES: frozenset[str] = frozenset({"numpy-defaults", COMPRESSED_FEATURE,
                                            PLACED_FEATURE, RAW_CRCS_FEATURE})

ALIGN = 64                  # every block starts at a multiple of this in the file
CHUNK = 16 * 2**20          # bytes per write, read and checksum step
MAX_HEADER = 100_000_000    # the header length limit safetensors itself enforces
MAX_NDIM = 64               # numpy's own limit on dimensions
MAX_INDEX = 2**62           # bound on any stride or offset read from a file
# Bound on the JSON values (numbers, strings, lists, objects) of a header,
# and of its description, counted on the raw bytes before parsing: parsing
# then takes at most about 100 bytes of memory per value.
MAX_JSON_VALUES = 4_000_000
ZERO_CRC = "00000000"
# Compressed blocks (``_compression.py``): the codecs a block may name, the raw
# chunk sizes a file may declare, and the most raw bytes a stored byte may
# claim: no zstd frame expands more (an RLE block, 4 bytes, gives at most
# 128 KiB), so a small file cannot make a load allocate more than this times
# its size.
CODECS: frozenset[str] = frozenset({"zstd"})
MIN_CHUNK = 64
MAX_CHUNK = 64 * 2**20
MAX_RATIO = 32768       # the header checksum's value while it is computed
# numpy refuses a shape whose nonzero dimensions times the itemsize exceed
# this, even when another dimension is 0.
MAX_NBYTES = int(np.iinfo(np.intp).max)

# numpy dtype.str of every dtype an array may have: bool, integer, float and
# complex, either byte order. Object, structured and string dtypes never are.
ALLOWED_DTYPES: frozenset[str] = frozenset(
    [f"{order}{code}" for order in "<>" for code in
     ("i2", "i4", "i8", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16")]
    + ["|b1", "|i1", "|u1"])

# numpy dtype.str -> safetensors dtype name (little-endian only).
ST_DTYPES = {"|b1": "BOOL", "|u1": "U8", "|i1": "I8", "<u2": "U16", "<i2": "I16",
             "<u4": "U32", "<i4": "I32", "<u8": "U64", "<i8": "I64",
             "<f2": "F16", "<f4": "F32", "<f8": "F64", "<c8": "C64"}
# safetensors dtype name -> itemsize, for every name a tensor entry may carry.
ST_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "BF16": 2, "F16": 2,
               "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "C64": 8,
               "F8_E4M3": 1, "F8_E5M2": 1}

# torch dtypes numpy cannot hold: stored through a numpy view of equal size.
TORCH_VIA = {"bfloat16": "int16"}
TORCH_DTYPES: frozenset[str] = frozenset({
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128"})


def torch_numpy_dtype(torch_dtype: str) -> np.dtype:
    """The numpy dtype a tensor of ``torch_dtype`` is stored as."""
    return np.dtype(TORCH_VIA.get(torch_dtype, torch_dtype))


def torch_alignment(torch_dtype: str) -> int:
    """The address alignment torch's kernels assume for ``torch_dtype``: its element size.

    numpy's own requirement can be smaller (8 for complex128, whose torch
    kernels load 16 bytes at a time), so a tensor is only made to view bytes
    at an address that is a multiple of this.
    """
    return torch_numpy_dtype(torch_dtype).itemsize


# ---------------------------------------- crc
#
# The CRC-32 of a block after some of its bytes changed, without reading the rest.
#
# zlib's CRC-32 is affine over GF(2): for two messages of one length,
# ``crc(a) ^ crc(b)`` depends only on ``a ^ b``, and a difference confined to
# bytes ``[s, e)`` of an ``n``-byte block contributes
# ``(crc(old[s:e]) ^ crc(new[s:e]))`` advanced through ``n - e`` zero bytes.
# Advancing a CRC register through ``k`` zero bytes is a linear map; the maps
# for ``k = 2**j`` are kept as byte tables, so advancing many ranges at once is
# a few table look-ups per set bit of ``k``, vectorised over the ranges.
#
# updated_crc   a block's new CRC-32 from its old one and the changed ranges
# crc_concat    the CRC-32 of pieces put end to end, from the pieces' CRC-32s

_POLY = 0xEDB88320
_BITS = 48  # blocks up to 2**48 bytes


def _apply(tables: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Apply the linear map whose byte tables are ``tables`` (4 x 256) to ``values``."""
    mapped: np.ndarray = (tables[0][values & 0xFF] ^ tables[1][(values >> 8) & 0xFF]
                          ^ tables[2][(values >> 16) & 0xFF] ^ tables[3][values >> 24])
    return mapped


def _tables_from_columns(columns: np.ndarray) -> np.ndarray:
    """Byte tables of the linear map taking bit ``b`` to ``columns[b]``."""
    tables = np.zeros((4, 256), np.uint32)
    byte = np.arange(256, dtype=np.uint32)
    for part in range(4):
        for bit in range(8):
            tables[part][((byte >> bit) & 1) == 1] ^= columns[8 * part + bit]
    return tables


@cache
def _zero_tables() -> np.ndarray:
    """``[j]``: byte tables advancing a register through ``2**j`` zero bytes."""
    columns = np.zeros(32, np.uint32)
    for bit in range(32):
        reg = 1 << bit
        for _ in range(8):  # one zero byte: eight shifts of the reflected register
            reg = (reg >> 1) ^ (_POLY if reg & 1 else 0)
        columns[bit] = reg
    out = np.zeros((_BITS, 4, 256), np.uint32)
    out[0] = _tables_from_columns(columns)
    for j in range(1, _BITS):
        columns = _apply(out[j - 1], columns)  # twice the previous distance
        out[j] = _tables_from_columns(columns)
    return out


def updated_crc(old_crc: int, nbytes: int, changes: Iterable[tuple[int, int]]) -> int:
    """The CRC-32 of an ``nbytes`` block whose CRC was ``old_crc``, after ``changes``.

    Each change is ``(end, delta)``: bytes ending at offset ``end`` of the
    block changed, and ``delta = crc32(old bytes) ^ crc32(new bytes)`` over
    exactly those bytes. Changes must not overlap.
    """
    ends, deltas = [], []
    for end, delta in changes:
        ends.append(end)
        deltas.append(delta)
    if not ends:
        return old_crc
    values = np.array(deltas, np.uint32)
    distance = nbytes - np.array(ends, np.int64)
    if distance.min() < 0 or distance.max() >= 1 << _BITS:
        raise ValueError("a change ends outside the block")
    tables = _zero_tables()
    for j in range(int(distance.max()).bit_length()):
        move = ((distance >> j) & 1) == 1
        if move.any():
            values[move] = _apply(tables[j], values[move])
    return int(old_crc ^ int(np.bitwise_xor.reduce(values)))


@cache
def _advance_table(nbytes: int) -> tuple[list[int], ...]:
    """Byte tables (as lists) advancing a register through ``nbytes`` zero bytes."""
    columns = np.array([1 << bit for bit in range(32)], np.uint32)
    tables = _zero_tables()
    for j in range(nbytes.bit_length()):
        if (nbytes >> j) & 1:
            columns = _apply(tables[j], columns)
    return tuple(t.tolist() for t in _tables_from_columns(columns))


def crc_concat(crcs: list[int], piece: int, last: int) -> int:
    """The CRC-32 of ``len(crcs)`` pieces put end to end, from their CRC-32s.

    Every piece has ``piece`` bytes except the last, which has ``last``
    (``crc(a + b) = advance(crc(a), len(b)) ^ crc(b)``, as zlib's
    ``crc32_combine``).
    """
    if not crcs:
        return 0
    if len(crcs) == 1:
        return crcs[0]
    if not 0 < piece < 1 << _BITS or not 0 < last <= piece:
        raise ValueError("piece sizes out of range")
    t0, t1, t2, t3 = _advance_table(piece)
    value = crcs[0]
    for crc in crcs[1:-1]:
        value = (t0[value & 0xFF] ^ t1[(value >> 8) & 0xFF] ^ t2[(value >> 16) & 0xFF]
                 ^ t3[value >> 24] ^ crc)
    t0, t1, t2, t3 = _advance_table(last)
    return (t0[value & 0xFF] ^ t1[(value >> 8) & 0xFF] ^ t2[(value >> 16) & 0xFF]
            ^ t3[value >> 24] ^ crcs[-1])


# ---------------------------------------- jsontext
#
# JSON text from a file, parsed with its memory bounded before parsing.
#
# ``json.loads`` spends tens of bytes per value (an empty list ``[]`` costs
# about 60), so a header of 90 MiB of ``[],`` would take gigabytes. The
# number of values is bounded first, by counting bytes, at C speed.
#
# parse_bounded   parse JSON text of at most MAX_JSON_VALUES values

def _reject_constant(text: str) -> NoReturn:
    raise ValueError(f"non-standard JSON constant {text}")


def parse_bounded(name: str, text: Any, what: str) -> Any:
    """Parse JSON ``text`` (str or bytes) of file ``name`` after bounding its values.

    Every value but the first follows a ``,``, a ``:`` or an opening bracket,
    so counting those characters (string contents included, which only
    overestimates) bounds the values before ``json`` builds any of them.
    Nesting is bounded by the parser itself (``RecursionError``).

    Raises:
        FormatError: more than MAX_JSON_VALUES values.
        ValueError, TypeError, RecursionError: not JSON text (the caller
            reports these in its own words).
    """
    if isinstance(text, bytes):
        values = 1 + sum(text.count(m) for m in (b",", b":", b"[", b"{"))
    elif isinstance(text, str):
        values = 1 + sum(text.count(m) for m in (",", ":", "[", "{"))
    else:
        raise TypeError(f"expected JSON text, got {type(text).__name__}")
    if values > MAX_JSON_VALUES:
        raise FormatError(printable(
            f"{name!r}: {what} holds up to {values:,} JSON values, more than the limit "
            f"of {MAX_JSON_VALUES:,} (a hostile or corrupt header?)"))
    return json.loads(text, parse_constant=_reject_constant)


# ---------------------------------------- metadata
#
# The caller's metadata: plain strings in the header, readable without loading anything.
#
# A checkpoint may carry a few ``str -> str`` pairs (``save(..., metadata=)``),
# stored as data in the header. They say what a file is (``{"kind":
# "namedschema.rlpyt.resume", "version": "1"}``) before any of it is loaded, so
# a reader can refuse a file of the wrong kind before it unpickles anything
# (``load(..., expect_metadata=)``, ``inspect(path).metadata``).
#
# MAX_METADATA            pairs a file may hold
# metadata_problem        what is wrong with a metadata value, or None
# check_metadata_argument ``save``'s argument as a dict, or TypeError/ValueError

MAX_METADATA = 64
MAX_KEY = 200
MAX_VALUE = 10_000
_RULE = (f"at most {MAX_METADATA} pairs of strings, keys up to {MAX_KEY} characters, "
         f"values up to {MAX_VALUE:,}")


def metadata_problem(raw: Any) -> str | None:
    """Why ``raw`` is not valid metadata (as stored in a file), or None."""
    if not isinstance(raw, dict):
        return f"must be an object of strings, not {type(raw).__name__}"
    if len(raw) > MAX_METADATA or not all(
            type(k) is str and type(v) is str and len(k) <= MAX_KEY and len(v) <= MAX_VALUE
            for k, v in raw.items()):
        return f"must hold {_RULE}"
    return None


def check_metadata_argument(metadata: Any, where: str = "save") -> dict[str, str]:
    """``metadata`` (None or a mapping) as a dict, or a TypeError/ValueError saying why not."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(
            type(k) is str and type(v) is str for k, v in metadata.items()):
        raise TypeError(f"{where}: metadata must be a mapping of str to str (plain strings "
                        "that anyone can read without loading the file)")
    problem = metadata_problem(dict(metadata))
    if problem:
        raise ValueError(f"{where}: metadata {problem}")
    return dict(metadata)


# ---------------------------------------- sniff
#
# What a file that is not a checkpoint looks like, for the message that refuses it.
#
# ``load("weights.pt")`` should say "a zip archive (torch.save)", not "header
# length 4824827008 is implausible". Only the first bytes are read; nothing in
# them is parsed or run.
#
# looks_like   "; it looks like a Python pickle (protocol 4): ..." or ""

_SIGNATURES = (
    (b"\x93NUMPY", "a NumPy .npy file: read it with numpy.load"),
    (b"PK\x03\x04", "a zip archive, as torch.save and numpy.savez write: read it with "
                    "torch.load or numpy.load"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file: read it with h5py"),
    (b"\x1f\x8b", "a gzip-compressed file"),
    (b"BZh", "a bzip2-compressed file"),
    (b"\xfd7zXZ\x00", "an xz-compressed file"),
)


def _kind(head: bytes) -> str | None:
    if not head:
        return "an empty file"
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return (f"a Python pickle (protocol {head[1]}): unpickling runs code chosen by its "
                "writer; use pickle.load only if you trust it")
    for magic, what in _SIGNATURES:
        if head.startswith(magic):
            return what
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text and all(c.isprintable() or c in "\t\r\n" for c in text):
        return f"a text file (it starts with {text[:40]!r})"
    return None


def looks_like(f: BinaryIO) -> str:
    """``"; it looks like ..."`` for the file ``f`` (from its first bytes), or ``""``."""
    try:
        f.seek(0, os.SEEK_SET)
        head = f.read(64)
    except (OSError, ValueError):
        return ""
    kind = _kind(head)
    return "" if kind is None else f"; it looks like {kind}"


# ---------------------------------------- chunktable
#
# The chunk table of a compressed block: the record, and every check of one read from a file.
#
# Part of the trust boundary: ``_header.read_header`` hands each block entry that
# names a codec to :meth:`ChunkTable.from_json`, which bounds everything before
# work proportional to it: the chunk count against the raw size (and the stored
# bytes, one at least per chunk), each chunk's stored size against its raw size
# and against the most zstd can expand (``MAX_RATIO``), and the stored sizes'
# sum against the block's tensor, which lies inside the file. A table that
# passes cannot make a load allocate more than ``MAX_RATIO`` times the file's
# size, nor read outside its tensor.
#
# A table may also place its chunks (``offsets``, written by incremental compressed
# saves): each chunk's position in the tensor, which then also holds free space;
# placed chunks must lie inside the tensor and not overlap. It may list each chunk's
# raw CRC-32 (``raw_crc32``, written by incremental compressed saves): one per chunk,
# eight lower-case hex digits each.
#
# ChunkTable    codec, raw bytes per chunk, ``(stored size, CRC-32)`` per chunk
# first_fields  the first field of each block, named in messages about blocks

_CRC_TEXT = re.compile(r"[0-9a-f]{8}", re.ASCII)


@dataclass(frozen=True)
class ChunkTable:
    """How a compressed block is stored: chunks of ``chunk`` raw bytes (the last may be
    shorter), each ``(stored size, CRC-32 of the stored bytes)``; a chunk stored at its
    raw size is raw, a smaller one is one frame of ``codec``. Chunks follow each other
    in the tensor, or, with ``offsets``, each lies at its offset in it."""

    codec: str
    chunk: int
    chunks: tuple[tuple[int, int], ...]
    stored: int                         # the block's bytes in the file: its tensor's size
    offsets: tuple[int, ...] | None = None   # each chunk's place in the tensor, if placed
    raw_crcs: tuple[int, ...] | None = None  # each chunk's raw CRC-32, if listed

    def raw_size(self, k: int, nbytes: int) -> int:
        """Raw bytes of chunk ``k`` of a block of ``nbytes``."""
        return min(self.chunk, nbytes - k * self.chunk)

    def starts(self) -> list[int]:
        """Where each chunk's stored bytes start in the block's tensor."""
        if self.offsets is not None:
            return list(self.offsets)
        out, at = [], 0
        for size, _crc in self.chunks:
            out.append(at)
            at += size
        return out

    @property
    def live(self) -> int:
        """Bytes of the chunks themselves (``stored`` less any free space)."""
        return sum(size for size, _crc in self.chunks)

    def to_json(self) -> dict[str, Any]:
        """The table as the header's JSON fields."""
        out: dict[str, Any] = {"codec": self.codec, "chunk": self.chunk,
                               "chunks": [[size, f"{crc:08x}"] for size, crc in self.chunks]}
        if self.offsets is not None:
            out["offsets"] = list(self.offsets)
        if self.raw_crcs is not None:
            out["raw_crc32"] = [f"{crc:08x}" for crc in self.raw_crcs]
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any], nbytes: int, declared: str, stored_total: int) -> ChunkTable:
        """The table of a block entry ``raw`` of ``nbytes`` raw bytes whose tensor is
        declared ``declared`` and holds ``stored_total`` bytes; ValueError saying what
        is wrong."""
        codec = raw["codec"]
        if not isinstance(codec, str) or codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r:.40} (this version of namedschema "
                             f"reads {sorted(CODECS)})")
        if declared != "U8":
            raise ValueError(f"a compressed block must be declared U8, not {declared}")
        chunk = raw.get("chunk")
        if type(chunk) is not int or not MIN_CHUNK <= chunk <= MAX_CHUNK:
            raise ValueError(f"chunk size {chunk!r:.40} is not an integer from {MIN_CHUNK} "
                             f"to {MAX_CHUNK}")
        if nbytes < 1:
            raise ValueError(f"a compressed block of {nbytes} bytes")
        entries: Any = raw.get("chunks")
        count = -(-nbytes // chunk)
        if not isinstance(entries, list) or len(entries) != count:
            got = len(entries) if isinstance(entries, list) else type(entries).__name__
            raise ValueError(f"the chunk table has {got} entries; {nbytes} bytes in chunks "
                             f"of {chunk} need {count}")
        if count > stored_total:    # every chunk takes at least one byte of the file
            raise ValueError(f"{count} chunks cannot fit in {stored_total} stored bytes")
        chunks = []
        total = 0
        for k, entry in enumerate(entries):
            if (not isinstance(entry, list) or len(entry) != 2 or type(entry[0]) is not int
                    or not isinstance(entry[1], str) or not _CRC_TEXT.fullmatch(entry[1])):
                raise ValueError(f"chunk {k} is not [stored size, 8 hex digits]: "
                                 f"{entry!r:.60}")
            size = entry[0]
            raw_len = min(chunk, nbytes - k * chunk)
            if not 1 <= size <= raw_len:
                raise ValueError(f"chunk {k} claims {size} stored bytes for {raw_len} raw "
                                 "bytes (at least 1, at most its raw size)")
            if raw_len > size * MAX_RATIO:
                raise ValueError(f"chunk {k} claims {raw_len} raw bytes from {size} stored "
                                 f"bytes, more than zstd can expand (x{MAX_RATIO})")
            total += size
            if total > stored_total:
                raise ValueError(f"its chunks hold more stored bytes than its tensor "
                                 f"({stored_total})")
            chunks.append((size, int(entry[1], 16)))
        raw_crcs = _raw_crcs(raw.get("raw_crc32"), count)
        placed = raw.get("offsets")
        if placed is None:
            if total != stored_total:
                raise ValueError(f"its chunks hold {total} stored bytes, its tensor "
                                 f"{stored_total}")
            return cls(codec, chunk, tuple(chunks), total, None, raw_crcs)
        return cls(codec, chunk, tuple(chunks), stored_total,
                   _offsets(placed, chunks, stored_total), raw_crcs)


def _raw_crcs(listed: Any, count: int) -> tuple[int, ...] | None:
    """The ``raw_crc32`` of a table checked: absent, or one CRC text per chunk."""
    if listed is None:
        return None
    if not isinstance(listed, list) or len(listed) != count:
        got = len(listed) if isinstance(listed, list) else type(listed).__name__
        raise ValueError(f"the chunk table has {got} raw checksums for {count} chunks")
    for k, text in enumerate(listed):
        if not isinstance(text, str) or not _CRC_TEXT.fullmatch(text):
            raise ValueError(f"chunk {k}'s raw checksum is not 8 hex digits: {text!r:.40}")
    return tuple(int(text, 16) for text in listed)


def _offsets(placed: Any, chunks: list[tuple[int, int]], stored_total: int) -> tuple[int, ...]:
    """The ``offsets`` of a table checked: one per chunk, inside the tensor, no overlaps."""
    if not isinstance(placed, list) or len(placed) != len(chunks):
        got = len(placed) if isinstance(placed, list) else type(placed).__name__
        raise ValueError(f"the chunk table has {got} offsets for {len(chunks)} chunks")
    for k, at in enumerate(placed):
        if type(at) is not int or not 0 <= at <= stored_total - chunks[k][0]:
            raise ValueError(f"chunk {k} is placed at {at!r:.40}, outside its tensor of "
                             f"{stored_total} bytes")
    order = sorted(range(len(placed)), key=placed.__getitem__)
    for a, b in zip(order, order[1:], strict=False):
        if placed[a] + chunks[a][0] > placed[b]:
            raise ValueError(f"chunks {a} and {b} overlap in the file")
    return tuple(placed)


def first_fields(raw_arrays: list[Any]) -> dict[int, str]:
    """``{block: "field '<path>'"}`` for the first array of each block, for messages
    about blocks (read before the arrays are checked: the paths are only quoted)."""
    out: dict[int, str] = {}
    for entry in raw_arrays:
        if (isinstance(entry, dict) and type(entry.get("block")) is int
                and isinstance(entry.get("path"), str)):
            out.setdefault(entry["block"], f"field {entry['path']!r}")
    return out


# ---------------------------------------- header
#
# The header as typed records, and the trust boundary: every check of header data.
#
# A header read from a file is untrusted. ``read_header`` is the only code that
# looks at its JSON: it bounds every length, count and nesting before work
# proportional to it, checks every field's type and range, and returns frozen
# records whose fields are named. Everything after it (blocks, arrays, nodes,
# inspect) reads those records, never the JSON, and may rely on:
#
# * every tensor entry has a known dtype, and its offsets match its shape;
#   the tensors tile the data section without holes or overlaps, and the data
#   section ends where the file ends;
# * every block names a distinct tensor and lies inside the file;
# * every array has an allowed dtype, a shape numpy can make, and touches only
#   bytes inside its block (an empty array has no block);
# * every schema entry has a str kind, id and typename and a list of str fields;
# * the pickle entry, if any, names an existing block.
#
# The structure itself is a tree of nodes checked node by node by the node table
# (``_graph.py``), where each node kind is defined once.
#
# Writing builds the same records (``Header.encode``), so the two sides cannot
# disagree on a field's name or form.

_CRC_MARKER = b'"header_crc32":"'
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

    def with_crcs(self, crcs: Iterable[int]) -> Header:
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


def _parse_description(name: str, meta: dict[str, Any]) -> dict[str, Any]:
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
