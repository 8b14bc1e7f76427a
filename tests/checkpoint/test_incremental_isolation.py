"""Incremental saves leave the program's memory its own, whatever happens to the file.

Each scenario runs in a fresh interpreter (a SIGBUS would otherwise kill the
test run), under both kinds of change tracking (write protection, and the
forced page-checksum fallback): a buffer made by ``buffer_from_example`` and a
heap array are saved in full and then incrementally (where memory used to be
remapped onto the file); then the file is changed behind the program's back:
a second process loads, edits and saves it incrementally; a fork child saves
its own edits; the file is truncated, deleted, renamed or has another
checkpoint copied over it. The memory must not change (and reading it must
not crash), and the owner's next saves must be exact (loaded with
``verify=True``, equal to memory).

Also: a save through a symbolic link in another directory, killed after the
journal's commit, is finished by a load of the real file; a committed journal
is finished by ``load`` on a full file system; a directory, a link or junk at
the journal's path is never followed, and neither breaks loads nor saves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _journal as journal
from namedschema.checkpoint import _storage as pages
from namedschema.checkpoint import _tracking as writeprotect
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.skipif(not pages.available() or os.name != "posix",
                                reason="needs Linux")

TRACKING = ["auto", "checksums"]

COMMON = r"""
import os, shutil, signal, subprocess, sys
import numpy as np
import namedschema
from namedschema.buffer import buffer_from_example
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _journal as journal
from namedschema.checkpoint import _tracking as tracking

S = namedschema.NamedArrayTupleSchema("S", "obs reward")
rng = np.random.default_rng(0)
buf = buffer_from_example(S(np.zeros((64, 64), np.uint8), np.float32(0)), 1000)
buf.obs[:] = rng.integers(0, 255, buf.obs.shape, dtype=np.uint8)
heap = np.zeros(300_000, np.float64)
obj = {"buf": buf, "heap": heap}

def train():
    rows = rng.integers(0, 1000, 20)
    buf.obs[rows] = rng.integers(0, 255, (20, 64, 64), dtype=np.uint8)
    buf.reward[rows] += 1
    heap[rng.integers(0, heap.size, 50)] += 1

def save(path):
    namedschema.save(obj, path, incremental=True)
    incremental.wait(path)

def check(path):
    back = namedschema.load(path, verify=True)
    assert np.array_equal(back["buf"].obs, buf.obs), "obs differ"
    assert np.array_equal(back["buf"].reward, buf.reward), "reward differs"
    assert np.array_equal(back["heap"], heap), "heap differs"

def snapshot():
    return buf.obs.copy(), buf.reward.copy(), heap.copy()

def unchanged(snap):
    obs, reward, h = snap
    assert np.array_equal(buf.obs, obs), f"{int((buf.obs != obs).sum())} bytes of obs changed"
    assert np.array_equal(buf.reward, reward) and np.array_equal(heap, h), "memory changed"
"""

ADVERSARY = COMMON + r"""
scenario, path = sys.argv[1], sys.argv[2]
save(path)
train()
save(path)
assert namedschema.inspect(path).last_save.kind == "incremental"
snap = snapshot()
if scenario == "second_process":
    editor = (
        "import sys, numpy as np, namedschema\n"
        "p = sys.argv[1]\n"
        "o = namedschema.load(p)\n"
        "o['buf'].obs[100:200] = 7; o['heap'][:1000] = -1\n"
        "namedschema.save(o, p, incremental=True)\n"
        "assert namedschema.inspect(p).last_save.kind == 'incremental'\n")
    subprocess.run([sys.executable, "-c", editor, path], check=True)
elif scenario == "fork_child":
    pid = os.fork()
    if pid == 0:
        try:
            buf.obs[100:200] = 7
            heap[:1000] = -1
            save(path)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
elif scenario == "truncate":
    os.truncate(path, 4096)
elif scenario == "delete":
    os.unlink(path)
elif scenario == "rename":
    os.rename(path, path + ".moved")
elif scenario == "copy_over":
    other = {"buf": S(np.full_like(buf.obs, 3), np.zeros_like(buf.reward)),
             "heap": np.ones_like(heap)}
    namedschema.save(other, path + ".other")
    shutil.copyfile(path + ".other", path)
unchanged(snap)
for _ in range(3):
    train()
    save(path)
    check(path)
