"""The background end of an incremental save (sync the file, remove the journal, unlock).

It runs on a non-daemon thread: the interpreter's exit waits for it (the journal is gone
after a script's last save), and so does a multiprocessing worker's (which ends with
``os._exit``, no atexit hooks); a fork child never waits for a finishing thread it does not
have.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers import run_fresh

SLOW_SYNC = r"""
import os, sys, time
import numpy as np
import namedschema
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _journal as journal

real = os.fdatasync
def slow(fd):            # the finishing thread's sync takes a while
    time.sleep(float(os.environ.get("SLOW", "1.0")))
    real(fd)
os.fdatasync = slow
path = sys.argv[1] if len(sys.argv) > 1 else {path!r}
a = np.zeros(1 << 18)
namedschema.save({{"a": a}}, path, incremental=True)
incremental.wait(path)
a[5] = 7
namedschema.save({{"a": a}}, path, incremental=True)
assert namedschema.inspect(path).last_save.kind == "incremental"
assert os.path.exists(journal.journal_path(path))   # still finishing
"""


@pytest.mark.subprocess
def test_the_interpreter_exit_waits_for_the_last_save_to_finish(tmp_path):
    path = tmp_path / "c.nsb"
    run_fresh(SLOW_SYNC.format(path=str(path)) + "print('exiting')\n")
    from namedschema.checkpoint import _journal as journal
    assert not (tmp_path / journal.journal_path(str(path))).exists()
    import namedschema
    assert namedschema.load(path)["a"][5] == 7


@pytest.mark.subprocess
@pytest.mark.parametrize("waits", ["wait", "save"])
def test_a_fork_child_does_not_wait_for_its_parents_finishing_save(tmp_path, waits):
    """The child has no finishing thread: ``wait`` returns at once (before, the thread
    was marked stopped by ``threading`` at the fork); a save in the child works."""
    path = tmp_path / "c.nsb"
    code = SLOW_SYNC.format(path=str(path)) + rf"""
began = time.monotonic()
pid = os.fork()
if pid == 0:
    os.fdatasync = real
    try:
        if {waits!r} == "wait":
            incremental.wait(path)
        else:
            namedschema.save({{"a": np.ones(8)}}, path + ".child", incremental=True)
            assert namedschema.load(path + ".child")["a"][0] == 1
        os._exit(0 if time.monotonic() - began < 4 else 3)
    except BaseException:
        os._exit(2)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
incremental.wait(path)
assert not os.path.exists(journal.journal_path(path))
"""
    run_fresh(code, env={"SLOW": "5"})


MP_WORKER = r"""
import multiprocessing as mp, os, sys, time
import numpy as np
import namedschema
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _journal as journal

def work(path):
    real = os.fdatasync
    def slow(fd):            # the finishing thread's sync takes a while
        time.sleep(0.5)
        real(fd)
    os.fdatasync = slow
    a = np.zeros(1 << 18)
    namedschema.save({{"a": a}}, path, incremental=True)
    incremental.wait(path)
    a[5] = 7
    namedschema.save({{"a": a}}, path, incremental=True)
    assert namedschema.inspect(path).last_save.kind == "incremental"

path = {path!r}
worker = mp.get_context("fork").Process(target=work, args=(path,))
worker.start()
worker.join()
assert worker.exitcode == 0, worker.exitcode
print("journal left:", os.path.exists(journal.journal_path(path)))
os.chmod(path, 0o444)                # a read-only reader (an evaluator) of the result
print("loaded:", namedschema.load(path)["a"][5])
"""


@pytest.mark.slow
def test_a_multiprocessing_worker_finishes_its_last_save_before_it_ends(tmp_path):
    """A fork-context worker ends with os._exit (no atexit hooks), after Python's thread
    shutdown: its last incremental save is finished (synced, journal removed), so a
    read-only load of the file works. (With the finishing work on a bare thread the
    journal was left behind and a read-only load raised FormatError.)"""
    path = str(tmp_path / "w.nsb")
    proc = run_fresh(MP_WORKER.format(path=path), check=False)
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    assert "journal left: False" in out and "loaded: 7.0" in out, out


def test_in_place_writes_are_the_finishing_threads_and_readers_wait_for_them(tmp_path,
                                                                              monkeypatch):
    """A save returns once its journal is committed; the changed ranges are written in
    place by the finishing thread (issue 33: ~20 us a scattered range in the kernel), and
    a load that comes meanwhile waits for them: it reads the new state, whole."""
    import fcntl
    import threading

    import numpy as np

    import namedschema
    from namedschema.checkpoint import _incremental as incremental
    from namedschema.checkpoint import _journal as journal
    from namedschema.checkpoint import _tracking as tracking

    path = str(tmp_path / "c.nsb")
    a = np.arange(1 << 18, dtype=np.float64)
    namedschema.save({"a": a}, path, incremental=True)
    incremental.wait(path)
    a[::4096] = -1.0                       # scattered changes: many ranges
    release, writers = threading.Event(), []
    real = tracking.write_in_place

    def held(fd, size, pieces):
        writers.append((threading.current_thread(), release.wait(60)))
        real(fd, size, pieces)
    monkeypatch.setattr(tracking, "write_in_place", held)
    namedschema.save({"a": a}, path, incremental=True)
    assert namedschema.inspect(path).last_save.kind == "incremental"
    assert os.path.exists(journal.journal_path(path))          # committed, not finished

    reached, got = threading.Event(), []
    real_flock, real_wait = fcntl.flock, incremental.wait

    def flock(fd, how):
        if threading.current_thread() is loader:
            reached.set()   # about to wait for the finishing thread's lock (another process)
        return real_flock(fd, how)

    def wait(p):
        if threading.current_thread() is loader:
            reached.set()   # about to wait for the finishing thread (this process)
        return real_wait(p)
    monkeypatch.setattr(fcntl, "flock", flock)
    monkeypatch.setattr(incremental, "wait", wait)
    loader = threading.Thread(target=lambda: got.append(
        namedschema.load(path, verify=True)["a"].copy()))
    loader.start()
    assert reached.wait(60)
    release.set()
    loader.join(60)
    incremental.wait(path)
    assert len(writers) == 1
    assert writers[0] == (writers[0][0], True) and writers[0][0] is not threading.main_thread()
    assert len(got) == 1 and np.array_equal(got[0], a)
    assert not os.path.exists(journal.journal_path(path))
