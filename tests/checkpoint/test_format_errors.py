"""Error tests for namedschema.load / inspect: damaged, hostile and foreign files."""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest

import namedschema
from namedschema import NamedArrayTupleSchema
from namedschema.errors import FormatError, UnsafeLoadError


@pytest.fixture
def saved(tmp_path):
    """A small valid checkpoint with a schema, a view and a scalar; returns its path."""
    path = str(tmp_path / "run.nsb")
    T = NamedArrayTupleSchema("Traj", "obs reward")
    obs = np.arange(64 * 10, dtype=np.uint8).reshape(10, 64)
    namedschema.save({"traj": T(obs, np.arange(10.0)), "last": obs[-1], "k": 3}, path)
    return path


def split(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


class Buffer:
    """A plain object that is not data (needs pickle)."""


def rewrite(path, edit, *, fix_crc=True):
    """Apply ``edit(header)`` (metadata description decoded) and write the file back."""
    header, data = split(path)
    meta = header["__metadata__"]
    desc = json.loads(meta["namedschema"])
    edit(header, desc)
    meta["namedschema"] = json.dumps(desc, separators=(",", ":"))
    meta["header_crc32"] = "00000000"
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % 64)
    if fix_crc:
        crc = f"{zlib.crc32(raw):08x}".encode()
        raw = raw.replace(b'"header_crc32":"00000000"', b'"header_crc32":"' + crc + b'"')
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


def test_truncation_at_every_offset_is_a_format_error(saved):
    """Cutting the file at any length raises FormatError, never a crash or garbage."""
    data = open(saved, "rb").read()
    cut = saved + ".cut"
    for length in list(range(0, 80)) + list(range(80, len(data), 37)) + [len(data) - 1]:
        with open(cut, "wb") as f:
            f.write(data[:length])
        for mode in (None, "r"):
            with pytest.raises(FormatError):
                namedschema.load(cut, mmap_mode=mode)


