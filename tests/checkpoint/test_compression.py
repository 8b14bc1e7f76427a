"""Compressed checkpoints: ``save(..., compression="zstd")`` (issue 32, first slice).

Round trips over dtypes, shapes, views and chunk boundaries (with a small chunk
size), incompressible data, corrupted and hostile chunk tables, the refusals
(mmap_mode, a missing zstandard), inspect and verify, and
files without compression staying byte-identical.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import uuid
import zlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import namedschema
from namedschema.apps.cli import main as cli
from namedschema.checkpoint import _compression as compression
from namedschema.checkpoint import verify
from namedschema.checkpoint._header import ALLOWED_DTYPES, MAX_RATIO, crc_concat
from namedschema.checkpoint._read import _human
from namedschema.errors import FormatError
from tests.checkpoint.crafted import join, split
from tests.helpers import examples

pytest.importorskip("zstandard")

DTYPES = sorted(ALLOWED_DTYPES)


@contextlib.contextmanager
def small_chunks(chunk: int = 128, min_block: int = 1):
    """Chunks of ``chunk`` raw bytes, every block compressed: boundaries in small arrays."""
    with mock.patch.object(compression, "CHUNK", chunk), \
            mock.patch.object(compression, "MIN_BLOCK", min_block):
        yield


def frames(n: int = 64, seed: int = 0) -> np.ndarray:
    """Atari-like 84x84 frames: a flat background and a few moving objects."""
    rng = np.random.default_rng(seed)
    out = np.full((n, 84, 84), 87, np.uint8)
    for i in range(n):
        y, x = 10 + i % 60, int(rng.integers(0, 80))
        out[i, y:y + 4, 5:8] = 200
        out[i, 40:44, x:x + 3] = 236
    return out


def same(a, b) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape
            and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())


def stored_blocks(path) -> list[dict]:
    with open(path, "rb") as f:
        _header, desc, _body = split(f.read())
    return desc["blocks"]


# --------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------

@st.composite
def arrays(draw):
    """An array of any allowed dtype, compressible or not, possibly a strided view."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=12))
    fill = draw(st.sampled_from(["hypothesis", "constant", "random", "ramp"]))
    size = int(np.prod(shape))
    if fill == "hypothesis":
        arr = draw(hnp.arrays(dtype, shape,
                              elements=None if dtype.kind != "b" else st.booleans()))
    else:
        raw = {"constant": np.full(size * dtype.itemsize, 7, np.uint8),
               "random": np.random.default_rng(size).integers(0, 256, size * dtype.itemsize,
                                                              dtype=np.uint8),
               "ramp": np.arange(size * dtype.itemsize, dtype=np.uint8)}[fill]
        arr = raw.view(dtype).reshape(shape) if dtype.kind != "b" else \
            (raw.reshape(shape) & 1).astype(bool) if size else np.zeros(shape, bool)
    layout = draw(st.sampled_from(["c", "f", "view", "transpose", "sparse"]))
    if layout == "f":
        arr = np.asfortranarray(arr)
    elif layout == "transpose":
        arr = arr.T
    elif layout in ("view", "sparse") and arr.ndim:
        steps = draw(st.lists(st.sampled_from([1, 2, -1, -3] if layout == "view" else [3]),
                              min_size=arr.ndim, max_size=arr.ndim))
        arr = arr[tuple(slice(None, None, s) for s in steps)]
    return arr


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(arrays(), min_size=1, max_size=4),
       chunk=st.sampled_from([64, 128, 192, 4096]),
       level=st.sampled_from([None, 1, 3, -3]),
       share=st.booleans())
def test_round_trip_is_bit_exact(tmp_path_factory, values, chunk, level, share):
    """Every dtype, shape, view and chunk boundary comes back bit-exact, views shared."""
    obj: dict = {f"a{i}": v for i, v in enumerate(values)}
    if share and values[0].ndim and values[0].shape[0] > 1:
        obj["view"] = values[0][1:]
    path = str(tmp_path_factory.mktemp("rt") / "c.nsb")
    with small_chunks(chunk):
        namedschema.save(obj, path, compression="zstd" if level is None else ("zstd", level))
    for check in (False, True):
        back = namedschema.load(path, verify=check)
        for key, value in obj.items():
            assert same(back[key], value), key
    if "view" in obj and obj["view"].size:
        assert np.shares_memory(back["view"], back["a0"])
    verify(path)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(arrays(), min_size=1, max_size=4), share=st.booleans(),
       incremental=st.booleans())
