"""``save(..., background=True)``: snapshot semantics, handles, errors, order, shared memory."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import resource
import signal
import threading
import time

import numpy as np
import pytest

import namedschema
from namedschema import BackgroundSave, BackgroundSaveError
from tests.helpers import run_fresh


@pytest.mark.slow
@pytest.mark.parametrize("incremental", [False, True])
def test_writes_after_the_return_do_not_reach_the_file(tmp_path, incremental):
    path = tmp_path / "c.nsb"
    buf = np.arange(1 << 20, dtype=np.float64)
    namedschema.save({"buf": buf}, path, incremental=incremental)
    buf[10:20] = -1.0
    expected = buf.copy()
    handle = namedschema.save({"buf": buf}, path, incremental=incremental, background=True)
    assert isinstance(handle, BackgroundSave)
    buf[:] = 7.0                     # the program goes on writing while the save runs
    record = handle.wait()
    assert handle.done() and handle.stall >= 0 and handle.ended >= handle.started
    if incremental:
        assert record.kind == "incremental" and 0 < record.bytes_written < buf.nbytes
    else:
        assert record is None
    np.testing.assert_array_equal(namedschema.load(path, verify=True)["buf"], expected)


def test_torch_tensors_are_snapshotted_too(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "t.nsb"
    weights = torch.arange(4096, dtype=torch.float32)
    handle = namedschema.save({"w": weights}, path, background=True)
    weights.add_(1.0)               # an in-place torch op after the snapshot
    handle.wait()
    assert torch.equal(namedschema.load(path)["w"], torch.arange(4096, dtype=torch.float32))


def test_shared_memory_is_copied_aside_at_the_snapshot(tmp_path):
    """A fork does not freeze shared mappings (other processes write them): copied first."""
    path = tmp_path / "s.nsb"
    memory = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    shared = np.frombuffer(memory, np.int64)
    shared[:] = 3
    handle = namedschema.save({"shared": shared}, path, background=True)
    shared[:] = 4
    handle.wait()
    assert (namedschema.load(path, verify=True)["shared"] == 3).all()


@contextlib.contextmanager
def _small_files():
    """Files written by processes forked meanwhile fail past 64 KiB (EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


FORKED = 1 << 21   # float64s: 16 MiB, above background.SMALL_STATE: a snapshot child writes


def _failing_save(path):
    with _small_files():        # the writer inherits the limit; this process gets it back
        return namedschema.save({"a": np.zeros(FORKED)}, path, background=True)


def test_an_error_is_raised_by_wait_once(tmp_path):
    path = tmp_path / "e.nsb"
    handle = _failing_save(path)
    with pytest.raises(OSError, match="too large") as info:
        handle.wait()
    assert info.value.errno == errno.EFBIG
    assert any("background save" in note for note in info.value.__notes__)
    assert handle.done() and handle.wait() is None
    assert os.listdir(tmp_path) == []          # nothing left behind


def test_an_error_not_waited_for_is_raised_by_the_next_save(tmp_path):
    path = tmp_path / "e.nsb"
    _failing_save(path)
    with pytest.raises(OSError, match="too large"):
        namedschema.save({"a": np.zeros(8)}, path)
    namedschema.save({"a": np.ones(8)}, path)            # reported once: this one works
    assert (namedschema.load(path)["a"] == 1).all()


@pytest.mark.subprocess
def test_an_error_never_waited_for_is_printed_at_exit(tmp_path):
    path = tmp_path / "e.nsb"
    proc = run_fresh(f"""
        import resource, numpy as np, namedschema
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))
        namedschema.save({{"a": np.zeros(1 << 21)}}, {str(path)!r}, background=True)
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        print("main done", flush=True)
    """, check=False)
    err = proc.stderr.decode()
    assert proc.stdout.decode().strip() == "main done"
    assert "background save" in err and "File too large" in err, err


@pytest.mark.subprocess
def test_exit_waits_for_a_running_background_save(tmp_path):
    path = tmp_path / "exit.nsb"
    run_fresh(f"""
        import numpy as np, namedschema
        namedschema.save({{"a": np.arange(1 << 22, dtype=np.float64)}}, {str(path)!r},
                         background=True)
    """)
    assert namedschema.load(path, verify=True)["a"][-1] == (1 << 22) - 1


@pytest.mark.slow
def test_a_killed_writer_is_an_error_and_the_old_checkpoint_stays(tmp_path):
    path = tmp_path / "k.nsb"
    namedschema.save({"a": np.zeros(16)}, path)
    big = np.ones(1 << 23, dtype=np.float64)          # 64 MiB: still writing when killed
    handle = namedschema.save({"a": big}, path, background=True)
    os.kill(handle.pid, signal.SIGKILL)
    with pytest.raises(BackgroundSaveError, match="killed by signal 9"):
        handle.wait()
    assert (namedschema.load(path, verify=True)["a"] == 0).all()
    namedschema.save({"a": np.ones(4)}, path)          # removes the killed writer's temp file
    assert sorted(os.listdir(tmp_path)) == ["k.nsb"]


@pytest.mark.slow
def test_wait_with_a_timeout(tmp_path):
    path = tmp_path / "w.nsb"
    handle = namedschema.save({"a": np.ones(1 << 25)}, path, background=True)
    os.kill(handle.pid, signal.SIGSTOP)
    try:
        with pytest.raises(TimeoutError):
            handle.wait(timeout=0.05)
        assert not handle.done()
    finally:
        os.kill(handle.pid, signal.SIGCONT)
    handle.wait()


@pytest.mark.slow
@pytest.mark.parametrize("incremental", [False, True])
def test_saves_of_one_path_run_one_after_the_other(tmp_path, incremental):
    path = tmp_path / "order.nsb"
    handles: list = []
    states: list = []
    lock = threading.Lock()

    def saver(k):
        for j in range(3):
            value = 10 * k + j
            arr = np.full(1 << 18, value, np.float64)
            with lock:   # the order of snapshots is the order of the handles
                states.append(value)
                handles.append(namedschema.save({"a": arr}, path, incremental=incremental,
                                                background=True))

    threads = [threading.Thread(target=saver, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for h in handles:
        h.wait()
    spans = sorted((h.started, h.ended) for h in handles)
    for (_s0, e0), (s1, _e1) in zip(spans, spans[1:], strict=False):
        assert e0 <= s1, "two background saves of one path overlapped"
    assert (namedschema.load(path, verify=True)["a"] == states[-1]).all()


@pytest.mark.slow
def test_a_plain_save_waits_for_the_background_one(tmp_path):
    path = tmp_path / "p.nsb"
    handle = namedschema.save({"a": np.zeros(1 << 24)}, path, background=True)
    namedschema.save({"a": np.ones(4)}, path)
    assert handle.done()
    assert (namedschema.load(path)["a"] == 1).all()


@pytest.mark.slow
def test_the_caller_is_held_for_the_snapshot_only(tmp_path):
    path = tmp_path / "f.nsb"
    big = np.ones(1 << 24, dtype=np.float64)         # 128 MiB
    began = time.perf_counter()
    handle = namedschema.save({"a": big}, path, background=True)
    returned = time.perf_counter() - began
    handle.wait()
    assert handle.ended - began > returned           # the writing went on after the return


@pytest.mark.slow
def test_a_program_that_ignores_sigchld_still_gets_the_result(tmp_path):
    """With SIGCHLD ignored the kernel reaps the writer: its report still counts."""
    path = tmp_path / "c.nsb"
    old = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        handle = namedschema.save({"a": np.arange(FORKED)}, path, incremental=True,
                                  background=True)
        assert handle.pid is not None and handle.wait().kind == "full"
    finally:
        signal.signal(signal.SIGCHLD, old)
    assert (namedschema.load(path, verify=True)["a"] == np.arange(FORKED)).all()
