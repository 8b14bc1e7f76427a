"""copy_from_map: exact copies out of a checkpoint map, in bounded resident memory."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _storage as mapped
from namedschema.checkpoint._storage import PIECE, copy_from_map, read_only_map


def _rss_file() -> int:
    """Bytes of mapped files resident in this process (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    pytest.skip("no RssFile in /proc/self/status")


@pytest.fixture
def saved(tmp_path):
    rng = np.random.default_rng(0)
    data = {"frames": rng.integers(0, 256, (40, 3, 97, 89), dtype=np.uint8),
            "wide": rng.standard_normal((2, 3 * PIECE // 8 + 5)),
            "small": np.arange(10, dtype=np.int32)}
    path = tmp_path / "a.nsc"
    namedschema.save(data, path)
    return data, path


@pytest.mark.slow
@pytest.mark.parametrize("view", [
    lambda a: a, lambda a: a[::-1], lambda a: a[3:31:2, :, ::3],
    lambda a: a.transpose(2, 0, 3, 1), lambda a: a[5], lambda a: a[:0]])
def test_exact_for_any_view(saved, view, monkeypatch):
    # Small pieces: every view is copied in many (rows of 26 KB, pieces of 64 KiB).
    monkeypatch.setattr(mapped, "PIECE", 2**16)
    data, path = saved
    loaded = namedschema.load(path, mmap_mode="r")
    assert read_only_map(loaded["frames"]) is not None
    source = view(loaded["frames"])
    target = np.zeros(source.shape, source.dtype)
    copy_from_map(target, source)
    np.testing.assert_array_equal(target, view(data["frames"]))
    # The map still reads right after its pages were dropped.
    np.testing.assert_array_equal(loaded["frames"], data["frames"])


@pytest.mark.slow
def test_rows_larger_than_a_piece_and_plain_arrays(saved):
    data, path = saved
    loaded = namedschema.load(path, mmap_mode="r")
    for name in ("wide", "small"):
        target = np.empty_like(data[name])
        copy_from_map(target, loaded[name])
        np.testing.assert_array_equal(target, data[name])
    target = np.empty_like(data["small"])
    copy_from_map(target, data["small"])        # not mapped: a plain copy
    np.testing.assert_array_equal(target, data["small"])
    assert read_only_map(data["small"]) is None


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux /proc")
@pytest.mark.parametrize("strided", [False, True], ids=["read-from-file", "pages-released"])
def test_at_most_a_piece_of_the_map_is_resident(tmp_path, strided):
    """Contiguous arrays are read from the file; strided ones drop the map's pages."""
    big = np.full((64, 2**20), 7, np.uint8)               # 64 MiB
    big[:, 1::2] = 5
    path = tmp_path / "big.nsc"
    namedschema.save({"big": big}, path)
    loaded = namedschema.load(path, mmap_mode="r")
    source = loaded["big"][:, ::2] if strided else loaded["big"]
    target = np.zeros(source.shape, source.dtype)
    before = _rss_file()
    copy_from_map(target, source)
    assert _rss_file() - before <= 2 * PIECE
    np.testing.assert_array_equal(target, big[:, ::2] if strided else big)
    # np.copyto, what a resume did before, keeps all of it resident.
    np.copyto(target, source)
    assert _rss_file() - before >= source.size // 2


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux /proc")
def test_the_file_is_let_go_with_the_map(tmp_path):
    path = tmp_path / "a.nsc"
    namedschema.save({"a": np.ones(3 * PIECE, np.uint8)}, path)
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    loaded = namedschema.load(path, mmap_mode="r")
    assert len(os.listdir("/proc/self/fd")) > before   # the map's, and one for direct reads
    target = np.zeros_like(loaded["a"])
    copy_from_map(target, loaded["a"])
    assert target.all()
    del loaded
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before


def test_copy_on_write_maps_are_not_released(tmp_path):
    """A private map may hold writes: dropping its pages would lose them."""
    big = np.zeros((16, 2**20), np.uint8)
    path = tmp_path / "cow.nsc"
    namedschema.save({"big": big}, path)
    loaded = namedschema.load(path, mmap_mode="c")
    loaded["big"][:, 0] = 9
    assert read_only_map(loaded["big"]) is None
    target = np.zeros_like(big)
    copy_from_map(target, loaded["big"])
    assert (target[:, 0] == 9).all() and not target[:, 1:].any()
