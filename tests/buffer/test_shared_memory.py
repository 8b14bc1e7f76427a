"""Shared-memory buffers across processes: start methods, run-time hand-off, crashes, files."""

import gc
import multiprocessing as mp
import os
import pickle
import signal

import numpy as np
import pytest

from namedschema import namedtuple
from namedschema.buffer import buffer_from_example, is_shared_memory, np_mp_array, to_shared_memory
from namedschema.buffer import shared_memory as _shared_memory
from tests.helpers import run_fresh

pytestmark = pytest.mark.subprocess

METHODS = ["fork", "spawn", "forkserver"]
Step = namedtuple("Step", "obs reward done info")
TIMEOUT = 60


def make_buffer(T=4):
    """A small Atari-like shared buffer: uint8 frames, reward, done, a None field."""
    ex = Step(np.zeros((8, 8), np.uint8), np.float32(0), False, None)
    return buffer_from_example(ex, (T,), share_memory=True)


def segment_inode(array):
    """Inode of the memfd holding ``array``."""
    return _shared_memory._segment_of(array)[0].inode[1]


def holders(inode=None, name=None):
    """Pids of every process that maps or has open a memfd with this inode or name."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    parts = line.split(maxsplit=5)
                    if len(parts) == 6 and "memfd:" in parts[5] and (
                            (inode is not None and int(parts[4]) == inode)
                            or (name is not None and f"memfd:{name} " in parts[5])):
                        found.add(int(pid))
            for fd in os.listdir(f"/proc/{pid}/fd"):
                path = f"/proc/{pid}/fd/{fd}"
                link = os.readlink(path)
                if not link.startswith("/memfd:"):
                    continue
                if (name is not None and link.startswith(f"/memfd:{name} ")) or (
                        inode is not None and os.stat(path).st_ino == inode):
                    found.add(int(pid))
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            continue  # the process ended or is not ours to look at
    return found


def dev_shm():
    """Names in the OS's POSIX shared-memory listing."""
    return set(os.listdir("/dev/shm"))


# --- workers (module level, so spawn and forkserver children can import them) ---

def write_slot(buf, t, results):
    buf.obs[t] = t + 10
    buf.reward[t] = t + 0.5
    results.put((t, is_shared_memory(buf.obs), type(buf.obs) is np.ndarray))


def queue_worker(inbox, outbox):
    buf = inbox.get(timeout=TIMEOUT)
    buf.obs[1] = 77
    buf.done[1] = True
    outbox.put((is_shared_memory(buf.obs), type(buf).__name__))
    # Now the child makes a buffer of its own and sends it the other way.
    mine = np_mp_array(3, np.int64)
    outbox.put(mine)
    assert inbox.get(timeout=TIMEOUT) == "written"
    outbox.put(mine.tolist())


def pipe_worker(conn):
    buf = conn.recv()
    buf.reward[:] = 2.5
    conn.send(is_shared_memory(buf.reward))
    conn.close()


def crash_worker(inbox, outbox, how):
    buf = inbox.get(timeout=TIMEOUT)
    buf.obs[0] = 9
    if how == "exit":
        os._exit(1)
    outbox.put("written")
    signal.pause()  # wait for SIGKILL from the parent


@pytest.mark.parametrize("method", METHODS)
def test_shared_at_process_start(method):
    """Children started with the buffer as argument write into the parent's memory."""
    ctx = mp.get_context(method)
    buf = make_buffer()
    results = ctx.Queue()
    procs = [ctx.Process(target=write_slot, args=(buf, t, results)) for t in (1, 3)]
    for p in procs:
        p.start()
    reports = sorted(results.get(timeout=TIMEOUT) for _ in procs)
    for p in procs:
        p.join(TIMEOUT)
        assert p.exitcode == 0
    assert reports == [(1, True, True), (3, True, True)]
    assert buf.obs[1].min() == 11 and buf.obs[3].max() == 13 and not buf.obs[0].any()
    assert buf.reward.tolist() == [0, 1.5, 0, 3.5]


@pytest.mark.parametrize("method", METHODS)
def test_queue_hand_off_both_ways(method):
    """A buffer made after the child started goes through a Queue and stays shared."""
    ctx = mp.get_context(method)
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=queue_worker, args=(inbox, outbox))
    p.start()
    buf = make_buffer()
    inbox.put(buf)
    assert outbox.get(timeout=TIMEOUT) == (True, "Step")
    assert buf.obs[1].min() == 77 and buf.done.tolist() == [False, True, False, False]
    theirs = outbox.get(timeout=TIMEOUT)
    assert is_shared_memory(theirs)
    theirs[:] = [4, 5, 6]
    inbox.put("written")
    assert outbox.get(timeout=TIMEOUT) == [4, 5, 6]
    p.join(TIMEOUT)
    assert p.exitcode == 0