def test_auto_round_trip_compresses_one_byte_blocks_only(tmp_path_factory, values, share,
                                                        incremental):
    """compression="auto": bit-exact round trips; a field is stored compressed exactly when
    every array of its block is one-byte data (raw where nothing is: the raw file)."""
    obj: dict = {f"a{i}": v for i, v in enumerate(values)}
    if share and values[0].ndim and values[0].shape[0] > 1:
        obj["view"] = values[0][1:]
    path = str(tmp_path_factory.mktemp("auto") / "c.nsb")
    with small_chunks(128):
        namedschema.save(obj, path, compression="auto", incremental=incremental)
    back = namedschema.load(path, verify=True)
    for key, value in obj.items():
        assert same(back[key], value), key
    fields = namedschema.inspect(path).fields
    by_block: dict = {}
    for f in fields:
        by_block.setdefault(f.block, set()).add(np.dtype(f.dtype).str)
    for f in fields:
        if f.block is not None:
            assert (f.codec == "zstd") == (by_block[f.block] <= compression.AUTO_DTYPES), f


def test_frames_compress_and_round_trip_across_chunks(tmp_path):
    """Default chunking: frames across several 4 MiB chunks, with small and raw neighbours."""
    obs = frames(1500)                                   # 10 MiB: 3 chunks, the last short
    rewards = np.random.default_rng(1).random(600_000)    # 4.6 MiB of random floats
    obj = {"obs": obs, "reward": rewards, "step": np.int64(7), "few": np.arange(5),
           "recent": obs[-4:]}
    path = str(tmp_path / "buf.nsb")
    namedschema.save(obj, path, compression="zstd")
    back = namedschema.load(path, verify=True)
    assert same(back["obs"], obs) and same(back["reward"], rewards)
    assert np.shares_memory(back["recent"], back["obs"]) and back["step"] == 7
    assert os.path.getsize(path) < obs.nbytes / 50 + rewards.nbytes * 1.01
    blocks = {b["tensor"]: b for b in stored_blocks(path)}
    assert len(blocks["obs"]["chunks"]) == 3 and blocks["obs"]["chunk"] == compression.CHUNK
    assert "codec" not in blocks["few"]                   # small blocks stay raw


def test_pickled_graphs_and_file_objects_compress(tmp_path):
    """The pickle block is compressed too; saving to and loading from file objects works."""
    obj = {"set": {1, 2}, "frames": frames(32), "text": "x" * 10_000}
    out = io.BytesIO()
    namedschema.save(obj, out, allow_pickle=True, compression="zstd")
    assert len(out.getvalue()) < frames(32).nbytes / 10
    out.seek(0)
    back = namedschema.load(out, allow_pickle=True, verify=True)
    assert back["set"] == {1, 2} and same(back["frames"], obj["frames"])
    assert back["text"] == obj["text"]


def test_torch_tensors_round_trip(tmp_path):
    torch = pytest.importorskip("torch")
    t = torch.arange(100_000, dtype=torch.float32).reshape(1000, 100)
    obj = {"t": t, "row": t[3], "bf": torch.zeros(5000, dtype=torch.bfloat16)}
    path = str(tmp_path / "t.nsb")
    with small_chunks(4096):
        namedschema.save(obj, path, compression="zstd")
    back = namedschema.load(path, verify=True)
    assert torch.equal(back["t"], t) and torch.equal(back["bf"], obj["bf"])
    assert back["row"].untyped_storage().data_ptr() == back["t"].untyped_storage().data_ptr()


@pytest.mark.subprocess
def test_fresh_interpreter_loads_a_compressed_file(tmp_path):
    from tests.helpers import run_fresh
    path = str(tmp_path / "c.nsb")
    obs = frames(200)
    namedschema.save({"obs": obs, "r": np.arange(3000.0)}, path, compression=("zstd", 3))
    proc = run_fresh(f"""
        import zlib, namedschema
        obj = namedschema.load({path!r}, verify=True)
        print(zlib.crc32(obj["obs"].tobytes()), obj["r"].sum())
        """)
    crc, total = proc.stdout.split()
    assert int(crc) == zlib.crc32(obs.tobytes()) and float(total) == np.arange(3000.0).sum()


