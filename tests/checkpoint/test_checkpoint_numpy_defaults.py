"""Schemas whose defaults are numpy values (declared dtypes) are data in a checkpoint."""

from __future__ import annotations

import json
import struct
import uuid

import numpy as np
import pytest

import namedschema
from namedschema import NamedArrayTupleSchema, NamedTupleSchema
from namedschema.errors import FormatError
from tests.helpers import run_fresh

DEFAULTS = (np.bool_(False), np.float32("nan"), np.float16(-np.inf), np.uint64(2**64 - 1),
            np.int8(-128), np.zeros((2, 3), ">i2") + 7, np.complex64(1 - 2j),
            np.array([0.1, 1e300]))


def _header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        raw = json.loads(f.read(n))
    return json.loads(raw["__metadata__"]["namedschema"])


def _same(a, b):
    return (type(a) is type(b) and np.asarray(a).dtype == np.asarray(b).dtype
            and np.asarray(a).shape == np.asarray(b).shape
            and np.array_equal(a, b, equal_nan=True))


@pytest.mark.parametrize("mode", [None, "r"])
def test_numpy_defaults_round_trip_without_pickle(tmp_path, mode):
    """Every numpy default comes back with its exact type, dtype, shape and value."""
    fields = [f"f{i}" for i in range(len(DEFAULTS))]
    S = NamedTupleSchema("S", ["x"] + fields, defaults=DEFAULTS)
    path = str(tmp_path / "s.nsb")
    namedschema.save([S(1), S], path)      # data path: no allow_pickle needed
    desc = _header(path)
    assert desc["pickle"] is None and desc["features"] == ["numpy-defaults"]
    back, cls = namedschema.load(path, mmap_mode=mode)
    assert cls is type(back) is S          # same process: the very class
    assert all(_same(a, b) for a, b in zip(back[1:], DEFAULTS, strict=True))


def test_files_without_numpy_defaults_list_no_feature(tmp_path):
    """Plain defaults keep the file exactly as format 1.0 wrote it: no features."""
    S = NamedTupleSchema("S", "x y", defaults=(0.5,))
    path = str(tmp_path / "s.nsb")
    namedschema.save(S(1), path)
    assert _header(path)["features"] == []


def test_numpy_defaults_load_in_a_fresh_interpreter(tmp_path):
    """A fresh interpreter rebuilds the schema with numpy defaults that declare dtypes."""
    Samples = NamedArrayTupleSchema("Samples", "obs reward done",
                                    defaults=(np.float32(0), np.bool_(False)))
    path = str(tmp_path / "s.nsb")
    namedschema.save(Samples(np.zeros((4, 2), np.uint8), np.ones(4, np.float32),
                             np.zeros(4, bool)), path)
    proc = run_fresh(f"""
        import json, namedschema
        from namedschema.evolution import field_dtype
        s = namedschema.load({path!r})
        cls = type(s)
        print(json.dumps([repr(cls._field_defaults["reward"]),
                          str(field_dtype(cls, "reward")[0]), repr(cls(1))]))
        """)
    reward, dtype, made = json.loads(proc.stdout)
    assert reward == "np.float32(0.0)" and dtype == "float32"
    assert made == "Samples(obs=1, reward=np.float32(0.0), done=np.False_)"


def test_upgraded_buffer_saves_as_data_and_loads_back(tmp_path):
    """After upgrade() into a schema with numpy defaults the next save needs no pickle."""
    Old = NamedArrayTupleSchema("Samples", "obs reward")
    Samples = NamedArrayTupleSchema("Samples", "obs reward timeout", defaults=(np.bool_(False),))
    state = namedschema.upgrade({"s": Old(np.zeros((4, 2)), np.zeros(4))}, [Samples])
    path = str(tmp_path / "again.nsb")
    namedschema.save(state, path)
    assert type(namedschema.load(path)["s"]) is Samples


def _save_with_node(tmp_path, node):
    """A checkpoint whose schema default is ``node`` (header rewritten, checksum fixed)."""
    import zlib

    S = NamedTupleSchema("S", "x y", defaults=("room for the node " * 3000,))
    path = tmp_path / "bad.nsb"
    namedschema.save(S(1), str(path))
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    desc = json.loads(header["__metadata__"]["namedschema"])
    desc["schemas"][0]["defaults"] = [node]
    desc["schemas"][0]["id"] = uuid.uuid4().hex   # not the live class: built from the file
    header["__metadata__"]["namedschema"] = json.dumps(desc, separators=(",", ":"))
    header["__metadata__"]["header_crc32"] = "00000000"
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n
    text = text + b" " * (n - len(text))
    crc = f"{zlib.crc32(text):08x}".encode()
    text = text.replace(b'"header_crc32":"00000000"', b'"header_crc32":"' + crc + b'"', 1)
    path.write_bytes(raw[:8] + text + raw[8 + n:])
    return str(path)


@pytest.mark.parametrize("node, why", [
    ({"numpy": ["|O", [], [1]]}, "dtype that is not allowed"),
    ({"numpy": ["<U8", [], ["x"]]}, "dtype that is not allowed"),
    ({"numpy": ["|i1", [], [128]]}, "not a int8"),
    ({"numpy": ["|b1", [], [1]]}, "not a bool"),
    ({"numpy": ["<f4", [], ["NaN!"]]}, "not a float32"),
    ({"numpy": ["<c8", [], [1.0]]}, "not a complex64"),
    ({"numpy": ["<f8", [5000], [0.0] * 5000]}, "invalid shape"),
    ({"numpy": ["<f8", [2**40, 0], []]}, "invalid shape"),
    ({"numpy": ["<f8", [2], [1.0]]}, "do not match its shape"),
    ({"numpy": ["<f8", [], [1.0], 4]}, "malformed numpy node"),
    ({"numpy": "<f8"}, "malformed numpy node"),
])
def test_hostile_numpy_nodes_are_refused(tmp_path, node, why):
    """A numpy node is checked before anything is made from it."""
    good = _save_with_node(tmp_path, {"numpy": ["<f8", [2], [1.0, "inf"]]})
    assert namedschema.load(good)[1] is not None
    assert list(type(namedschema.load(good))._field_defaults["y"]) == [1.0, np.inf]
    path = _save_with_node(tmp_path, node)
    with pytest.raises(FormatError, match=why):
        namedschema.load(path)


def test_incremental_saves_list_the_feature_too(tmp_path):
    """Full and in-place incremental saves of numpy defaults both declare the feature."""
    Samples = NamedArrayTupleSchema("Samples", "obs reward", defaults=(np.float32(0),))
    buf = Samples(np.zeros((64, 8), np.uint8), np.zeros(64, np.float32))
    path = str(tmp_path / "inc.nsb")
    namedschema.save(buf, path, incremental=True)
    buf.obs[3] = 7
    namedschema.save(buf, path, incremental=True)
    assert _header(path)["features"] == ["numpy-defaults"]
    back = namedschema.load(path)
    assert type(back) is Samples and back.obs[3, 0] == 7
