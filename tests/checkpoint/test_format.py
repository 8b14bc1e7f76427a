"""Unit tests for namedschema.save / load / inspect (the checkpoint format)."""

from __future__ import annotations

import collections
import json
import math
import os
import pickle
import struct
import threading
from fractions import Fraction

import numpy as np
import pytest

import namedschema
from namedschema import NamedArrayTupleSchema, NamedTupleSchema
from namedschema.checkpoint import FORMAT_VERSION, CheckpointInfo, FieldInfo
from namedschema.errors import (
    NamedSchemaError,
    NotDataError,
    StructureMismatchError,
    UnsafeLoadError,
)

MODES = [None, "r", "r+", "c"]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "ckpt.nsb")


def roundtrip(obj, path, **kwargs):
    namedschema.save(obj, path)
    return namedschema.load(path, **kwargs)


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return n, json.loads(f.read(n))


class Holder:
    """A non-data object holding arrays (stands in for a replay buffer)."""

    def __init__(self, data):
        self.data = data
        self.recent = data[-2:]
        self.same = [1, 2]
        self.twice = (self.same, self.same)


@pytest.mark.parametrize("mode", MODES)
def test_schema_structure_round_trips(path, mode):
    """A nested schema/dict/list/tuple structure comes back equal with schema types kept."""
    Obs = NamedArrayTupleSchema("Obs", "pos vel")
    Traj = NamedArrayTupleSchema("Traj", "obs reward done")
    traj = Traj(Obs(np.arange(12.0).reshape(6, 2), np.ones((6, 2), np.float32)),
                np.arange(6, dtype=np.int64), np.zeros(6, bool))
    obj = {"traj": traj, "meta": [1, 2.5, "x", None, True, (3, -4)], "n": 10**30}
    back = roundtrip(obj, path, mmap_mode=mode)
    assert type(back["traj"]) is Traj and type(back["traj"].obs) is Obs
    assert back["meta"] == [1, 2.5, "x", None, True, (3, -4)]
    assert back["n"] == 10**30
    for got, want in zip(tuple(back["traj"].obs) + tuple(back["traj"])[1:],
                         tuple(traj.obs) + tuple(traj)[1:], strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_special_floats_and_numpy_scalars(path):
    """NaN/inf floats and numpy scalars round-trip with their exact types."""
    obj = [float("nan"), float("inf"), -float("inf"), np.float32(1.5), np.int16(-3), np.bool_(True)]
    back = roundtrip(obj, path)
    assert math.isnan(back[0]) and back[1] == math.inf and back[2] == -math.inf
    assert type(back[3]) is np.float32 and back[3] == 1.5
    assert type(back[4]) is np.int16 and back[4] == -3
    assert type(back[5]) is np.bool_ and back[5]


@pytest.mark.parametrize("mode", MODES)
def test_views_share_memory_after_load(path, mode):
    """Arrays that were views of one base share memory after load, in every mode."""
    base = np.arange(100, dtype=np.float64).reshape(10, 10)
    obj = {"base": base, "tail": base[5:], "col": base[:, 3], "rev": base[::-1, ::-2],
           "overlap": base.reshape(-1)[7:60]}
    back = roundtrip(obj, path, mmap_mode=mode)
    for key in ("tail", "col", "rev", "overlap"):
        assert np.shares_memory(back["base"], back[key]), key
        assert np.array_equal(back[key], obj[key]) and back[key].strides == obj[key].strides
    if mode in (None, "r+", "c"):
        back["base"][6, 3] = -1.0
        assert back["tail"][1, 3] == -1.0 and back["col"][6] == -1.0


def test_only_used_span_is_stored(path):
    """A view of the middle of a large array stores only the bytes it spans."""
    big = np.zeros(1_000_000, np.uint8)
    namedschema.save({"a": big[1000:2000], "b": big[1500:2500]}, path)
    assert os.path.getsize(path) < 8192
    back = namedschema.load(path)
    assert np.shares_memory(back["a"], back["b"])


def test_sparse_lone_view_stored_compactly(path):
    """A lone strided view of a big array is stored as its elements, not the span."""
    big = np.arange(1_000_000, dtype=np.int32)
    namedschema.save(big[::1000], path)
    assert os.path.getsize(path) < 8192
    assert np.array_equal(namedschema.load(path), big[::1000])


def test_same_array_object_is_one_object(path):
    """One array object referenced twice loads as one object."""
    a = np.arange(5)
    back = roundtrip([a, a, {"again": a}], path)
    assert back[0] is back[1] is back[2]["again"]


@pytest.mark.parametrize("make", [
    lambda: np.asfortranarray(np.arange(24.0).reshape(2, 3, 4)),
    lambda: np.arange(24).reshape(4, 6)[::-1, 1::2],
    lambda: np.array(3.25),
    lambda: np.zeros((0, 5), np.int8),
    lambda: np.broadcast_to(np.arange(3), (4, 3)),
    lambda: np.arange(10, dtype=">i4"),
    lambda: (np.arange(6) + 1j).astype(np.complex64),
])
@pytest.mark.parametrize("mode", [None, "r"])
def test_layouts_round_trip_exactly(path, make, mode):
    """Fortran, negative-stride, 0-d, empty, stride-0, big-endian and complex arrays round-trip."""
    a = make()
    b = roundtrip(a, path, mmap_mode=mode)
    assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b)
    if a.size and a.flags.f_contiguous and not a.flags.c_contiguous:
        assert b.flags.f_contiguous