@pytest.mark.parametrize("route", ["copied", "forked"])
def test_background_full_save_is_compressed(tmp_path, route):
    """A background (non-incremental) save writes through the plain writer: compressed,
    whether the writer thread writes a copy (small states) or a snapshot child does."""
    from namedschema.checkpoint import _background as background
    obs = frames(400)
    path = str(tmp_path / "bg.nsb")
    with mock.patch.object(background, "SMALL_STATE", 2**30 if route == "copied" else 0):
        namedschema.save({"obs": obs}, path, background=True, compression="zstd").wait()
    assert os.path.getsize(path) < obs.nbytes / 20
    assert same(namedschema.load(path, verify=True)["obs"], obs)


def test_sources_cut_into_chunks_across_their_pieces(tmp_path):
    """Blocks written from several pieces (leading alignment bytes, compact copies of
    sparse views made a few rows at a time, pickles) are cut into chunks in order."""
    from namedschema.checkpoint import _storage as blocks
    base = np.arange(3000, dtype=np.float64)
    sparse = np.arange(40_000, dtype=np.int32).reshape(400, 100)[::3, ::7]
    obj = {"a": base.view(np.uint8)[1:], "b": base[1500:], "sparse": sparse,
           "set": {1, 2}, "text": "t" * 3000}
    path = str(tmp_path / "pieces.nsb")
    with small_chunks(192), mock.patch.object(blocks, "CHUNK", 1000):
        namedschema.save(obj, path, compression="zstd", allow_pickle=True)
    back = namedschema.load(path, verify=True, allow_pickle=True)
    for key in ("a", "b", "sparse"):
        assert same(back[key], obj[key]), key
    assert back["set"] == {1, 2} and back["text"] == obj["text"]
    assert all("codec" in b for b in stored_blocks(path))


def test_crc_concat_matches_zlib():
    data = np.random.default_rng(3).integers(0, 256, 10_000, np.uint8).tobytes()
    for piece in (64, 100, 4096, 10_000):
        parts = [data[i:i + piece] for i in range(0, len(data), piece)]
        assert crc_concat([zlib.crc32(p) for p in parts], piece, len(parts[-1])) == \
            zlib.crc32(data)


# --------------------------------------------------------------------------
# Incompressible data, None unchanged
# --------------------------------------------------------------------------

def test_random_data_is_stored_raw_and_barely_grows(tmp_path):
    """Chunks that do not shrink are stored raw: the file grows by its chunk table only."""
    data = np.random.default_rng(0).integers(0, 256, 9 * 2**20, dtype=np.uint8)
    plain, packed = str(tmp_path / "plain.nsb"), str(tmp_path / "packed.nsb")
    namedschema.save({"x": data}, plain)
    namedschema.save({"x": data}, packed, compression="zstd")
    assert os.path.getsize(packed) <= os.path.getsize(plain) + 512
    (block,) = stored_blocks(packed)
    assert [size for size, _crc in block["chunks"]] == [4 * 2**20, 4 * 2**20, 2**20]
    assert same(namedschema.load(packed, verify=True)["x"], data)
    # Chunks too small to probe are compressed, and stored raw when the frame is larger.
    with small_chunks(4096):
        namedschema.save({"x": data[:65536]}, packed, compression="zstd")
    (block,) = stored_blocks(packed)
    assert [size for size, _crc in block["chunks"]] == [4096] * 16
    # A chunk that is half random, half zeros passes the probe and is compressed.
    data[: 2 * 2**20] = 0
    namedschema.save({"x": data}, packed, compression="zstd")
    (block,) = stored_blocks(packed)
    assert block["chunks"][0][0] < 0.51 * 4 * 2**20 and block["chunks"][1][0] == 4 * 2**20
    assert same(namedschema.load(packed, verify=True)["x"], data)


