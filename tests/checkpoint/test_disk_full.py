"""A full disk: saving must fail with a clear OSError and keep the old file intact.

The real test mounts a 4 MiB tmpfs (needs root and mount permission; skipped
otherwise). The simulated test makes the write layer fail with ENOSPC, so it
runs everywhere.
"""

import errno
import glob
import os
import subprocess
import uuid

import numpy as np
import pytest

from namedschema.checkpoint import load, save
from tests.figures import record


@pytest.fixture
def tiny_fs(tmp_path):
    """A 4 MiB tmpfs mounted inside tmp_path, or skip."""
    mnt = tmp_path / f"tiny-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                          capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _temps(directory):
    return glob.glob(os.path.join(str(directory), ".*.tmp-*"))


def test_save_into_a_full_tmpfs_fails_cleanly_and_keeps_the_old_file(tiny_fs):
    """On a 4 MiB filesystem a 3 MiB checkpoint can't be replaced by a 2 MiB one: ENOSPC, old file intact."""
    path = tiny_fs / "ckpt.nsb"
    old = np.arange(3 * 2**20 // 8, dtype=np.float64)
    save({"data": old, "version": 1}, path)
    before = path.read_bytes()
    for size in (2 * 2**20, 8 * 2**20):  # fails mid-data, or fails at once
        with pytest.raises(OSError) as info:
            save({"data": np.ones(size // 8), "version": 2}, path)
        assert info.value.errno == errno.ENOSPC
        assert path.read_bytes() == before and _temps(tiny_fs) == []
        d = load(path, verify=True)
        assert d["version"] == 1 and np.array_equal(d["data"], old)
        record("disk_full.saves")
        record("disk_full.old_file_intact")
    # And the filesystem is usable again: a small save succeeds.
    save({"data": np.zeros(10), "version": 3}, path)
    assert load(path)["version"] == 3


def _writes_of_a_save(tmp_path, monkeypatch, obj):
    """How many os.write calls saving ``obj`` makes."""
    calls = {"n": 0}
    real = os.write

    def counting(fd, data):
        calls["n"] += 1
        return real(fd, data)

    monkeypatch.setattr(os, "write", counting)
    try:
        save(obj, tmp_path / "count.nsb", allow_pickle=True)
    finally:
        monkeypatch.undo()
    os.unlink(tmp_path / "count.nsb")
    return calls["n"]


def test_simulated_enospc_at_every_write_keeps_the_old_file(tmp_path, monkeypatch):
    """ENOSPC from each low-level write in turn raises OSError; old file intact, no temp file."""
    path = tmp_path / "ckpt.nsb"
    save({"version": 1, "a": np.arange(1000)}, path)
    before = path.read_bytes()
    big = {"version": 2, "a": np.ones((64, 2**14)), "b": np.arange(77, dtype=np.int16),
           "c": [np.zeros(5), np.ones(3)], "s": {1, 2}}  # the set forces a pickle block
    total = _writes_of_a_save(tmp_path, monkeypatch, big)
    assert total >= 5
    real = os.write
    for fail_at in range(1, total + 1):
        calls = {"n": 0}

        def write(fd, data, calls=calls, fail_at=fail_at):
            calls["n"] += 1
            if calls["n"] >= fail_at:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd, data)

        monkeypatch.setattr(os, "write", write)
        try:
            with pytest.raises(OSError) as info:
                save(big, path, allow_pickle=True)
        finally:
            monkeypatch.undo()
        assert info.value.errno == errno.ENOSPC and "No space" in str(info.value)
        assert path.read_bytes() == before and _temps(tmp_path) == []
        assert load(path, verify=True)["version"] == 1
        record("disk_full.saves")
        record("disk_full.old_file_intact")


def test_short_writes_are_completed_not_truncated(tmp_path, monkeypatch):
    """os.write writing only part of a buffer (allowed on POSIX) still gives a complete file."""
    path = tmp_path / "ckpt.nsb"
    real = os.write

    def short_write(fd, data):
        view = memoryview(data)
        return real(fd, view[: max(1, min(len(view), 4099))])

    monkeypatch.setattr(os, "write", short_write)
    try:
        save({"a": np.arange(50_000)}, path)
    finally:
        monkeypatch.undo()
    assert np.array_equal(load(path, verify=True)["a"], np.arange(50_000))
