"""copy_from_map: exact copies out of a checkpoint map, in bounded resident memory."""

from __future__ import annotations

import os

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import mapped
from namedschema.checkpoint.mapped import PIECE, copy_from_map, read_only_map


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


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux /proc")
def test_mapped_pages_are_released_behind_the_copy(tmp_path):
    big = np.full((64, 2**20), 7, np.uint8)               # 64 MiB
    path = tmp_path / "big.nsc"
    namedschema.save({"big": big}, path)
    loaded = namedschema.load(path, mmap_mode="r")
    target = np.zeros_like(big)
    before = _rss_file()
    copy_from_map(target, loaded["big"])
    assert _rss_file() - before <= 2 * PIECE
    np.testing.assert_array_equal(target, big)
    # np.copyto, what a resume did before, keeps all 64 MiB of the file resident.
    np.copyto(target, loaded["big"])
    assert _rss_file() - before >= big.nbytes // 2


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
