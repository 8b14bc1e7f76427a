"""Background saves, issue 34 and 30: fork children, shared memory, small states.

* A process forked while a background save is in flight (an evaluator, a
  ``multiprocessing`` worker) loads, saves and exits normally: it has no
  background save of its own (the parent's handle used to hang its load and
  its exit).
* Background incremental saves of shared memory (which a fork does not
  freeze) write what changed, not the whole checkpoint each time.
* Small states are copied aside and written by the writer thread (no fork),
  with the same snapshot, order and error semantics as the other routes.
"""

from __future__ import annotations

import errno
import mmap
import os

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _background as background
from namedschema.checkpoint import _write as writer
from tests.helpers import run_fresh

FORK_CHILD = r"""
import os, signal, sys, threading, time
import numpy as np
import namedschema
from namedschema.checkpoint import _write as writer

route, path, other = sys.argv[1:4] if len(sys.argv) > 3 else ({route!r}, {path!r}, {other!r})
parent, evaluator = os.getpid(), False
release = threading.Event()
real_write = writer.write

def held_write(*args, **kwargs):
    # The parent's background writer (its thread, or its snapshot child) stays in
    # flight until the evaluator is done; the evaluator's own saves are not held.
    if not evaluator and (os.getpid() != parent
                          or threading.current_thread().name == "namedschema-background-save"):
        if os.getpid() != parent:
            while True:
                time.sleep(3600)          # the snapshot child: killed below
        release.wait()
    return real_write(*args, **kwargs)

writer.write = held_write
n = 1 << 21 if route == "fork" else 1 << 10        # float64s: 16 MiB (fork) or 8 KiB
namedschema.save({{"a": np.zeros(n), "step": 1}}, path)
handle = namedschema.save({{"a": np.ones(n), "step": 2}}, path, background=True)
assert (handle.pid is not None) == (route == "fork") and not handle.done()

pid = os.fork()
if pid == 0:                                       # the evaluator
    evaluator = True
    back = namedschema.load(path)                  # the file as the writer left it
    assert back["step"] == 1, back["step"]
    namedschema.save(back, other, background=True).wait()
    back["step"] = 3
    namedschema.save(back, other, incremental=True, background=True)
    assert namedschema.load(other)["step"] == 3   # waits for its own save only
    sys.exit(0)                                    # atexit: its own saves only

deadline = time.monotonic() + 120                  # (a hang, not a timing)
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if time.monotonic() > deadline:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print("the fork child hung", flush=True)
        sys.exit(3)
    time.sleep(0.05)
assert os.waitstatus_to_exitcode(status) == 0, status
if route == "fork":
    os.kill(handle.pid, signal.SIGKILL)
    try:
        handle.wait()
    except namedschema.BackgroundSaveError:
        pass
else:
    release.set()
    handle.wait()
    assert namedschema.load(path)["step"] == 2
print("ok", flush=True)
"""


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize("route", ["fork", "thread"])
def test_a_fork_child_of_a_process_saving_in_the_background_works(tmp_path, route):
    code = FORK_CHILD.format(route=route, path=str(tmp_path / "run.nsb"),
                             other=str(tmp_path / "eval.nsb"))
    proc = run_fresh(code, check=False, timeout=300)
    out = proc.stdout.decode()
    assert proc.returncode == 0 and out.strip() == "ok", out + proc.stderr.decode()[-3000:]


@pytest.mark.slow
def test_background_incremental_saves_of_shared_memory_write_what_changed(tmp_path):
    path = tmp_path / "shared.nsb"
    memory = mmap.mmap(-1, 16 << 20)          # MAP_SHARED: a fork does not freeze it
    shared = np.frombuffer(memory, np.uint8)
    shared[:] = 1
    state = {"shared": shared, "step": 0}
    first = namedschema.save(state, path, incremental=True, background=True).wait()
    assert first.kind == "full"
    for step in range(1, 4):
        shared[step * 40_000:step * 40_000 + 500] = step + 1
        state["step"] = step
        record = namedschema.save(state, path, incremental=True, background=True).wait()
        assert record.kind == "incremental", record
        assert record.bytes_written < 64 * 1024, record
        back = namedschema.load(path, verify=True)
        assert back["step"] == step
        np.testing.assert_array_equal(back["shared"], shared)