def golden():
    """What ``data/writer-5a007cd.nsb`` holds (no schemas: their ids are per process)."""
    frames = np.arange(6 * 4 * 4, dtype=np.uint8).reshape(6, 4, 4)
    return {"frames": frames, "last": frames[-2:],
            "reward": np.linspace(-1, 1, 6).astype(np.float32),
            "done": np.array([0, 0, 1, 0, 0, 1], bool),
            "cols": np.arange(24.0).reshape(4, 6)[:, ::2],
            "big": np.tile(np.arange(256, dtype=np.uint16), 40),
            "meta": ("demo", 7, None, [1.5, float("inf")]), "step": np.int64(4),
            "empty": np.zeros((0, 3))}


def test_none_writes_todays_bytes(tmp_path):
    """compression=None (or no argument) writes the bytes the writer wrote before it.

    ``data/writer-5a007cd.nsb`` is ``golden()`` saved by the commit before
    compression (5a007cd), with the checkpoint id ``UUID(int=32)``.
    """
    from tests.checkpoint.make_fixtures import DATA
    with open(os.path.join(DATA, "writer-5a007cd.nsb"), "rb") as f:
        want = f.read()
    for kwargs in ({}, {"compression": None}):
        path = str(tmp_path / f"n{len(kwargs)}.nsb")
        with mock.patch("namedschema.checkpoint._write.uuid.uuid4",
                        return_value=uuid.UUID(int=32)):
            namedschema.save(golden(), path, **kwargs)
        with open(path, "rb") as f:
            assert f.read() == want
    big = {"obs": frames(100), "r": np.arange(10_000.0), "set": {1}}
    outs = []
    for kwargs in ({}, {"compression": None}):
        out = io.BytesIO()
        with mock.patch("namedschema.checkpoint._write.uuid.uuid4",
                        return_value=uuid.UUID(int=32)):
            namedschema.save(big, out, allow_pickle=True, **kwargs)
        outs.append(out.getvalue())
    assert outs[0] == outs[1] and b"codec" not in outs[0] and b"zstd" not in outs[0]


# --------------------------------------------------------------------------
# Damaged and hostile files
# --------------------------------------------------------------------------

def _compressed_file(tmp_path, obj=None, chunk=128) -> str:
    path = str(tmp_path / "c.nsb")
    obj = {"obs": np.tile(np.arange(64, dtype=np.uint8), 16)} if obj is None else obj
    with small_chunks(chunk):
        namedschema.save(obj, path, compression="zstd")
    return path


def test_corrupt_chunk_is_refused_naming_the_array(tmp_path):
    path = _compressed_file(tmp_path, {"obs": frames(8), "noise": np.random.default_rng(
        0).integers(0, 256, 1000, np.uint8)}, chunk=4096)
    with open(path, "rb") as f:
        header, desc, body = split(f.read())
    for name in ("obs", "noise"):  # a compressed chunk, then a raw one
        block = next(b for b in desc["blocks"] if b["tensor"] == name)
        start = header[name]["data_offsets"][0] + block["chunks"][0][0] // 2
        broken = bytearray(body)
        broken[start] ^= 0x40
        bad = str(tmp_path / f"bad-{name}.nsb")
        with open(bad, "wb") as f:
            f.write(join(header, desc, bytes(broken)))
        with pytest.raises(FormatError, match=f"field '{name}' is corrupt: chunk 0"):
            namedschema.load(bad, verify=True)
        with pytest.raises(FormatError, match=f"field '{name}' is corrupt"):
            verify(bad)
        assert cli(["verify", bad]) == 1


def test_a_compressed_chunk_is_checked_on_every_load(tmp_path):
    """Without verify=True too: a flipped bit in a compressed chunk is a FormatError (it
    decompressed silently to wrong data in 252 of 300 trials), while a raw chunk is
    checked only with verify=True, as uncompressed blocks are."""
    path = _compressed_file(tmp_path, {"obs": frames(8)}, chunk=4096)
    with open(path, "rb") as f:
        header, desc, body = split(f.read())
    block = next(b for b in desc["blocks"] if b["tensor"] == "obs")
    stored, raw = block["chunks"][0][0], 4096
    assert stored < raw                              # chunk 0 is compressed
    for at in range(stored):                         # every byte of the chunk
        broken = bytearray(body)
        broken[header["obs"]["data_offsets"][0] + at] ^= 0x01
        bad = str(tmp_path / "bad.nsb")
        with open(bad, "wb") as f:
            f.write(join(header, desc, bytes(broken)))
        with pytest.raises(FormatError, match="field 'obs' is corrupt"):
            namedschema.load(bad)


