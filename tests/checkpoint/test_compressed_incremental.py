"""Incremental compressed saves: ``save(..., incremental=True, compression="zstd")`` (issue 32).

Only the changed chunks are rewritten; the file stays bounded over many saves
(free space, moved blocks, a full save that packs it); round trips (hypothesis)
over random row changes, incompressible data and chunk boundaries; background
saves on each route; switching between compressed and uncompressed files; hostile
placed chunk tables. SIGKILL: test_compressed_incremental_crash.py.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import namedschema
from namedschema.checkpoint import _compression as compression
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _squeezed as squeezed
from namedschema.checkpoint import _tracking as tracking
from namedschema.checkpoint import verify
from namedschema.errors import FormatError
from tests.checkpoint.crafted import join, split
from tests.helpers import examples

pytest.importorskip("zstandard")


@contextlib.contextmanager
def small_chunks(chunk: int = 4096, min_block: int = 256, slack: int | None = None):
    """Small chunks (boundaries in small arrays); ``slack``: the padding bound's slack."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(compression, "CHUNK", chunk))
        stack.enter_context(mock.patch.object(compression, "MIN_BLOCK", min_block))
        if slack is not None:
            stack.enter_context(mock.patch.object(squeezed, "SLACK", slack))
        yield


def frames(n: int, seed: int = 0) -> np.ndarray:
    """Atari-like 84x84 frames: a flat background and a few moving objects."""
    rng = np.random.default_rng(seed)
    out = np.full((n, 84, 84), 87, np.uint8)
    for i in range(n):
        y, x = 10 + i % 60, int(rng.integers(0, 80))
        out[i, y:y + 4, 5:8] = 200
        out[i, 40:44, x:x + 3] = 236
    return out


def desc_of(path: str) -> dict:
    with open(path, "rb") as f:
        _header, desc, _body = split(f.read())
    return desc


def table_of(path: str, block: int = 0) -> dict:
    return desc_of(path)["blocks"][block]


def equal(back: dict, obj: dict) -> bool:
    return all(np.array_equal(np.asarray(back[k]), np.asarray(v)) for k, v in obj.items())


def save(obj, path, **kw):
    namedschema.save(obj, path, incremental=True, compression="zstd", **kw)
    incremental.wait(path)
    return namedschema.inspect(path).last_save


# --------------------------------------------------------------------------
# Only the changed chunks
# --------------------------------------------------------------------------

def test_a_ring_segment_rewrites_only_its_chunks(tmp_path):
    path = str(tmp_path / "r.nsb")
    obj = {"obs": frames(2000), "reward": np.zeros(2000, np.float32)}
    with small_chunks(65536):
        assert save(obj, path).kind == "full"
        before = table_of(path)
        assert "offsets" in before and "zstd-chunk-offsets" in desc_of(path)["features"]
        rows = slice(700, 720)                      # 1% of the rows, as a ring writes them
        obj["obs"][rows] = frames(20, seed=5)
        obj["reward"][rows] = 1.0
        record = save(obj, path)
        after = table_of(path)
    assert record.kind == "incremental", incremental.fallback_reason(path)
    first, last = 700 * 84 * 84 // 65536, (720 * 84 * 84 - 1) // 65536
    changed = {k for k, (a, b) in enumerate(zip(before["chunks"], after["chunks"],
                                                strict=True)) if a != b}
    assert changed and changed <= set(range(first, last + 1))
    moved = {k for k, (a, b) in enumerate(zip(before["offsets"], after["offsets"],
                                              strict=True)) if a != b}
    assert moved <= changed
    assert record.bytes_written < 0.02 * os.path.getsize(path) + 4096 + 1000
    assert equal(namedschema.load(path, verify=True), obj)
    verify(path)
    info = namedschema.inspect(path)
    assert info.fields[0].codec == "zstd" and info.fields[0].ratio > 10


