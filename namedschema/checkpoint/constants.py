"""The format's fixed values: its name and version, alignment, limits and dtype tables.

Everything a header may name (dtypes, torch dtypes, safetensors dtypes) is a
member of a table here, built from literals rather than from file text, so a
header can only ever select one of these.
"""

from __future__ import annotations

import numpy as np

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
# Compressed blocks (``compression.py``): the codecs a block may name, the raw
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