def test_raw_checksum_of_the_block_is_checked(tmp_path):
    """Chunks intact but the block's raw CRC-32 wrong: verify=True and verify refuse."""
    path = _compressed_file(tmp_path, chunk=256)
    with open(path, "rb") as f:
        header, desc, body = split(f.read())
    desc["blocks"][0]["crc32"] = f"{int(desc['blocks'][0]['crc32'], 16) ^ 1:08x}"
    bad = str(tmp_path / "rawcrc.nsb")
    with open(bad, "wb") as f:
        f.write(join(header, desc, body))
    namedschema.load(bad)   # not checked without verify
    for reader in (lambda p: namedschema.load(p, verify=True), verify):
        with pytest.raises(FormatError, match="field 'obs' is corrupt: checksum .* of its "
                                              "decompressed bytes does not match"):
            reader(bad)


def test_chunk_decompressing_to_another_size_is_refused(tmp_path):
    """A frame whose content is not its chunk's raw size is a format error."""
    path = _compressed_file(tmp_path, chunk=1024)   # one chunk of 1024 raw bytes
    with open(path, "rb") as f:
        header, desc, body = split(f.read())
    desc["blocks"][0]["nbytes"] = desc["blocks"][0]["chunk"] = 1088   # the frame holds 1024
    bad = str(tmp_path / "size.nsb")
    with open(bad, "wb") as f:
        f.write(join(header, desc, body))
    with pytest.raises(FormatError, match="field 'obs' is corrupt: compressed chunk 0 "
                                          "declares 1024 bytes, the chunk holds 1088"):
        namedschema.load(bad)


def _hostile(tmp_path, change) -> str:
    path = _compressed_file(tmp_path)       # 1024 raw bytes in 8 chunks of 128
    with open(path, "rb") as f:
        header, desc, body = split(f.read())
    change(header, desc["blocks"][0], desc)
    bad = str(tmp_path / "hostile.nsb")
    with open(bad, "wb") as f:
        f.write(join(header, desc, body))
    return bad


def _huge_table(header, block, desc):
    block["nbytes"] = 2**50
    desc["arrays"][0]["shape"] = [2**50]


def _many_chunks(header, block, desc):
    block["chunks"] = [[1, "00000000"]] * 20_000


def _ratio_bomb(header, block, desc):
    # 64 MiB raw claimed from one stored byte per chunk: beyond what zstd expands.
    block["nbytes"] = block["chunk"] = 2**26
    block["chunks"] = [[header["obs"]["data_offsets"][1] - header["obs"]["data_offsets"][0],
                        "00000000"]]
    desc["arrays"][0]["shape"] = [2**26]


def _stored_past_raw(header, block, desc):
    block["chunks"][0][0] = 129


def _sum_mismatch(header, block, desc):
    block["chunks"][0][0] -= 1


def _bad_codec(header, block, desc):
    block["codec"] = "lzma"


def _bad_chunk_size(header, block, desc):
    block["chunk"] = 2**40


def _no_feature(header, block, desc):
    desc["features"] = []


def _malformed_entry(header, block, desc):
    block["chunks"][3] = [10, "XYZ"]


@pytest.mark.parametrize("change, message", [
    (_huge_table, "chunk table has 8 entries; 1125899906842624 bytes in chunks of 128 need"),
    (_many_chunks, "the chunk table has 20000 entries"),
    (_ratio_bomb, f"more than zstd can expand \\(x{MAX_RATIO}\\)"),
    (_stored_past_raw, "chunk 0 claims 129 stored bytes for 128 raw bytes"),
    (_sum_mismatch, "its chunks hold .* stored bytes, its tensor"),
    (_bad_codec, "unknown codec 'lzma'"),
    (_bad_chunk_size, "chunk size 1099511627776 is not an integer from 64"),
    (_no_feature, "has compressed blocks but does not list the feature 'zstd-chunks'"),
    (_malformed_entry, r"chunk 3 is not \[stored size, 8 hex digits\]"),
])
def test_hostile_chunk_tables_are_refused_fast(tmp_path, change, message):
    bad = _hostile(tmp_path, change)
    for reader in (namedschema.load, namedschema.inspect, verify):
        began = time.perf_counter()
        with pytest.raises(FormatError, match=message) as caught:
            reader(bad)
        assert time.perf_counter() - began < 2.0
        if change not in (_no_feature,):
            assert "field 'obs'" in str(caught.value)