def test_stdlib_namedtuple_becomes_schema(path):
    """A stdlib namedtuple loads as a namedschema NamedTuple with the same name and values."""
    Point = collections.namedtuple("Point", "x y", defaults=(0,))
    back = roundtrip([Point(1, np.arange(3)), Point(2)], path)
    assert isinstance(back[0], namedschema.NamedTuple)
    assert type(back[0])._typename == "Point" and back[0]._fields == ("x", "y")
    assert type(back[0]) is type(back[1]) and back[1] == (2, 0)
    assert type(back[0])._field_defaults == {"y": 0}
    assert np.array_equal(back[0].y, np.arange(3))


def test_rlpyt_style_namedarraytuple_becomes_array_schema(path):
    """A classic namedarraytuple class (namedtuple subclass with get/items) loads as NamedArrayTuple."""
    base = collections.namedtuple("Samp", "a b")

    class Samp(base):
        __slots__ = ()

        def __getitem__(self, loc):
            return type(self)(*(v[loc] for v in self))

        def get(self, index):
            return tuple.__getitem__(self, index)

        def items(self):
            return zip(self._fields, self, strict=True)

    back = roundtrip(Samp(np.arange(4), np.ones(4)), path)
    assert isinstance(back, namedschema.NamedArrayTuple)
    assert np.array_equal(back[1:3].a, [1, 2])


def test_one_schema_is_one_class_and_schema_values(path):
    """Instances of one schema and the schema itself load as one class (the live one in-process)."""
    S = NamedTupleSchema("S", "a b", defaults=(None,))
    back = roundtrip({"cls": S, "xs": [S(1), S(2, "z")]}, path)
    assert back["cls"] is S and type(back["xs"][0]) is S and back["xs"][1] == (2, "z")


def test_pickled_structure_needs_allow_pickle(path):
    """A non-data object is pickled only with allow_pickle; load refuses it by default."""
    data = np.arange(20.0)
    namedschema.save({"buffer": Holder(data)}, path, allow_pickle=True)
    with pytest.raises(UnsafeLoadError, match=r"buffer.*Holder") as info:
        namedschema.load(path)
    assert isinstance(info.value, ValueError) and "allow_pickle=True" in str(info.value)
    assert namedschema.inspect(path).needs_pickle