def test_a_small_state_is_copied_aside_and_written_by_a_thread(tmp_path):
    path = tmp_path / "small.nsb"
    big = np.arange(4096, dtype=np.float64)
    state = {"w": np.arange(100, dtype=np.float32), "sparse": big[::3], "big": big,
             "step": 5, "note": "x"}
    expect = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    handle = namedschema.save(state, path, background=True)
    assert handle.pid is None                  # no fork for a small state
    big[:] = -1                                # after the return: never in the file
    state["w"][:] = -1
    assert handle.wait() is None
    back = namedschema.load(path, verify=True)
    for key, value in expect.items():
        np.testing.assert_array_equal(back[key], value)


def test_small_incremental_background_saves_write_what_changed(tmp_path):
    path = tmp_path / "small_inc.nsb"
    rows = np.zeros((2048, 64), np.float32)        # 512 KiB
    namedschema.save({"rows": rows}, path, incremental=True, background=True).wait()
    rows[7] = 3.0
    handle = namedschema.save({"rows": rows}, path, incremental=True, background=True)
    rows[8] = 4.0                                  # after the return
    record = handle.wait()
    assert handle.pid is None and record.kind == "incremental", record
    assert record.bytes_written < 64 * 1024
    back = namedschema.load(path, verify=True)["rows"]
    assert (back[7] == 3).all() and (back[8] == 0).all()


def test_an_error_of_the_writer_thread_is_raised_by_wait_or_the_next_save(tmp_path,
                                                                          monkeypatch):
    path = tmp_path / "full.nsb"
    namedschema.save({"a": np.zeros(8)}, path)

    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "write", no_space)
    handle = namedschema.save({"a": np.ones(8)}, path, background=True)
    with pytest.raises(OSError, match="No space") as info:
        handle.wait()
    assert any("background save" in note for note in info.value.__notes__)
    assert handle.wait() is None                    # raised once
    namedschema.save({"a": np.ones(8)}, path, background=True)
    with pytest.raises(OSError, match="No space") as info:   # not waited for: the next
        namedschema.save({"a": np.full(8, 2.0)}, path)        # save raises it
    assert any("background save" in note for note in info.value.__notes__)
    monkeypatch.undo()
    namedschema.save({"a": np.full(8, 2.0)}, path)
    assert (namedschema.load(path, verify=True)["a"] == 2).all()


def test_the_small_state_limit_is_a_few_mib():
    assert 2**20 < background.SMALL_STATE <= 16 * 2**20
    assert os.path.basename(background.__file__) == "_background.py"


WRITER_AT_EXIT = r"""
import atexit, sys, threading
import numpy as np

def after_namedschema_exit_hook():
    # Registered before namedschema is imported, so it runs after namedschema's own
    # exit hook (atexit runs hooks last-in first-out).
    alive = [t.name for t in threading.enumerate() if t.name.startswith("namedschema")]
    print("alive at exit:", alive)
    sys.stdout.flush()

atexit.register(after_namedschema_exit_hook)
import namedschema
torch = None
try:
    import torch
except ImportError:
    pass
path = sys.argv[1] if len(sys.argv) > 1 else {path!r}
for step in range(5):
    state = {{"w": np.full(8192, step, np.float32), "step": step}}
    if torch is not None:
        state["t"] = torch.full((64,), float(step))
    namedschema.save(state, path, background=True, allow_pickle=torch is not None,
                     **{options!r})
"""


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, {"incremental": True}, {"compression": "zstd"}],
                         ids=["plain", "incremental", "zstd"])
def test_the_writer_thread_is_ended_before_the_interpreter_exits(tmp_path, options):
    """A run whose last checkpoint was written by the writer thread exits with status 0,
    and no namedschema thread is left running into interpreter shutdown: the daemon
    thread, ended by the interpreter while dropping the last save's torch tensors,
    aborted the process ("terminate called without an active exception", status 134)
    in 6 of 7 SB3 runs on a busy machine. The last save, still being written when the
    interpreter began to exit, is written whole (its checksums once failed to start:
    concurrent.futures takes no new work at exit)."""
    if "compression" in options:
        pytest.importorskip("zstandard")
    path = tmp_path / "run.nsb"
    proc = run_fresh(WRITER_AT_EXIT.format(path=str(path), options=options), check=False)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, err[-3000:]
    assert "alive at exit: []" in out, out + err[-3000:]
    assert "terminate called" not in err
    assert namedschema.load(path, allow_pickle=True)["step"] == 4