def test_pages_written_with_the_same_values_write_nothing_but_the_header(tmp_path):
    path = str(tmp_path / "s.nsb")
    obj = {"obs": frames(400)}
    with small_chunks(65536):
        save(obj, path)
        before = table_of(path)
        obj["obs"][10:20] = obj["obs"][10:20].copy()
        record = save(obj, path)
    assert record.kind == "incremental"
    assert (record.ranges, record.bytes_written) == (0, 0)   # the header alone
    assert table_of(path)["chunks"] == before["chunks"]


@pytest.mark.parametrize("where", ["first", "last", "both"])
def test_writes_to_the_partial_pages_at_the_ends_are_saved(tmp_path, where):
    """Write protection covers whole pages only: the first and last bytes of a block
    (pages it shares with other memory) are checked by their own checksums."""
    path = str(tmp_path / "e.nsb")
    backing = np.zeros(400 * 84 * 84 + 8192, np.uint8)
    obs = backing[100:100 + 400 * 84 * 84].reshape(400, 84, 84)   # ends mid-page
    obs[:] = frames(400)
    obj = {"obs": obs}
    with small_chunks(65536):
        save(obj, path)
        if where in ("first", "both"):
            obs.reshape(-1)[5] = 1
        if where in ("last", "both"):
            obs.reshape(-1)[-3] = 2
        assert save(obj, path).kind == "incremental"
    assert equal(namedschema.load(path, verify=True), obj)


def test_checksum_tracking_finds_the_same_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking, "_forced", "checksums")
    assert tracking.mode() == "checksums"
    test_a_ring_segment_rewrites_only_its_chunks(tmp_path)


# --------------------------------------------------------------------------
# Bounded on disk
# --------------------------------------------------------------------------

@pytest.mark.slow
def test_many_saves_keep_the_file_bounded(tmp_path):
    """Chunks that grow (noise written into flat frames) and shrink again: they move to
    free space, blocks move to the end, and a full save packs the file once the padding
    passes its bound; the file never passes it, and every state loads exactly."""
    path = str(tmp_path / "b.nsb")
    rng = np.random.default_rng(1)
    obj = {"obs": frames(300), "t": np.zeros(600, np.int64)}
    reasons, sizes, kinds = [], [], []
    with small_chunks(8192, slack=16384):
        save(obj, path)
        for i in range(120):
            rows = rng.integers(0, 300, 2)
            if i % 3:
                obj["obs"][rows] = rng.integers(0, 255, (2, 84, 84), dtype=np.uint8)
            else:
                obj["obs"][rows] = 87
            obj["t"][i % 600] = i
            kinds.append(save(obj, path).kind)
            reasons.append(incremental.fallback_reason(path))
            sizes.append(os.path.getsize(path))
            if i % 10 == 0:
                assert equal(namedschema.load(path, verify=True), obj)
        fresh = str(tmp_path / "fresh.nsb")
        save(obj, fresh)
    assert equal(namedschema.load(path, verify=True), obj)
    assert kinds.count("incremental") > 80
    assert any(r and "free space passed its bound" in r for r in reasons)  # packed again
    assert len(set(sizes)) > 3                                              # blocks moved
    live = sum(size for b in desc_of(fresh)["blocks"] if "chunks" in b
               for size, _crc in b["chunks"])
    # at most: the blocks' tensors (live + a quarter + room) half as much again, + slack
    bound = os.path.getsize(fresh) + 2 * live + 16384 + 2 * 4096
    assert max(sizes) <= bound, (max(sizes), bound)


def test_a_block_that_outgrows_its_tensor_moves(tmp_path):
    path = str(tmp_path / "m.nsb")
    obj = {"a": np.zeros(1_000_000, np.uint8), "b": np.zeros(100_000, np.uint8)}
    with small_chunks(16384):
        save(obj, path)
        size = os.path.getsize(path)
        start = _tensors(path)[desc_of(path)["blocks"][0]["tensor"]]["data_offsets"][0]
        # 40 kB of noise: more than the block's tensor holds (its chunks and 32 KiB)
        obj["a"][:40_000] = np.random.default_rng(0).integers(0, 255, 40_000, np.uint8)
        record = save(obj, path)
    assert record.kind == "incremental", incremental.fallback_reason(path)
    assert os.path.getsize(path) > size
    tensors = _tensors(path)
    moved = tensors[desc_of(path)["blocks"][0]["tensor"]]["data_offsets"][0]
    assert moved > start
    # its old place is padding now, and zeros, as padding is
    pads = [t["data_offsets"] for k, t in tensors.items() if k.startswith("__pad__.")]
    old = next(p for p in pads if p[0] <= start < p[1])
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        f.seek(8 + length + old[0])
        assert not any(f.read(old[1] - old[0]))
    assert equal(namedschema.load(path, verify=True), obj)
    verify(path)


