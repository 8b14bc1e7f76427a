"""What ``save`` writes over, and where to (hardening round 3, issue 22, items 1 and 8).

1. ``save`` never replaces a non-regular file (FIFO, socket, device node,
   directory), with and without ``incremental``, and refuses before writing.
8. Save errors name the user's path (not the hidden temporary file), binary
   file objects are accepted by ``save``/``load``, and ``save(path, obj)``
   gets a "did you swap?" hint.

The generalized test walks every kind of non-regular target, reached directly
and through symbolic links, in both save modes, and counts the cases.
"""

from __future__ import annotations

import errno
import io
import os
import socket
import stat

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _save as saver_module
from namedschema.checkpoint import _write as writer_module
from namedschema.errors import NotRegularFileError
from tests.figures import record

OBJ = {"x": np.arange(1000, dtype=np.int64), "name": "run"}


def _make(kind: str, path: str) -> None:
    """Make a non-regular file of ``kind`` at ``path``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path)
        sock.close()  # the socket file stays
    elif kind == "directory":
        os.mkdir(path)
        with open(os.path.join(path, "inside"), "wb") as f:
            f.write(b"keep me")
    elif kind == "char_device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # like /dev/null
    elif kind == "block_device":
        os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(7, 250))  # a loop device number
    else:
        raise AssertionError(kind)


KINDS = ["fifo", "socket", "directory", "char_device", "block_device"]


def _can_make(kind: str, tmp_path) -> bool:
    try:
        _make(kind, str(tmp_path / f"probe-{kind}"))
    except (PermissionError, OSError):
        return False
    return True


def _snapshot(path: str):
    st = os.lstat(path)
    return (st.st_ino, st.st_mode, st.st_rdev)


def _check_refused(tmp_path, target: str, shown: str, incremental: bool) -> None:
    before = _snapshot(target)
    listing = sorted(os.listdir(tmp_path))
    with pytest.raises(NotRegularFileError) as info:
        namedschema.save(OBJ, shown, incremental=incremental)
    assert info.value.filename == shown and shown in str(info.value)
    assert isinstance(info.value, OSError)
    assert _snapshot(target) == before, "the node was replaced"
    assert sorted(os.listdir(tmp_path)) == listing, "a temporary file was left or made"


@pytest.mark.parametrize("incremental", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_save_never_replaces_a_non_regular_file(tmp_path, kind, incremental):
    """1: a FIFO, socket, device node or directory at the target is refused, untouched."""
    if not _can_make(kind, tmp_path):
        pytest.skip(f"cannot make a {kind} here (needs root)")
    target = str(tmp_path / "target.nsb")
    _make(kind, target)
    _check_refused(tmp_path, target, target, incremental)
    if kind == "directory":
        assert os.listdir(target) == ["inside"]


def test_save_to_a_dev_null_node_is_refused(tmp_path):
    """1: a node like /dev/null (char 1,3) stays a device node, even for root.

    A private node, never the system's /dev/null: with the guard broken, this
    test would replace the node it saves to.
    """
    if not _can_make("char_device", tmp_path):
        pytest.skip("cannot make a device node here (needs root)")
    node = str(tmp_path / "null")
    _make("char_device", node)
    before = _snapshot(node)
    for incremental in (False, True):
        with pytest.raises(NotRegularFileError, match="character device"):
            namedschema.save(OBJ, node, incremental=incremental)
    assert _snapshot(node) == before
    with open(node, "wb") as f:  # it still discards what is written
        f.write(b"x" * 100)
    assert os.stat(node).st_size == 0


def test_directory_target_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """1: the refusal comes first; before, a directory failed at rename, after all the writing."""
    def no_writing(*args, **kwargs):
        raise AssertionError("save wrote data before refusing the target")
    monkeypatch.setattr(writer_module, "write_blocks", no_writing)
    monkeypatch.setattr(saver_module, "encode_graph", no_writing)
    with pytest.raises(NotRegularFileError) as info:
        namedschema.save(OBJ, str(tmp_path))
    assert info.value.errno == errno.EISDIR and "directory" in str(info.value)


def test_a_node_appearing_during_the_save_is_not_replaced(tmp_path, monkeypatch):
    """1: a FIFO made at the target while the data is written is still refused, temp removed."""
    target = str(tmp_path / "late.nsb")
    real = writer_module.write_blocks

    def write_then_make_fifo(*args, **kwargs):
        crcs = real(*args, **kwargs)
        os.mkfifo(target)
        return crcs
    monkeypatch.setattr(writer_module, "write_blocks", write_then_make_fifo)
    with pytest.raises(NotRegularFileError):
        namedschema.save(OBJ, target)
    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert os.listdir(tmp_path) == ["late.nsb"]


def test_all_non_regular_targets_direct_and_through_links(tmp_path):
    """Generalized: every kind of non-regular file, directly and behind 1-2 symlinks, both modes."""
    cases = 0
    for kind in KINDS:
        if not _can_make(kind, tmp_path):
            continue
        for links in (0, 1, 2):
            for incremental in (False, True):
                case = tmp_path / f"{kind}-{links}-{int(incremental)}"
                case.mkdir()
                target = str(case / "node")
                _make(kind, target)
                shown = target
                for i in range(links):
                    link = str(case / f"link{i}")
                    os.symlink(shown, link)
                    shown = link
                before = _snapshot(target)
                listing = sorted(os.listdir(case))
                with pytest.raises(NotRegularFileError) as info:
                    namedschema.save(OBJ, shown, incremental=incremental)
                assert info.value.filename == shown
                assert _snapshot(target) == before and sorted(os.listdir(case)) == listing
                if links:
                    assert os.path.islink(shown)
                cases += 1
    assert cases >= 18  # fifo, socket, directory at least, 3 link depths, 2 modes
    record("round3.nonregular_targets", cases)


# ---------------------------------------------------------------------------
# 8. Save errors name the user's path; file objects; swapped arguments
# ---------------------------------------------------------------------------

def test_save_errors_name_the_users_path_not_the_temp_file(tmp_path, monkeypatch):
    """8: ENOSPC while writing, and a missing directory, are reported for the path given."""
    target = str(tmp_path / "full.nsb")

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(writer_module, "write_blocks", disk_full)
    with pytest.raises(OSError) as info:
        namedschema.save(OBJ, target)
    assert info.value.filename == target and repr(target) in str(info.value)
    assert ".tmp-" not in str(info.value)
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    missing = str(tmp_path / "no-such-dir" / "x.nsb")
    with pytest.raises(FileNotFoundError) as info:
        namedschema.save(OBJ, missing)
    assert info.value.filename == missing and ".tmp-" not in str(info.value)


def test_save_and_load_binary_file_objects(tmp_path):
    """8: io.BytesIO and open files work as with torch.save/np.save, at any position."""
    buf = io.BytesIO()
    buf.write(b"prefix")
    namedschema.save(OBJ, buf)
    end = buf.tell()
    buf.seek(6)
    back = namedschema.load(buf)
    assert np.array_equal(back["x"], OBJ["x"]) and back["name"] == "run"
    assert buf.tell() == end
    path = tmp_path / "f.nsb"
    with open(path, "wb") as f:
        namedschema.save(OBJ, f)
    assert np.array_equal(namedschema.load(path)["x"], OBJ["x"])
    with open(path, "rb") as f:
        assert np.array_equal(namedschema.load(f)["x"], OBJ["x"])
    with pytest.raises(TypeError, match="binary mode"):
        namedschema.save(OBJ, io.StringIO())
    with pytest.raises(TypeError, match="needs a path"):
        namedschema.save(OBJ, io.BytesIO(), incremental=True)
    with open(path, "rb") as f, pytest.raises(TypeError, match="mmap_mode needs a path"):
        namedschema.load(f, mmap_mode="r")


def test_load_refuses_a_stream_that_cannot_seek(tmp_path):
    """8: a pipe-like object gets a clear TypeError, not an obscure seek failure."""
    class Pipe(io.RawIOBase):
        def readable(self):
            return True

        def seekable(self):
            return False
    with pytest.raises(TypeError, match="cannot seek"):
        namedschema.load(Pipe())


def test_swapped_arguments_get_a_hint(tmp_path):
    """8: save(path, obj), numpy's order, says 'did you swap them?'."""
    with pytest.raises(TypeError, match="did you swap"):
        namedschema.save(str(tmp_path / "x.nsb"), OBJ)
    with pytest.raises(TypeError, match="did you swap"):
        namedschema.save(tmp_path / "x.nsb", np.zeros(3))
    with pytest.raises(TypeError, match="must be a str"):
        namedschema.save(OBJ, 3)
    assert os.listdir(tmp_path) == []