print("OK")
"""


def _run(script: str, *args: str, tracking: str = "auto", timeout: float = 120):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    forced = None if tracking == "auto" else tracking   # the test-only hook, in the child
    head = ("import namedschema.checkpoint._tracking as _tracking\n"
            f"_tracking._forced = {forced!r}\n"
            f"assert {forced!r} in (None, _tracking.mode())\n")
    return subprocess.run([sys.executable, "-c", head + textwrap.dedent(script), *args],
                          env=env, capture_output=True, timeout=timeout)


@pytest.mark.subprocess
@pytest.mark.parametrize("tracking", TRACKING)
@pytest.mark.parametrize("scenario", ["second_process", "fork_child", "truncate", "delete",
                                      "rename", "copy_over"])
def test_the_file_changing_never_changes_memory(tmp_path, scenario, tracking):
    proc = _run(ADVERSARY, scenario, str(tmp_path / "ckpt.nsb"), tracking=tracking)
    assert proc.returncode == 0 and proc.stdout.strip() == b"OK", (
        f"rc={proc.returncode}\n{proc.stderr.decode()[-3000:]}")


def test_write_protection_is_available_here():
    """Our machines (Linux 6.7+, root or vm.unprivileged_userfaultfd) track by write protection.

    If this fails, incremental saves still work (page checksums) but cost a
    pass over memory: see docs/incremental.rst.
    """
    if tuple(int(x) for x in os.uname().release.split(".")[:2]) < (6, 7):
        pytest.skip("PAGEMAP_SCAN needs Linux 6.7")
    assert writeprotect.available()


def test_no_environment_variable_selects_the_tracking(monkeypatch):
    """The tracking is the best this process has; ``NAMEDSCHEMA_TRACKING`` (which once
    forced another) is ignored, and so is any other spelling of it (issue 29)."""
    from namedschema.checkpoint import _tracking as tracking
    best = "writeprotect" if writeprotect.available() else "checksums"
    assert tracking.mode() == best
    for value in ("checksums", "compare", "auto", "writeprotect"):
        monkeypatch.setenv("NAMEDSCHEMA_TRACKING", value)
        assert tracking.mode() == best


KILLED_THROUGH_LINK = COMMON + r"""
link, phase = sys.argv[1], sys.argv[2]
save(link)
train()
with open(link + ".log", "w") as f:
    f.write("")