class _Crash(BaseException):
    pass


def test_a_commit_that_moves_a_block_past_the_end_is_finished_by_load(tmp_path, monkeypatch):
    """Killed between the journal's commit and growing the file (simulated: the save
    stops there), the next load grows the file and writes the moved block."""
    from namedschema.checkpoint import _journal as journal
    path = str(tmp_path / "g.nsb")
    obj = {"a": np.zeros(1_000_000, np.uint8), "b": np.zeros(100_000, np.uint8)}
    real = journal.write

    def write(*args):
        real(*args)
        raise _Crash

    with small_chunks(16384):
        save(obj, path)
        size = os.path.getsize(path)
        obj["a"][:40_000] = np.random.default_rng(0).integers(0, 255, 40_000, np.uint8)
        monkeypatch.setattr(journal, "write", write)
        with pytest.raises(_Crash):
            namedschema.save(obj, path, incremental=True, compression="zstd")
        monkeypatch.setattr(journal, "write", real)
    assert os.path.getsize(path) == size and os.path.exists(journal.journal_path(path))
    assert equal(namedschema.load(path, verify=True), obj)
    assert os.path.getsize(path) > size and not os.path.exists(journal.journal_path(path))


def _tensors(path: str) -> dict:
    with open(path, "rb") as f:
        header, _desc, _body = split(f.read())
    return {k: v for k, v in header.items() if k != "__metadata__"}


# --------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------

@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(chunk=st.sampled_from([64, 128, 192, 4096]),
       rows=st.integers(1, 60), width=st.integers(1, 70),
       dtype=st.sampled_from(["u1", "<f4", ">i8", "<u2"]),
       steps=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 8),
                                st.sampled_from(["noise", "flat", "same"])),
                      min_size=1, max_size=6),
       seed=st.integers(0, 2**16), background=st.booleans())
def test_round_trips_over_random_changes(chunk, rows, width, dtype, steps, seed, background):
    rng = np.random.default_rng(seed)
    obj = {"x": np.zeros((rows, width), dtype),
           "noise": rng.integers(0, 255, 3 * chunk + 5, np.uint8),
           "small": np.arange(3, dtype=np.int16), "tag": "t"}
    with tempfile.TemporaryDirectory() as d, small_chunks(chunk, min_block=1):
        path = os.path.join(d, "h.nsb")
        save(obj, path)
        for row, count, kind in steps:
            first = row % rows
            part = obj["x"][first:first + count]
            if kind == "noise":
                part[...] = rng.integers(0, 100, part.shape).astype(dtype)
            elif kind == "flat":
                part[...] = 7
            obj["noise"][row % obj["noise"].size] ^= 1
            obj["small"][row % 3] += 1
            if background:
                namedschema.save(obj, path, incremental=True, compression="zstd",
                                 background=True).wait()
            else:
                save(obj, path)
            back = namedschema.load(path, verify=True)
            assert equal({k: back[k] for k in ("x", "noise", "small")},
                         {k: obj[k] for k in ("x", "noise", "small")})
            assert back["tag"] == "t"