def test_save_refuses_non_data_without_allow_pickle(path):
    """save without allow_pickle raises NotDataError naming file, path and type; writes nothing."""
    namedschema.save({"old": 1}, path)
    before = open(path, "rb").read()
    graph = {"replay": [np.zeros(3), {"lock": threading.Lock()}], "ok": 1}
    with pytest.raises(NotDataError) as info:
        namedschema.save(graph, path)
    assert str(info.value) == (f"{path!r}: value at replay[1].lock (_thread.lock) is not "
                               "data; pass allow_pickle=True to pickle it")
    assert isinstance(info.value, TypeError) and isinstance(info.value, NamedSchemaError)
    assert (info.value.file, info.value.path, info.value.type_name) == (
        path, "replay[1].lock", "_thread.lock")
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is NotDataError and str(back) == str(info.value)
    assert open(path, "rb").read() == before
    assert [n for n in os.listdir(os.path.dirname(path)) if ".tmp-" in n] == []


@pytest.mark.parametrize("value, where, type_name", [
    ({1, 2}, "<root>", "builtins.set"),
    ([1, Fraction(1, 3)], "[1]", "fractions.Fraction"),
    ({"d": {3: "int key"}}, "d", "builtins.int"),
    ({"cls": Holder}, "cls", "builtins.type"),
])
def test_save_error_names_first_non_data_value(path, value, where, type_name):
    """The error names the path and type of the first value that is not data."""
    with pytest.raises(NotDataError, match=r"value at (?P<p>.*) \((?P<t>.*)\)") as info:
        namedschema.save(value, path)
    assert (info.value.path, info.value.type_name) == (where, type_name)
    assert not os.path.exists(path)


def test_save_refuses_too_deep_nesting_without_allow_pickle(path):
    """A graph too deep for the data path needs allow_pickle like any non-data graph."""
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(NotDataError, match="nested too deeply"):
        namedschema.save(deep, path)
    assert not os.path.exists(path)


@pytest.mark.parametrize("mode", [None, "r"])
def test_pickled_structure_keeps_identity_and_aliasing(path, mode):
    """With allow_pickle, arrays are raw blocks, views still alias and shared lists stay shared."""
    h = Holder(np.arange(20.0))
    namedschema.save(h, path, allow_pickle=True)
    back = namedschema.load(path, allow_pickle=True, mmap_mode=mode)
    assert type(back) is Holder and np.array_equal(back.data, h.data)
    assert np.shares_memory(back.data, back.recent)
    assert back.twice[0] is back.twice[1] is back.same
    _, header = read_header(path)
    desc = json.loads(header["__metadata__"]["namedschema"])
    assert desc["structure"] is None and len(desc["arrays"]) == 2


def test_json_path_does_not_keep_container_identity(path):
    """A list referenced twice on the data path comes back as two equal lists (documented)."""
    shared = [1, 2]
    back = roundtrip((shared, shared), path)
    assert back[0] == back[1] and back[0] is not back[1]


def test_mmap_modes_write_semantics(path):
    """'r' is read-only, 'r+' writes reach the file, 'c' writes stay private."""
    namedschema.save({"a": np.zeros(10)}, path)
    ro = namedschema.load(path, mmap_mode="r")
    assert not ro["a"].flags.writeable
    cow = namedschema.load(path, mmap_mode="c")
    cow["a"][0] = 5
    assert namedschema.load(path)["a"][0] == 0
    rw = namedschema.load(path, mmap_mode="r+")
    rw["a"][1] = 7
    del rw
    assert namedschema.load(path)["a"][1] == 7


def test_save_over_mapped_file(path):
    """Saving over a file that is memory-mapped replaces it; the old map keeps its data."""
    namedschema.save(np.full(1000, 1.0), path)
    old = namedschema.load(path, mmap_mode="r")
    namedschema.save(np.full(1000, 2.0), path)
    assert old[0] == 1.0 and namedschema.load(path)[0] == 2.0


def test_failed_save_leaves_old_file_and_no_temp(path, monkeypatch):
    """An error during save keeps the previous file intact and removes the temp file."""
    namedschema.save({"v": np.arange(3)}, path)
    before = open(path, "rb").read()

    def broken_fsync(fd):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk on fire"):
        namedschema.save({"v": np.arange(1000)}, path)
    monkeypatch.undo()
    assert open(path, "rb").read() == before
    assert os.listdir(os.path.dirname(path)) == ["ckpt.nsb"]