def test_truncated_field_is_named(saved):
    """A file cut inside a block names the field and the missing byte count."""
    data = open(saved, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    with open(saved, "wb") as f:
        f.write(data[:8 + n + 100])
    with pytest.raises(FormatError, match=r"field 'traj.obs' is truncated: expected 640 "
                                          r"bytes, found 100 \(incomplete write\?\)"):
        namedschema.load(saved)


def test_flipped_header_bytes_always_detected(saved):
    """Flipping any single byte of the header raises FormatError (header checksum)."""
    data = bytearray(open(saved, "rb").read())
    (n,) = struct.unpack("<Q", data[:8])
    for pos in range(0, 8 + n, 7):
        damaged = bytearray(data)
        damaged[pos] ^= 0x20
        with open(saved, "wb") as f:
            f.write(damaged)
        with pytest.raises(FormatError):
            namedschema.inspect(saved)


def test_flipped_data_byte_caught_by_verify(saved):
    """A flipped data byte is reported by verify=True, naming the field, in both modes."""
    data = bytearray(open(saved, "rb").read())
    (n,) = struct.unpack("<Q", data[:8])
    data[8 + n + 5] ^= 0xFF
    with open(saved, "wb") as f:
        f.write(data)
    for mode in (None, "r"):
        with pytest.raises(FormatError, match=r"field 'traj.obs' is corrupt: checksum"):
            namedschema.load(saved, verify=True, mmap_mode=mode)


def test_foreign_safetensors_file_rejected(tmp_path):
    """A valid safetensors file written by safetensors itself is refused with a clear message."""
    from safetensors.numpy import save_file

    path = str(tmp_path / "model.safetensors")
    save_file({"w": np.ones((2, 2), np.float32)}, path)
    with pytest.raises(FormatError, match="is not a namedschema file: it has no namedschema"):
        namedschema.load(path)


@pytest.mark.parametrize("content", [b"", b"abc", b"\x00" * 8, b"PK\x03\x04" + b"\x00" * 60,
                                     struct.pack("<Q", 2) + b"[]", struct.pack("<Q", 4) + b"{\xff}x"])
def test_not_a_namedschema_file(tmp_path, content):
    """Empty, tiny, zip-like and non-JSON files raise FormatError (a ValueError)."""
    path = tmp_path / "x"
    path.write_bytes(content)
    with pytest.raises(FormatError) as info:
        namedschema.load(str(path))
    assert isinstance(info.value, ValueError) and "'" + str(path) + "'" in str(info.value)


def test_future_major_version_refused(saved):
    """A file of format 3.0 names its version and what this reader reads."""
    rewrite(saved, lambda h, d: h["__metadata__"].update(format_version="3.0"))
    with pytest.raises(FormatError, match=r"is format 3\.0; this version of namedschema reads 1\.x"):
        namedschema.load(saved)


def test_newer_minor_version_accepted(saved):
    """A 1.x file with a higher minor and no unknown features still loads."""
    rewrite(saved, lambda h, d: h["__metadata__"].update(format_version="1.7"))
    assert namedschema.load(saved)["k"] == 3


def test_unknown_feature_refused(saved):
    """A file listing a feature this reader does not know (e.g. a delta) is refused."""
    rewrite(saved, lambda h, d: d.update(features=["delta"], parent="abc"))
    with pytest.raises(FormatError, match="features.*delta"):
        namedschema.load(saved)


def test_header_edit_without_checksum_detected(saved):
    """Rewriting the header without updating its checksum is detected."""
    rewrite(saved, lambda h, d: d["arrays"][0].update(shape=[5, 64]), fix_crc=False)
    with pytest.raises(FormatError, match="checksum"):
        namedschema.load(saved)


@pytest.mark.parametrize("dtype", ["|O", "<V8", "|S4", "<U2", "<M8[ns]", "object", "float64", 7])
def test_disallowed_dtypes_refused(saved, dtype):
    """Object, void, string, datetime and unknown dtype strings are refused before any allocation."""
    rewrite(saved, lambda h, d: d["arrays"][0].update(dtype=dtype))
    with pytest.raises(FormatError, match="is not allowed"):
        namedschema.load(saved)


@pytest.mark.parametrize("change", [
    {"shape": [11, 64]}, {"offset": 1}, {"strides": [64, 2]}, {"strides": [-64, 1]},
    {"block": 9}, {"shape": [-1, 64]}, {"shape": [10]}, {"offset": -5}, {"shape": [10, 2**62]},
])
def test_arrays_reaching_outside_their_block_refused(saved, change):
    """Shapes, strides, offsets or blocks that lie about sizes are refused."""
    rewrite(saved, lambda h, d: d["arrays"][0].update(change))
    with pytest.raises(FormatError):
        namedschema.load(saved, mmap_mode="r")


def test_tensor_table_lies_refused(saved):
    """A safetensors entry whose offsets disagree with its shape or with the file is refused."""
    def grow(h, d):
        h["traj.obs"]["shape"] = [20, 64]
    rewrite(saved, grow)
    with pytest.raises(FormatError, match="do not match shape"):
        namedschema.load(saved)


def test_block_size_lie_refused(saved):
    """A block whose nbytes disagrees with its tensor is refused."""
    rewrite(saved, lambda h, d: d["blocks"][0].update(nbytes=10**12))
    with pytest.raises(FormatError, match="nbytes"):
        namedschema.load(saved)


def test_appended_bytes_refused(saved):
    """Extra bytes after the last block are reported."""
    with open(saved, "ab") as f:
        f.write(b"junk")
    with pytest.raises(FormatError, match="after the last block"):
        namedschema.load(saved)


def test_bad_structure_nodes_refused(saved):
    """Structure nodes that are unknown or point at missing arrays or schemas are refused."""
    for structure in [{"eval": "x"}, {"array": 99}, {"nt": 5, "values": []},
                      {"nt": 0, "values": [1]}, {"dict": [[1, 2]]}]:
        rewrite(saved, lambda h, d, structure=structure: d.update(structure=structure))
        with pytest.raises(FormatError, match="structure"):
            namedschema.load(saved)


def test_bad_schema_definition_refused(saved):
    """A schema entry with an invalid field name or unknown kind raises FormatError."""
    for change in [{"fields": ["ok", "not valid"]}, {"kind": "os.system"}, {"typename": 3}]:
        rewrite(saved, lambda h, d, change=change: d["schemas"][0].update(change))
        with pytest.raises(FormatError, match="schema 0 is invalid"):
            namedschema.load(saved)


def test_pickle_required_error_names_type(tmp_path):
    """A graph with a non-data object needs allow_pickle; the error names path and type."""
    path = str(tmp_path / "p.nsb")
    namedschema.save({"replay": [1, Buffer()]}, path, allow_pickle=True)
    with pytest.raises(UnsafeLoadError, match=r"replay\[1\].*Buffer.*runs code"):
        namedschema.load(path)
    with pytest.raises(UnsafeLoadError):
        namedschema.load(path, mmap_mode="r")


def test_invalid_mmap_mode(saved):
    """An unknown mmap_mode raises ValueError naming the allowed values."""
    with pytest.raises(ValueError, match="mmap_mode"):
        namedschema.load(saved, mmap_mode="w+")


@pytest.mark.parametrize("edit", [
    lambda h, d: d["arrays"][0].update(dtype=["<f8"]),
    lambda h, d: h[d["blocks"][0]["tensor"]].update(dtype=["U8"]),
    lambda h, d: d["blocks"][0].update(tensor=["x"]),
    lambda h, d: d["arrays"][0].update(torch=["float32"]),
    lambda h, d: d["arrays"][0].update(shape=[2**40, 2**40], strides=[0, 0]),
    lambda h, d: d["arrays"][0].update(shape=[0, 2**63], strides=[0, 0]),
    lambda h, d: d["arrays"][0].update(shape=[1, 1], strides=[2**70, 8]),
    lambda h, d: d.update(structure={"list": [{"nt": 0, "values": 0.5}]}),
    lambda h, d: d["schemas"][0].update(fields=5),
])
def test_wrongly_typed_header_values_raise_format_error(saved, edit):
    """Lists where strings belong, unrepresentable shapes and non-list values give FormatError in load and inspect."""
    rewrite(saved, edit)
    with pytest.raises(FormatError):
        namedschema.load(saved)
    with pytest.raises(FormatError):
        namedschema.inspect(saved)


@pytest.mark.parametrize("shape, dtype, ok", [
    ([0, 2**63 - 1], "|u1", True),       # numpy's limit exactly: it makes this array
    ([0, 2**61, 3], "|u1", True),
    ([0, 2**60], "<f8", False),          # nonzero dims times itemsize overflow
    ([2**31, 0, 2**31], "<f8", False),
    ([0, 2**63], "|u1", False),
])
def test_empty_arrays_checked_against_numpy_limits(saved, shape, dtype, ok):
    """An empty array loads if numpy can make it, else FormatError names the field."""
    def edit(header, desc):
        desc["arrays"].append({"block": None, "offset": 0, "shape": shape,
                               "strides": [1] * len(shape), "dtype": dtype, "path": "big"})
        desc["structure"]["dict"].append(["big", {"array": len(desc["arrays"]) - 1}])
    rewrite(saved, edit)
    if ok:
        big = namedschema.load(saved)["big"]
        assert big.shape == tuple(shape) and big.size == 0 and big.dtype == np.dtype(dtype)
        assert namedschema.inspect(saved).fields[-1].nbytes == 0
    else:
        with pytest.raises(FormatError, match=r"field 'big': shape .* too large for numpy"):
            namedschema.load(saved)
        with pytest.raises(FormatError, match="too large for numpy"):
            namedschema.inspect(saved)