def test_truncated_compressed_file_is_refused(tmp_path):
    path = _compressed_file(tmp_path)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:-70])
    with pytest.raises(FormatError, match="truncated"):
        namedschema.load(path)


# --------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["r", "r+", "c"])
def test_mmap_mode_refuses_compressed_arrays(tmp_path, mode):
    path = _compressed_file(tmp_path)
    with pytest.raises(FormatError, match="field 'obs' is stored compressed \\(zstd\\) and "
                                          "cannot be memory-mapped"):
        namedschema.load(path, mmap_mode=mode)


def test_uncompressed_incremental_save_updates_compressed_files_in_full(tmp_path):
    """An incremental save without compression over a compressed file writes a full,
    raw file (compressed incremental saves: test_compressed_incremental.py)."""
    path = str(tmp_path / "i.nsb")
    obs = frames(100)
    namedschema.save({"obs": obs}, path, compression="zstd")
    obs[3] = 1
    namedschema.save({"obs": obs}, path, incremental=True)   # a full, raw rewrite
    assert "codec" not in stored_blocks(path)[0]
    assert same(namedschema.load(path, verify=True)["obs"], obs)


@pytest.mark.parametrize("change", ["same arrays", "one more array"])
def test_incremental_save_over_raw_chunks_is_full(tmp_path, change):
    """A compressed block whose chunks are all raw looks like a raw block of the same
    size, and a compressed file's header has room to spare (it was reserved for raw
    chunks); an incremental save still rewrites the file, it never patches chunks."""
    # Big-endian, so declared U8; multiples of 64 bytes, so the padding reserved in
    # the header for each block is not used: the header has room to grow.
    rng = np.random.default_rng(0)
    obj = {f"x{i}": rng.integers(0, 65535, 4096).astype(">u2") for i in range(12)}
    path = str(tmp_path / "raw.nsb")
    with small_chunks(4096):
        namedschema.save(obj, path, compression="zstd")
    assert all(size == 4096 for b in stored_blocks(path) for size, _crc in b["chunks"])
    obj["x3"][10:20] = 7
    if change == "one more array":
        obj["new"] = np.arange(10)
    namedschema.save(obj, path, incremental=True)
    assert all("codec" not in b for b in stored_blocks(path))
    back = namedschema.load(path, verify=True)
    assert all(same(back[key], value) for key, value in obj.items())


@pytest.mark.parametrize("value, message", [
    ("lz4", "save: compression must be None, 'zstd', \\('zstd', level\\) or 'auto'"),
    (("auto", 3), "compression must be None"),
    (("zstd", 99), "compression level must be an int from -7 to 22"),
    (("zstd", "3"), "compression level must be an int"),
    (True, "compression must be None"),
    (["zstd", 3], "compression must be None"),
])
def test_bad_compression_arguments(tmp_path, value, message):
    path = str(tmp_path / "x.nsb")
    with pytest.raises(ValueError, match=message):
        namedschema.save({"x": np.zeros(10)}, path, compression=value)
    assert not os.path.exists(path)


def test_missing_zstandard_is_named(tmp_path, monkeypatch):
    path = _compressed_file(tmp_path)
    monkeypatch.setitem(sys.modules, "zstandard", None)   # import zstandard fails
    new = str(tmp_path / "new.nsb")
    with pytest.raises(ModuleNotFoundError, match="pip install"):   # before anything else
        namedschema.save({"lock": object()}, new, compression="zstd")
    with pytest.raises(ModuleNotFoundError, match="compression='zstd' needs the 'zstandard' "
                                                  "package.*pip install 'namedschema\\[zstd\\]'"):
        namedschema.save({"x": np.zeros(10_000)}, new, compression="zstd")
    assert not os.path.exists(new)
    with pytest.raises(ModuleNotFoundError, match="loading field 'obs', which is stored "
                                                  "compressed with zstd, needs the 'zstandard'"):
        namedschema.load(path)
    namedschema.save({"x": np.zeros(10)}, new)   # uncompressed saves need nothing
    assert namedschema.load(new)["x"].sum() == 0
    assert namedschema.inspect(path).fields[0].codec == "zstd"   # the header alone


