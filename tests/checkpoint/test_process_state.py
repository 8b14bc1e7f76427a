"""Process-wide state lives in one place (namedschema._process): one lock, one fork hook,
one exit hook, and callbacks that run in a written order.

A fork child of a process that saved (incrementally, in the background) runs every
registered reset, in FORK_ORDER, and starts clean: no save in flight, no baseline, no
writer thread, a lock of its own even when one of the parent's threads held the
parent's at the fork; its own saves then load back exactly.
"""

from __future__ import annotations

import os

import pytest

from namedschema import _process
from tests.helpers import run_fresh

FORK_CHILD = """
import os, sys, threading
import numpy as np
import namedschema
from namedschema import _process
from namedschema.buffer import shared_memory
from namedschema.checkpoint import _background, _incremental, _squeezed, _tracking, _write

path, other = sys.argv[1:3] if len(sys.argv) > 2 else ({path!r}, {other!r})
forks, exits = _process.registered()
assert forks == _process.FORK_ORDER, forks
assert exits == ("checkpoint._background:background", "checkpoint._incremental"), exits

data = {{"a": np.arange(100_000, dtype=np.float64), "step": 1}}
namedschema.save(data, path, incremental=True)
data["a"][:10] = -1
data["step"] = 2
namedschema.save(data, path, incremental=True, background=True).wait()
# The save returned once its journal was committed; its in-place writes finish in a thread
# that records the baseline under the lock held below (and holds the file's lock until
# then, which the child's load waits for): let it finish first.
_incremental.wait(path)
assert _tracking._baselines and _write._latest and _write._path_locks

ran = []
for name, reset in list(_process._fork.items()):
    def noted(name=name, reset=reset):
        ran.append(name)
        reset()
    _process._fork[name] = noted

# Another thread holds the one lock while the process forks (and until the child is done).
held, done = threading.Event(), threading.Event()
def hold():
    with _process.LOCK:
        held.set()
        done.wait()
holder = threading.Thread(target=hold)
holder.start()
held.wait()

pid = os.fork()
if pid == 0:
    try:
        assert tuple(ran) == _process.FORK_ORDER, ran
        assert _process.LOCK.acquire(blocking=False)
        _process.LOCK.release()
        assert not _write._latest and not _write._path_locks
        assert not _tracking._baselines
        assert not _incremental._pending and not _incremental._locked_fds
        assert _background._writer is None
        assert all(v == [] for v in _tracking._pending.values())
        back = namedschema.load(path)
        assert back["step"] == 2 and np.array_equal(back["a"], data["a"])
        back["a"][50:60] = 7
        back["step"] = 3
        namedschema.save(back, other, incremental=True)
        back["a"][70] = 8
        namedschema.save(back, other, incremental=True, background=True).wait()
        again = namedschema.load(other)
        assert again["step"] == 3 and np.array_equal(again["a"], back["a"])
    except BaseException:
        import traceback
        traceback.print_exc()
        os._exit(1)
    os._exit(0)
_, status = os.waitpid(pid, 0)
done.set()
holder.join()
assert os.waitstatus_to_exitcode(status) == 0, status
assert namedschema.load(path)["step"] == 2      # the parent's file is its own
print("ok", flush=True)
"""


@pytest.mark.subprocess
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_child_runs_every_reset_in_order_and_saves_exactly(tmp_path):
    code = FORK_CHILD.format(path=str(tmp_path / "run.nsb"), other=str(tmp_path / "child.nsb"))
    proc = run_fresh(code, check=False, timeout=120)
    out = proc.stdout.decode()
    assert proc.returncode == 0 and out.strip() == "ok", out + proc.stderr.decode()[-3000:]


def test_only_names_in_the_written_order_register():
    with pytest.raises(ValueError, match="'checkpoint.elsewhere' is not in the order"):
        _process.on_fork_child("checkpoint.elsewhere", lambda: None)
    with pytest.raises(ValueError, match="'training.other' is not in the order"):
        _process.at_exit("training.other", lambda: None)


def test_a_failing_callback_does_not_stop_the_others(capsys):
    ran = []

    def fails():
        raise RuntimeError("broken reset")

    table = {"b": lambda: ran.append("b"), "a": fails, "c": lambda: ran.append("c")}
    _process._run(table, ("a", "b", "c"), "fork-child")
    assert ran == ["b", "c"]
    assert "the fork-child callback of a failed" in capsys.readouterr().err