def test_progress_bar_on_stderr(path, capsys):
    """progress=True prints a bar reaching 100% on stderr and nothing on stdout."""
    namedschema.save(np.zeros(1 << 16), path, progress=True)
    out, err = capsys.readouterr()
    assert out == "" and "100%" in err and "saving" in err


def test_file_is_valid_aligned_safetensors(path):
    """safetensors reads every block; whole-array blocks come back as the arrays; blocks are aligned."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    T = NamedArrayTupleSchema("T", "obs act")
    t = T(np.arange(84 * 84 * 3, dtype=np.uint8).reshape(3, 84, 84), np.arange(3, dtype=np.int32))
    namedschema.save(t, path)
    tensors = load_file(path)
    assert np.array_equal(tensors["T.obs"], t.obs) and np.array_equal(tensors["T.act"], t.act)
    with safe_open(path, "np") as f:
        assert f.metadata()["format_version"] == FORMAT_VERSION
    n, header = read_header(path)
    assert (8 + n) % 64 == 0
    for name, info in header.items():
        if name != "__metadata__" and not name.startswith("__pad__"):
            assert info["data_offsets"][0] % 64 == 0


def test_inspect_reports_fields_without_loading(path):
    """inspect gives field paths, shapes, dtypes and sizes, and a printable tree."""
    T = NamedArrayTupleSchema("Traj", "obs reward")
    namedschema.save(T(np.zeros((4, 2), np.uint8), np.zeros(4, np.float32)), path)
    info = namedschema.inspect(path)
    assert isinstance(info, CheckpointInfo) and info.format_version == FORMAT_VERSION
    assert info.fields[0] == FieldInfo("Traj.obs", (4, 2), "uint8", 8, "Traj.obs")
    assert info.data_bytes >= 24 and not info.needs_pickle
    text = str(info)
    assert "Traj (NamedArrayTupleSchema)" in text and "reward: float32 (4,)" in text


def test_empty_structure_and_no_arrays(path):
    """A structure with no arrays at all is a valid (header-only) file."""
    from safetensors.numpy import load_file

    assert roundtrip({"a": [], "b": {}}, path) == {"a": [], "b": {}}
    assert load_file(path) == {}


def test_torch_tensors_round_trip_and_alias(path):
    """CPU tensors (incl. bfloat16 and requires_grad) come back as tensors sharing storage."""
    torch = pytest.importorskip("torch")
    t = torch.arange(12.0).reshape(3, 4)
    obj = {"t": t, "row": t[1], "bf": torch.ones(5, dtype=torch.bfloat16) / 3,
           "p": torch.zeros(2, requires_grad=True)}
    for mode in (None, "r"):
        back = roundtrip(obj, path, mmap_mode=mode)
        assert torch.equal(back["t"], t) and torch.equal(back["row"], t[1])
        assert back["row"].untyped_storage().data_ptr() == back["t"].untyped_storage().data_ptr()
        assert back["bf"].dtype == torch.bfloat16 and torch.equal(back["bf"], obj["bf"])
        assert back["p"].requires_grad


def test_tensor_in_read_only_map_can_be_written_privately(path):
    """With mmap_mode='r', writing to a loaded tensor changes memory only, never the file."""
    torch = pytest.importorskip("torch")
    namedschema.save({"t": torch.zeros(4), "a": np.zeros(4)}, path)
    back = namedschema.load(path, mmap_mode="r")
    back["t"][0] = 5.0
    assert back["t"][0] == 5.0 and not back["a"].flags.writeable
    assert namedschema.load(path)["t"][0] == 0.0


def test_non_cpu_tensor_is_refused(path):
    """A tensor that is not on the CPU raises StructureMismatchError naming the field."""
    torch = pytest.importorskip("torch")
    with pytest.raises(StructureMismatchError, match="x.*CPU"):
        namedschema.save({"x": torch.empty(3, device="meta")}, path)
    assert not os.path.exists(path)