def test_a_pickle_that_changes_size_is_updated(tmp_path):
    path = str(tmp_path / "p.nsb")
    obj = {"obs": frames(50), "extra": {1, 2, 3}}
    with small_chunks(4096):
        save(obj, path, allow_pickle=True)
        for n in (10, 3000, 5, 20000):
            obj["extra"] = set(range(n))
            obj["obs"][n % 50] = 1
            assert save(obj, path, allow_pickle=True).kind in ("incremental", "full")
            back = namedschema.load(path, allow_pickle=True, verify=True)
            assert back["extra"] == obj["extra"] and np.array_equal(back["obs"], obj["obs"])
    assert namedschema.inspect(path).last_save.kind == "incremental"


@pytest.mark.subprocess
def test_a_fresh_interpreter_loads_an_updated_file(tmp_path):
    import subprocess
    import sys

    from tests.helpers import REPO_ROOT
    path = str(tmp_path / "f.nsb")
    obj = {"obs": frames(300)}
    with small_chunks(16384):
        save(obj, path)
        obj["obs"][100:110] = 3
        assert save(obj, path).kind == "incremental"
    np.save(str(tmp_path / "want.npy"), obj["obs"])
    code = ("import sys, numpy as np, namedschema; b = namedschema.load(sys.argv[1], "
            "verify=True); assert np.array_equal(b['obs'], np.load(sys.argv[2])); "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code, path, str(tmp_path / "want.npy")],
                         env=dict(os.environ, PYTHONPATH=REPO_ROOT), capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


# --------------------------------------------------------------------------
# Switching, and when a save is full
# --------------------------------------------------------------------------

def test_switching_compression_writes_a_full_file(tmp_path):
    path = str(tmp_path / "w.nsb")
    with small_chunks(65536):
        obj = {"obs": frames(100)}
        namedschema.save(obj, path, incremental=True)               # raw, incremental layout
        obj["obs"][1] = 1
        assert save(obj, path).kind == "full"                       # now compressed
        assert "not laid out" in incremental.fallback_reason(path)
        obj["obs"][2] = 2
        assert save(obj, path).kind == "incremental"
        namedschema.save(obj, path)                                 # plain: not placed
        assert "offsets" not in table_of(path)
        obj["obs"][3] = 3
        assert save(obj, path).kind == "full"
        obj["obs"][4] = 4
        namedschema.save(obj, path, incremental=True)               # back to raw
        assert "codec" not in table_of(path)
        assert equal(namedschema.load(path, verify=True), obj)


def test_another_process_state_is_compared_with_the_files_checksums(tmp_path):
    """No baseline in memory (as in a new process): every chunk is compared with the raw
    CRC-32 its table lists (test_compressed_first_save.py: the real new process)."""
    path = str(tmp_path / "o.nsb")
    with small_chunks(65536):
        obj = {"obs": frames(100)}
        save(obj, path)
        squeezed.forget(os.path.realpath(path))       # as in a new process: no baseline
        obj["obs"][5] = 5
        record = save(obj, path)
        assert record.kind == "incremental", incremental.fallback_reason(path)
        assert record.bytes_written <= 2 * 65536
        obj["obs"][6] = 6
        assert save(obj, path).kind == "incremental"
        assert equal(namedschema.load(path, verify=True), obj)


def test_a_file_changed_by_someone_else_is_not_trusted(tmp_path):
    path = str(tmp_path / "c.nsb")
    with small_chunks(65536):
        obj = {"obs": frames(100)}
        save(obj, path)
        other = {"obs": frames(100, seed=9)}
        namedschema.save(other, path, compression="zstd")            # another writer
        obj["obs"][5] = 5
        save(obj, path)
        assert equal(namedschema.load(path, verify=True), obj)


# --------------------------------------------------------------------------
# Background saves
# --------------------------------------------------------------------------