real = tracking.write_in_place
def write_in_place(fd, size, pieces):
    if phase == "mid":
        real(fd, size, pieces[: len(pieces) // 2])
    else:
        real(fd, size, pieces)
    os.kill(os.getpid(), signal.SIGKILL)
tracking.write_in_place = write_in_place
np.save(link + ".obs.npy", buf.obs)
save(link)
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("phase", ["mid", "done"])
def test_save_through_a_symlink_killed_mid_save_loads_new_state(tmp_path, phase):
    """The journal is next to the real file, so a load of the real file finishes the save."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "links").mkdir()
    target = tmp_path / "runs" / "run3.nsb"
    link = tmp_path / "links" / "latest.nsb"
    link.symlink_to(target)
    proc = _run(KILLED_THROUGH_LINK, str(link), phase)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-3000:]
    assert os.path.exists(journal.journal_path(str(target)))
    assert journal.journal_path(str(link)) == journal.journal_path(str(target))
    assert os.path.dirname(journal.journal_path(str(link))) == str(tmp_path / "runs")
    back = namedschema.load(str(target), verify=True)
    assert np.array_equal(back["buf"].obs, np.load(str(link) + ".obs.npy"))
    assert not os.path.exists(journal.journal_path(str(target)))


DISK_FULL = COMMON + r"""
path = sys.argv[1]
obj["notes"] = {"x" * 64000}         # pickled: its block has room to grow (1/8) in the file
namedschema.save(obj, path, incremental=True, allow_pickle=True)
incremental.wait(path)
train()
obj["notes"] = {"y" * 70000}           # grows into the pickle's room
np.save(path + ".obs.npy", buf.obs)
real = journal.write
def write(*args):
    size = real(*args)               # committed: now the disk fills up
    fd = os.open(os.path.join(os.path.dirname(path), "filler"), os.O_WRONLY | os.O_CREAT)
    for chunk in (65536, 4096, 512):  # to the last page
        try:
            while True:
                os.write(fd, b"\0" * chunk)
        except OSError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)
journal.write = write
namedschema.save(obj, path, incremental=True, allow_pickle=True)
"""


@pytest.fixture
def small_fs(tmp_path):
    """A 48 MiB ext4 file system on a loop device (needs root, as in CI), else skipped."""
    where, image = tmp_path / "fs", tmp_path / "fs.img"
    where.mkdir()
    with open(image, "wb") as f:
        f.truncate(48 * 2**20)
    for command in (["mkfs.ext4", "-q", "-F", str(image)],
                    ["mount", "-o", "loop", str(image), str(where)]):
        try:
            got = subprocess.run(command, capture_output=True)
        except FileNotFoundError as exc:
            pytest.skip(f"cannot make a small file system here: {exc}")
        if got.returncode != 0:
            pytest.skip(f"cannot make a small file system here: {got.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


@pytest.mark.subprocess
def test_committed_journal_loads_on_a_full_disk(small_fs):
    """Finishing a committed journal writes only where the file already has room."""
    path = str(small_fs / "ckpt.nsb")
    proc = _run(DISK_FULL, path)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-3000:]
    assert os.path.exists(journal.journal_path(path))
    with pytest.raises(OSError), open(small_fs / "more", "wb") as f:  # the disk is really full
        f.write(b"\0" * 2**20)
        f.flush()
        os.fsync(f.fileno())
    back = namedschema.load(path, verify=True, allow_pickle=True)
    assert back["notes"] == {"y" * 70000}
    assert np.array_equal(back["buf"].obs, np.load(path + ".obs.npy"))


def _saved_twice(tmp_path):
    S = namedschema.NamedArrayTupleSchema("S", "obs reward")
    buf = S(np.zeros((200, 64, 64), np.uint8), np.zeros(200, np.float32))
    path = str(tmp_path / "ckpt.nsb")
    namedschema.save(buf, path, incremental=True)
    buf.obs[3] = 1
    return buf, path


def test_directory_at_the_journal_path_is_left_alone(tmp_path):
    buf, path = _saved_twice(tmp_path)
    jpath = journal.journal_path(path)
    os.mkdir(jpath)
    assert not namedschema.load(path, verify=True).obs[3].any()
    namedschema.save(buf, path, incremental=True)   # a full save: no journal needed
    assert np.array_equal(namedschema.load(path, verify=True).obs, buf.obs)
    assert os.path.isdir(jpath)


def test_link_at_the_journal_path_is_never_written_through(tmp_path):
    buf, path = _saved_twice(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    os.symlink(victim, journal.journal_path(path))
    namedschema.save(buf, path, incremental=True)
    namedschema.checkpoint._incremental.wait(path)
    assert victim.read_bytes() == b"precious"
    assert np.array_equal(namedschema.load(path, verify=True).obs, buf.obs)


def test_junk_at_the_journal_path_is_ignored(tmp_path):
    buf, path = _saved_twice(tmp_path)
    with open(journal.journal_path(path), "wb") as f:
        f.write(b"NSJRNL01 and then garbage")
    assert not namedschema.load(path, verify=True).obs[3].any()
    namedschema.save(buf, path, incremental=True)
    assert np.array_equal(namedschema.load(path, verify=True).obs, buf.obs)


def test_finishing_a_journal_without_space_names_what_to_free(tmp_path, monkeypatch):
    """Where a file system still refuses the journal's in-place writes, load says why."""
    import errno

    from namedschema.checkpoint import _incremental as incremental
    buf, path = _saved_twice(tmp_path)
    monkeypatch.setattr(namedschema.checkpoint._tracking, "write_in_place",
                        lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    # committed, then the finishing thread's in-place writes fail: the journal stays
    namedschema.save(buf, path, incremental=True)
    incremental.wait(path)
    monkeypatch.undo()
    assert os.path.exists(journal.journal_path(path))

    def full(*a):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(journal, "replay", full)
    with pytest.raises(namedschema.FormatError, match="free space on the file system of"):
        namedschema.load(path)
    monkeypatch.undo()
    incremental.wait(path)
    assert np.array_equal(namedschema.load(path, verify=True).obs, buf.obs)


@pytest.mark.slow
@pytest.mark.parametrize("tracking", TRACKING)
def test_a_failed_save_loses_no_write(tmp_path, monkeypatch, tracking):
    """A save that fails after its scan re-armed tracking: the next one still sees those writes."""
    monkeypatch.setattr(namedschema.checkpoint._tracking, "_forced",
                        None if tracking == "auto" else tracking)
    from namedschema.buffer import buffer_from_example
    S = namedschema.NamedArrayTupleSchema("S", "obs reward")
    buf = buffer_from_example(S(np.zeros((64, 64), np.uint8), np.float32(0)), 1000)
    path = str(tmp_path / "ckpt.nsb")
    namedschema.save(buf, path, incremental=True)
    namedschema.save(buf, path, incremental=True)
    buf.obs[10:20] = 5

    def refuse(*a):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(journal, "write", refuse)
    with pytest.raises(OSError):
        namedschema.save(buf, path, incremental=True)
    monkeypatch.undo()
    monkeypatch.setattr(namedschema.checkpoint._tracking, "_forced",
                        None if tracking == "auto" else tracking)
    buf.obs[500] = 6
    namedschema.save(buf, path, incremental=True)
    assert namedschema.inspect(path).last_save.kind == "incremental"
    assert np.array_equal(namedschema.load(path, verify=True).obs, buf.obs)