@pytest.mark.parametrize("method", METHODS)
def test_pipe_hand_off(method):
    """A buffer sent through a Pipe at run time is written by the child in place."""
    ctx = mp.get_context(method)
    ours, theirs = ctx.Pipe()
    p = ctx.Process(target=pipe_worker, args=(theirs,))
    p.start()
    buf = make_buffer()
    ours.send(buf[1:3])  # a view: only slots 1 and 2
    assert ours.recv() is True
    p.join(TIMEOUT)
    assert p.exitcode == 0
    assert buf.reward.tolist() == [0, 2.5, 2.5, 0]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("how", ["sigkill", "exit"])
def test_crashing_child_leaves_no_segment(method, how):
    """After a child dies (SIGKILL or os._exit) and the parent drops the buffer, no one holds it."""
    before = dev_shm()
    ctx = mp.get_context(method)
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=crash_worker, args=(inbox, outbox, how))
    p.start()
    buf = make_buffer()
    inode = segment_inode(buf.obs)
    inbox.put(buf)
    if how == "sigkill":
        assert outbox.get(timeout=TIMEOUT) == "written"
        os.kill(p.pid, signal.SIGKILL)
    p.join(TIMEOUT)
    assert p.exitcode == (-signal.SIGKILL if how == "sigkill" else 1)
    assert buf.obs[0].min() == 9
    assert holders(inode=inode) == {os.getpid()}
    del buf
    gc.collect()
    assert holders(inode=inode) == set()
    assert not {n for n in dev_shm() - before if "namedschema" in n or "psm_" in n}


@pytest.mark.parametrize("method", METHODS)
def test_no_segment_left_after_normal_exit(method):
    """A whole program with worker processes exits leaving no memfd of its own anywhere."""
    before = dev_shm()
    proc = run_fresh(f"""
        import multiprocessing as mp, os, numpy as np
        from tests.buffer.test_shared_memory import make_buffer, queue_worker
        if __name__ == "__main__":
            ctx = mp.get_context({method!r})
            inbox, outbox = ctx.Queue(), ctx.Queue()
            p = ctx.Process(target=queue_worker, args=(inbox, outbox))
            p.start()
            buf = make_buffer()
            inbox.put(buf)
            assert outbox.get(timeout=60) == (True, "Step")
            theirs = outbox.get(timeout=60)
            inbox.put("written")
            outbox.get(timeout=60)
            p.join(60)
            assert p.exitcode == 0 and buf.obs[1].min() == 77
            print(os.getpid(), p.pid)
        """)
    parent, child = proc.stdout.split()
    # Both processes named their memfds after themselves; none may survive them.
    assert holders(name=f"namedschema-{parent.decode()}") == set()
    assert holders(name=f"namedschema-{child.decode()}") == set()
    assert not {n for n in dev_shm() - before if "namedschema" in n or "psm_" in n}


def test_checkpoint_file_loads_fresh_and_restores(tmp_path):
    """A shared buffer pickled to a file loads elsewhere as plain arrays and re-shares."""
    buf = make_buffer()
    buf.obs[2] = 5
    buf.reward[:] = [1, 2, 3, 4]
    path = tmp_path / "buf.pkl"
    with open(path, "wb") as f:
        pickle.dump(buf, f, protocol=4)
    data = path.read_bytes()
    assert b"_rebuild_segment" not in data and b"DupFd" not in data
    run_fresh(f"""
        import pickle
        from multiprocessing.reduction import ForkingPickler
        import numpy as np
        from namedschema.buffer import is_shared_memory, to_shared_memory
        with open({str(path)!r}, "rb") as f:
            buf = pickle.load(f)
        assert type(buf.obs) is np.ndarray and not is_shared_memory(buf.obs)
        assert buf.obs[2].min() == 5 and buf.reward.tolist() == [1, 2, 3, 4]
        assert buf.info is None
        shared = to_shared_memory(buf)
        assert type(shared) is type(buf) and is_shared_memory(shared.obs)
        alias = ForkingPickler.loads(ForkingPickler.dumps(shared))
        alias.reward[0] = 42
        assert shared.reward[0] == 42 and buf.reward[0] == 1
        """)
    assert to_shared_memory(buf).obs[2].max() == 5


def test_a_segment_collected_while_the_registry_lock_is_held_does_not_deadlock():
    """A weakref callback runs inside any allocation, also one made under the registry lock.

    It froze a CI run: registering one segment triggered a collection whose callback for
    another segment waited for the lock its own thread held.
    """
    import threading

    def collect_under_lock():
        a = np_mp_array((16,), np.uint8)
        with _shared_memory._lock:
            del a            # the segment's last reference: its callback runs here
            gc.collect()
        b = np_mp_array((16,), np.uint8)  # the queued removal is applied
        assert is_shared_memory(b)

    worker = threading.Thread(target=collect_under_lock, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "the registry deadlocked on a weakref callback"
