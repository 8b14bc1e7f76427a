"""The checkpoint package's structure: one spec, one node table, typed header records."""

from __future__ import annotations

import json
import os
import re
import struct
import warnings
import zlib

import numpy as np
import pytest

import namedschema
from namedschema import checkpoint
from namedschema.checkpoint import _graph as nodes
from namedschema.checkpoint import _header as header
from namedschema.checkpoint import _storage as layout
from namedschema.errors import FormatError

PACKAGE_DIR = os.path.dirname(checkpoint.__file__)


def _words(text):
    return " ".join(text.split())


def test_spec_lists_every_node_kind_exactly_as_the_table_does():
    """The package documentation (the spec) holds each node kind's line from nodes.KINDS."""
    doc = _words(checkpoint.__doc__)
    for kind in nodes.KINDS:
        assert _words(kind.spec) in doc, kind.spec
    # and the table knows every node key the spec mentions
    keys = {key for kind in nodes.KINDS for key in kind.keys}
    assert keys == {"float", "list", "tuple", "dict", "array", "scalar", "schema", "nt",
                    "values", "numpy"}


def test_every_module_of_the_package_is_short():
    """No module of the checkpoint package is over 1,500 lines (issue 29's limit; see
    tests/meta/test_module_size.py)."""
    for name in os.listdir(PACKAGE_DIR):
        if name.endswith(".py"):
            with open(os.path.join(PACKAGE_DIR, name)) as f:
                assert sum(1 for _ in f) <= 1500, name


def test_one_module_writes_whole_checkpoint_files():
    """Only ``writer`` writes blocks into a new file: saver, incremental and squeezed
    hand it a layout (squeezed only updates the placed compressed file in place)."""
    writers = set()
    for name in os.listdir(PACKAGE_DIR):
        if name.endswith(".py") and name != "_storage.py":
            with open(os.path.join(PACKAGE_DIR, name)) as f:
                text = f.read()
            if re.search(r"AtomicFile\(|(?<!def )\bwrite_blocks?\(", text):
                writers.add(name)
    assert writers == {"_write.py"}


@pytest.mark.parametrize("record", [
    header.ArrayEntry(0, 8, (3, 2), (16, 8), "<f8", "a.b"),
    header.ArrayEntry(None, 0, (0, 5), (40, 8), "|u1", "empty"),
    header.ArrayEntry(1, 0, (4,), (2,), "<i2", "t", "bfloat16", True),
    header.SchemaEntry("NamedTupleSchema", "P", ("x", "y"), "abc", (1.5, None), "m"),
])
def test_records_round_trip_through_json(record):
    """to_json then from_json gives the record back (with the tables it refers to)."""
    blocks = (header.BlockEntry("t0", 0, 64, 0), header.BlockEntry("t1", 64, 64, 0))
    raw = json.loads(json.dumps(record.to_json()))
    if isinstance(record, header.ArrayEntry):
        back = header.ArrayEntry.from_json("f", 0, raw, blocks)
    else:
        back = header.SchemaEntry.from_json("f", 0, raw)
    assert back == record


def test_block_and_tensor_records_round_trip():
    """Tensor table entries and block entries read back as written, padding included."""
    table = layout.tensor_table([("a", "F64", (3,), 24), ("b", "U8", (100,), 100)])
    assert list(table) == ["a", "__pad__.0", "b", "__pad__.1"]
    assert table["b"].start == 64 and table["__pad__.1"].end == 192
    back = {n: header.TensorEntry.from_json("f", n, json.loads(json.dumps(t.to_json())))
            for n, t in table.items()}
    assert back == table
    block = header.BlockEntry("b", 64, 100, 0xDEADBEEF)
    assert header.BlockEntry.from_json("f", 0, block.to_json(), table, set()) == block


def _file_with_structure(tmp_path, structure):
    """A valid checkpoint of two arrays and one schema whose structure is ``structure``."""
    P = namedschema.NamedTupleSchema("P", "x y")
    path = tmp_path / "base.nsb"
    namedschema.save([P(np.arange(3.0), np.float32(2)), np.ones(2)], path)
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    doc = json.loads(data[8:8 + n])
    desc = json.loads(doc["__metadata__"]["namedschema"])
    desc["structure"] = structure
    doc["__metadata__"]["namedschema"] = json.dumps(desc)
    doc["__metadata__"]["header_crc32"] = "00000000"
    raw = json.dumps(doc, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % 64)
    raw = raw.replace(b'"header_crc32":"00000000"',
                      b'"header_crc32":"%08x"' % zlib.crc32(raw), 1)
    out = tmp_path / "edited.nsb"
    out.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("structure, valid", [
    ({"list": [{"nt": 0, "values": [{"array": 0}, {"scalar": 1}]}, {"array": 2}]}, True),
    ({"tuple": [{"schema": 0}, {"float": "nan"}, None, "s", 3, {"dict": [["k", 1]]}]}, True),
    ({"float": "NaN"}, False),
    ({"list": 3}, False),
    ({"list": [], "tuple": []}, False),
    ({"array": 3}, False),
    ({"array": True}, False),
    ({"scalar": -1}, False),
    ({"schema": 1}, False),
    ({"nt": 0, "values": [1]}, False),          # P has two fields
    ({"nt": 0, "values": [1, 2], "x": 1}, False),
    ({"values": [1, 2]}, False),
    ({"dict": [["k"]]}, False),
    ({"dict": [[1, 2]]}, False),
    ({"eval": "x"}, False),
])
def test_load_and_inspect_accept_exactly_the_same_nodes(tmp_path, structure, valid):
    """One node table: load and inspect both accept a node, or both refuse it."""
    path = _file_with_structure(tmp_path, structure)
    if valid:
        namedschema.load(path)
        assert namedschema.inspect(path).tree
    else:
        with pytest.raises(FormatError, match="structure"):
            namedschema.load(path)
        with pytest.raises(FormatError, match="structure"):
            namedschema.inspect(path)


def test_inspect_tree_shows_every_node_kind(tmp_path):
    """inspect's tree has one line per node, for every kind."""
    P = namedschema.NamedTupleSchema("P", "x y")
    path = tmp_path / "all.nsb"
    namedschema.save({"p": P(np.arange(3.0), np.float32(2)), "cls": P,
                      "v": (float("inf"), None, [1])}, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tree = namedschema.inspect(path).tree
    assert tree.splitlines() == [
        "dict of 3",
        "  'p': P (NamedTupleSchema)",
        "    x: float64 (3,) 24 B",
        "    y: float32 scalar",
        "  'cls': class P (NamedTupleSchema)",
        "  'v': tuple of 3",
        "    [0]: inf",
        "    [1]: null",
        "    [2]: list of 1",
        "      [0]: 1",
    ]