@pytest.mark.parametrize("tracking_mode", ["auto", "checksums"])
@pytest.mark.parametrize("rows", [300, 2500])        # a small state; one past SMALL_STATE
def test_background_incremental_compressed_saves(tmp_path, monkeypatch, tracking_mode, rows):
    monkeypatch.setattr(tracking, "_forced", None if tracking_mode == "auto" else tracking_mode)
    path = str(tmp_path / "g.nsb")
    obj = {"obs": frames(rows), "t": np.zeros(10, np.int64)}
    kinds = []
    with small_chunks(65536):
        for i in range(4):
            obj["obs"][(i * 37) % rows:(i * 37) % rows + 5] = i + 1
            obj["t"][i] = i
            want = {k: v.copy() for k, v in obj.items()}
            handle = namedschema.save(obj, path, incremental=True, background=True,
                                      compression="zstd")
            obj["obs"][:3] = 255                   # after the snapshot: not in this save
            handle.wait()
            kinds.append(handle.wait().kind if handle.wait() is not None else
                         namedschema.inspect(path).last_save.kind)
            assert equal(namedschema.load(path, verify=True), want)
            obj["obs"][:3] = want["obs"][:3]
    assert kinds[0] == "full" and kinds[1:] == ["incremental"] * 3, \
        (kinds, incremental.fallback_reason(path))


# --------------------------------------------------------------------------
# Hostile placed tables
# --------------------------------------------------------------------------

def _placed_file(tmp_path) -> str:
    path = str(tmp_path / "placed.nsb")
    with small_chunks(128, min_block=1):
        save({"obs": frames(1)[0, :8].reshape(-1).repeat(2)[:1024]}, path)
    return path


def _hostile(tmp_path, change) -> str:
    path = _placed_file(tmp_path)
    with open(path, "rb") as f:
        header, desc, body = split(f.read())
    change(desc["blocks"][0], desc)
    bad = str(tmp_path / "bad.nsb")
    with open(bad, "wb") as f:
        f.write(join(header, desc, body))
    return bad


def _overlap(block, desc):
    block["offsets"][1] = block["offsets"][0]


def _outside(block, desc):
    block["offsets"][-1] = 10**9


def _count(block, desc):
    block["offsets"] = block["offsets"][:-1]


def _not_int(block, desc):
    block["offsets"][0] = "0"


def _no_feature(block, desc):
    desc["features"] = [f for f in desc["features"] if f != "zstd-chunk-offsets"]


@pytest.mark.parametrize("change, message", [
    (_overlap, "chunks 0 and 1 overlap"),
    (_outside, "chunk .* is placed at 1000000000, outside its tensor"),
    (_count, "the chunk table has .* offsets for .* chunks"),
    (_not_int, "chunk 0 is placed at '0'"),
    (_no_feature, "does not list the feature 'zstd-chunk-offsets'"),
])
def test_hostile_placed_tables_are_refused(tmp_path, change, message):
    bad = _hostile(tmp_path, change)
    for reader in (namedschema.load, namedschema.inspect, verify):
        with pytest.raises(FormatError, match=message):
            reader(bad)


def test_plain_compressed_files_place_no_chunks(tmp_path):
    path = str(tmp_path / "plain.nsb")
    namedschema.save({"obs": frames(100)}, path, compression="zstd")
    assert "offsets" not in table_of(path)
    assert "zstd-chunk-offsets" not in desc_of(path)["features"]


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offsets=st.lists(st.integers(-5, 3000), min_size=0, max_size=12),
       order=st.none() | st.permutations(range(8)))
def test_any_offsets_load_exactly_or_are_refused(tmp_path, offsets, order):
    """Forged offsets (valid or not): a verified load gives the saved bytes or a
    FormatError, never anything else."""
    path = str(tmp_path / "placed.nsb")
    if not os.path.exists(path):
        with small_chunks(128, min_block=1):
            save({"obs": frames(1)[0, :8].reshape(-1).repeat(2)[:1024]}, path)
    want = namedschema.load(path)["obs"]
    with open(path, "rb") as f:
        header, desc, body = split(f.read())
    placed = desc["blocks"][0]["offsets"]
    assert len(placed) == 8
    desc["blocks"][0]["offsets"] = offsets if order is None else [placed[k] for k in order]
    bad = str(tmp_path / "forged.nsb")
    with open(bad, "wb") as f:
        f.write(join(header, desc, body))
    try:
        back = namedschema.load(bad, verify=True)
    except FormatError:
        return
    assert np.array_equal(back["obs"], want)
