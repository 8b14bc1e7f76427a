"""Space for compressed saves (issue 32): checked as it is written, not as raw bytes.

A compressed checkpoint's size is known only once written (a frame buffer takes a
few percent of its bytes, random data all of them), so the first-save checks of
``RunCheckpoint`` and ``resumable`` count only what is stored raw for sure
(``destination.state_bytes(state, compression)``), and a compressed save that does
not fit fails as it writes: an ENOSPC OSError saying so, the old file intact, no
temporary file left.
"""

from __future__ import annotations

import errno
import glob
import os

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _compression as compression
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import load, save
from namedschema.checkpoint._write import state_bytes
from namedschema.errors import RunCheckpointError
from tests.checkpoint.test_compressed_incremental import frames
from tests.checkpoint.test_disk_full import tiny_fs  # noqa: F401 (a fixture)

pytest.importorskip("zstandard")


def _temps(directory) -> list[str]:
    return glob.glob(os.path.join(str(directory), ".*.tmp-*"))


def test_state_bytes_counts_only_what_is_stored_raw():
    state = {"obs": np.zeros((100, 84, 84), np.uint8), "reward": np.zeros(5000, np.float32),
             "small": np.zeros(100, np.uint8), "view": None}
    state["view"] = state["obs"][10:20]              # a view: its base counted once
    raw = 100 * 84 * 84 + 5000 * 4 + 100
    assert state_bytes(state) == raw
    zstd = compression.compression_argument("zstd")
    auto = compression.compression_argument("auto")
    assert state_bytes(state, zstd) == 100             # the small array only
    assert state_bytes(state, auto) == 5000 * 4 + 100  # floats stay raw under "auto"


@pytest.mark.parametrize("placed", [False, True])
def test_a_compressed_save_that_runs_out_of_space_keeps_the_old_file(tmp_path, monkeypatch,
                                                                      placed):
    """ENOSPC from the n-th write of a compressed save (plain, or the full save of an
    incremental one): an OSError with its errno, saying the save did not fit; the old
    file as it was and no temporary file."""
    path = tmp_path / "c.nsb"
    kw = {"compression": "zstd", **({"incremental": True} if placed else {})}
    save({"obs": frames(50)}, path, **kw)
    incremental.wait(str(path))
    before = path.read_bytes()
    big = {"obs": np.random.default_rng(0).integers(0, 256, (300, 84, 84), np.uint8),
           "t": np.arange(10)}
    real = os.write
    calls = {"n": 0}

    def counting(fd, data):
        calls["n"] += 1
        return real(fd, data)
    monkeypatch.setattr(os, "write", counting)
    save(big, tmp_path / "count.nsb", **kw)
    monkeypatch.undo()
    total = calls["n"]
    assert total >= 4
    for fail_at in sorted({2, total // 2, total}):
        seen = {"n": 0}

        def write(fd, data, seen=seen, fail_at=fail_at):
            seen["n"] += 1
            if seen["n"] >= fail_at:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd, data)
        monkeypatch.setattr(os, "write", write)
        try:
            with pytest.raises(OSError) as info:
                save(big, path, **kw)
        finally:
            monkeypatch.undo()
        assert info.value.errno == errno.ENOSPC
        assert "did not fit" in str(info.value) and "left as it was" in str(info.value)
        assert str(path) in str(info.value)
        assert path.read_bytes() == before
        assert _temps(tmp_path) == []
        assert np.array_equal(load(path, verify=True)["obs"], frames(50))


@pytest.mark.subprocess
def test_a_small_disk_holds_a_compressed_buffer_larger_than_itself(tiny_fs):  # noqa: F811
    """On a 4 MiB file system: 16 MiB of frames fit compressed; 6 MiB of random bytes do
    not, and that save fails cleanly with the old file kept."""
    path = tiny_fs / "ckpt.nsb"
    obs = frames(16 * 2**20 // (84 * 84))
    save({"obs": obs}, path, compression="zstd")
    before = path.read_bytes()
    assert len(before) < 2**20
    noise = np.random.default_rng(1).integers(0, 256, 6 * 2**20, np.uint8)
    with pytest.raises(OSError) as info:
        save({"obs": noise}, path, compression="zstd")
    assert info.value.errno == errno.ENOSPC and "did not fit" in str(info.value)
    assert path.read_bytes() == before and _temps(tiny_fs) == []
    assert np.array_equal(load(path, verify=True)["obs"], obs)


@pytest.mark.parametrize("codec, refused", [(None, True), ("zstd", False), ("auto", False)])
def test_run_checkpoint_first_save_counts_what_is_stored_raw(tmp_path, monkeypatch, codec,
                                                             refused):
    """A frame buffer larger than the free space: refused uncompressed, saved compressed
    (its stored size is checked as it is written)."""
    from namedschema.training import run_checkpoint
    path = tmp_path / "run.nsc"
    ckpt = namedschema.RunCheckpoint(path, every_steps=10, global_rngs=False,
                                     background=False, compression=codec).track(
        buffer={"obs": frames(200)})
    monkeypatch.setattr(run_checkpoint, "free_bytes", lambda p: 200_000)
    if refused:
        with pytest.raises(RunCheckpointError, match="1,411,200 bytes"):
            ckpt.maybe_save(0)
        assert not path.exists()
    else:
        assert ckpt.maybe_save(0) and ckpt.step == 0
        assert os.path.getsize(path) < 1_411_200 // 4     # room to grow included