# --------------------------------------------------------------------------
# compression="auto"
# --------------------------------------------------------------------------

def _mlp_adam_like(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((256, 256), np.float32),
            "m1": rng.standard_normal((256, 256), np.float32) * 1e-3,
            "steps": np.arange(1000, dtype=np.int64)}


def test_auto_compresses_one_byte_blocks_only(tmp_path):
    obs = frames(200)
    done = np.zeros(200_000, bool)
    obj = {"obs": obs, "done": done, "signed": obs.view(np.int8)[:100],
           "reward": np.random.default_rng(0).standard_normal(200_000).astype(np.float32),
           **_mlp_adam_like()}
    path = str(tmp_path / "auto.nsb")
    namedschema.save(obj, path, compression="auto")
    codecs = {f.path: f.codec for f in namedschema.inspect(path).fields}
    assert codecs["obs"] == codecs["done"] == codecs["signed"] == "zstd"
    assert codecs["reward"] is codecs["w1"] is codecs["m1"] is codecs["steps"] is None
    back = namedschema.load(path, verify=True)
    assert all(same(back[k], v) for k, v in obj.items())


def test_auto_block_with_a_float_view_stays_raw(tmp_path):
    """A block is compressed only when every array in it is one-byte data."""
    raw = np.zeros(64_000, np.uint8)
    obj = {"bytes": raw, "floats": raw.view(np.float32)}
    path = str(tmp_path / "mixed.nsb")
    namedschema.save(obj, path, compression="auto")
    assert all(f.codec is None for f in namedschema.inspect(path).fields)


@pytest.mark.parametrize("incremental", [False, True])
def test_auto_with_nothing_to_compress_writes_the_raw_file(tmp_path, incremental):
    """Float state under "auto": the same bytes as compression=None (incremental saves
    stay incremental)."""
    obj = _mlp_adam_like()
    a, b = str(tmp_path / "a.nsb"), str(tmp_path / "b.nsb")
    namedschema.save(obj, a, compression="auto", incremental=incremental)
    namedschema.save(obj, b, incremental=incremental)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        ha, da, body_a = split(fa.read())
        hb, db, body_b = split(fb.read())
    da.pop("checkpoint_id"), db.pop("checkpoint_id")
    assert da == db and body_a == body_b
    if incremental:
        obj["w1"][3] = 0
        namedschema.save(obj, a, compression="auto", incremental=True)
        assert namedschema.inspect(a).last_save.kind == "incremental"


@pytest.mark.parametrize("pickled", [False, True])
def test_auto_incremental_saves_rewrite_changed_chunks_and_keep_floats_raw(tmp_path,
                                                                          pickled):
    """compression="auto" with incremental=True (the writers' mode): frames in placed
    chunk tables updated in place, float arrays raw, a pickle block (rlpyt's resumable
    pickles) chunked; every save loads back exactly."""
    obs = frames(400)
    obj = {"obs": obs, **_mlp_adam_like()}
    if pickled:
        obj["objects"] = {"a set": {1, 2, 3}}
    path = str(tmp_path / "auto.nsb")
    with small_chunks(64 * 1024, 4096):
        for k in range(3):
            obs[k * 4:k * 4 + 4] = obs[200 + k]      # a ring segment of the frames
            obj["w1"][k] += 1.0
            namedschema.save(obj, path, compression="auto", incremental=True,
                             allow_pickle=pickled)
            info = namedschema.inspect(path)
            assert info.last_save.kind == ("full" if k == 0 else "incremental")
            codecs = {f.path: f.codec for f in info.fields}
            assert codecs["obs"] == "zstd" and codecs["w1"] is codecs["m1"] is None
            back = namedschema.load(path, verify=True, allow_pickle=pickled)
            assert all(same(back[key], obj[key]) for key in ("obs", "w1", "m1", "steps"))
            if pickled:
                assert back["objects"] == obj["objects"]


