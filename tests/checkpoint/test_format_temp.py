"""Tests for save's removal of temporary files left behind by savers that died."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _write as atomic

pytestmark = [
    pytest.mark.skipif(not os.path.isdir("/proc/self"),
                       reason="stale temp files are recognised through /proc"),
    pytest.mark.subprocess,
]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "ckpt.nsb")


def temp_name(path, pid, token="0badc0de", *, target=None, tag=None):
    """A temp file for ``target`` (default: path) as a saver with ``pid`` would name it."""
    target = target or os.path.basename(path)
    prefix = atomic.temp_prefix(target, tag or atomic.host_tag())
    full = os.path.join(os.path.dirname(path), f"{prefix}{pid}-{token}")
    with open(full, "wb") as f:
        f.write(b"half a checkpoint")
    return full


def dead_pid():
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temp_file_of_dead_saver_is_removed_by_next_save(path):
    """A temp file whose pid is no live process is removed; the new checkpoint is written."""
    stale = temp_name(path, dead_pid())
    namedschema.save({"v": np.arange(4)}, path)
    assert not os.path.exists(stale)
    assert sorted(os.listdir(os.path.dirname(path))) == ["ckpt.nsb"]
    assert namedschema.load(path)["v"].tolist() == [0, 1, 2, 3]


def test_temp_file_of_live_saver_is_kept(path):
    """A temp file written after its (live) process started is never removed."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.05)
        own = temp_name(path, os.getpid(), "00000001")
        other = temp_name(path, child.pid, "00000002")
        namedschema.save(np.zeros(3), path)
        assert os.path.exists(own) and os.path.exists(other)
    finally:
        child.kill()
        child.wait()
    # Once the saver is gone its file is stale.
    namedschema.save(np.zeros(3), path)
    assert not os.path.exists(other) and os.path.exists(own)


def test_reused_pid_does_not_protect_an_old_temp_file(path):
    """A live pid that started long after the file's last write did not write it: removed."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = temp_name(path, child.pid)
        hour_ago = time.time() - 3600
        os.utime(stale, (hour_ago, hour_ago))
        namedschema.save(np.zeros(3), path)
        assert not os.path.exists(stale)
    finally:
        child.kill()
        child.wait()


def test_unreaped_dead_saver_counts_as_dead(path):
    """A saver that was killed but not yet reaped (a zombie) leaves a removable file."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = temp_name(path, child.pid)
        child.kill()
        # Wait for the exit without reaping it, so the pid stays a zombie.
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert atomic.process_state(child.pid)[0] == "Z"
        namedschema.save(np.zeros(3), path)
        assert not os.path.exists(stale)
    finally:
        child.wait()


@pytest.mark.parametrize("kind", ["other target", "other host", "not a temp name", "directory"])
def test_files_that_are_not_this_targets_stale_temps_are_kept(path, kind):
    """Temp files of other targets or hosts, look-alike names and directories are left alone."""
    pid = dead_pid()
    directory = os.path.dirname(path)
    if kind == "other target":
        keep = temp_name(path, pid, target="ckpt.nsb.old")
    elif kind == "other host":
        keep = temp_name(path, pid, tag="12345678")
    elif kind == "not a temp name":
        keep = temp_name(path, pid) + "-extra"
        os.rename(keep[:-len("-extra")], keep)
    else:
        keep = os.path.join(directory, f"{atomic.temp_prefix('ckpt.nsb', atomic.host_tag())}"
                                       f"{pid}-0badc0de")
        os.mkdir(keep)
    namedschema.save(np.zeros(3), path)
    assert os.path.exists(keep)
    assert namedschema.load(path).shape == (3,)


def test_long_target_name_gets_a_short_unique_temp_prefix(tmp_path):
    """A target name near the 255-byte limit saves; its temp prefix is short and its own."""
    long_a = str(tmp_path / ("a" * 250))
    long_b = str(tmp_path / ("a" * 249 + "b"))
    namedschema.save(np.arange(3), long_a)
    namedschema.save(np.arange(4), long_b)
    assert namedschema.load(long_a).tolist() == [0, 1, 2]
    tag = atomic.host_tag()
    prefix_a = atomic.temp_prefix("a" * 250, tag)
    assert len(prefix_a) < 100 and prefix_a != atomic.temp_prefix("a" * 249 + "b", tag)
    stale = temp_name(long_a, dead_pid())
    namedschema.save(np.arange(3), long_b)
    assert os.path.exists(stale)  # another target's file
    namedschema.save(np.arange(3), long_a)
    assert not os.path.exists(stale)