def test_auto_without_zstandard_writes_raw_and_says_so_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "zstandard", None)   # import zstandard fails
    monkeypatch.setattr(compression, "_said_missing", False)
    obs = frames(100)
    path = str(tmp_path / "auto.nsb")
    with caplog.at_level("INFO", logger="namedschema"):
        namedschema.save({"obs": obs}, path, compression="auto")
        namedschema.save({"obs": obs}, path, compression="auto", incremental=True)
    said = [r for r in caplog.records if "compression='auto' writes checkpoints uncompressed"
            in r.getMessage()]
    assert len(said) == 1 and "pip install 'namedschema[zstd]'" in said[0].getMessage()
    assert namedschema.inspect(path).fields[0].codec is None
    assert same(namedschema.load(path, verify=True)["obs"], obs)
    with pytest.raises(ModuleNotFoundError, match="namedschema\\[zstd\\]"):
        namedschema.save({"obs": obs}, path, compression="zstd")   # asked for: an error


# --------------------------------------------------------------------------
# inspect and verify
# --------------------------------------------------------------------------

def test_inspect_and_verify_report_compression(tmp_path, capsys):
    obs = frames(300)
    noise = np.random.default_rng(0).integers(0, 256, 100_000, np.uint8)
    path = str(tmp_path / "c.nsb")
    namedschema.save({"obs": obs, "noise": noise, "last": obs[-1], "few": np.arange(3)}, path,
                     compression="zstd")
    info = namedschema.inspect(path)
    by = {f.path: f for f in info.fields}
    assert info.compressed and info.data_bytes == obs.nbytes + noise.nbytes + 24
    assert by["obs"].codec == "zstd" and by["obs"].block_bytes == obs.nbytes
    assert by["obs"].ratio > 20 and by["noise"].stored_bytes == noise.nbytes
    assert by["few"].codec is by["few"].ratio is by["few"].stored_bytes is None
    assert info.stored_bytes == by["obs"].stored_bytes + noise.nbytes + 24
    assert cli(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert f", compressed to {_human(info.stored_bytes)} (" in out.splitlines()[0]
    assert (f"'obs': uint8 (300, 84, 84) 2.0 MiB, zstd {_human(by['obs'].stored_bytes)} "
            f"stored, {by['obs'].ratio:.1f}x\n") in out
    assert "'noise': uint8 (100000,) 97.7 KiB, zstd 97.7 KiB stored, 1.0x" in out
    assert "'last': uint8 (84, 84) 6.9 KiB, view of obs" in out
    assert "'few': int64 (3,) 24 B\n" in out
    assert cli(["verify", path]) == 0
    out = capsys.readouterr().out
    assert "match their checksums (stored compressed in" in out and "every chunk checked" in out
    assert verify(path).stored_bytes == info.stored_bytes
    plain = str(tmp_path / "p.nsb")
    namedschema.save({"obs": obs}, plain)
    assert not namedschema.inspect(plain).compressed
    assert "compressed" not in str(namedschema.inspect(plain))


def test_header_lists_the_chunk_table(tmp_path):
    """The wire form: codec, chunk, [stored size, crc] per chunk, raw CRC of the block."""
    data = np.tile(np.arange(64, dtype=np.uint8), 5)      # 320 bytes: chunks 128, 128, 64
    path = _compressed_file(tmp_path, {"obs": data})
    (block,) = stored_blocks(path)
    assert block["codec"] == "zstd" and block["chunk"] == 128 and block["nbytes"] == 320
    assert block["crc32"] == f"{zlib.crc32(data.tobytes()):08x}"
    assert len(block["chunks"]) == 3 and all(len(c[1]) == 8 for c in block["chunks"])
    with open(path, "rb") as f:
        header, desc, _body = split(f.read())
    assert header["obs"]["dtype"] == "U8"
    assert header["obs"]["shape"] == [sum(c[0] for c in block["chunks"])]
    assert "zstd-chunks" in desc["features"]
    json.dumps(desc)
