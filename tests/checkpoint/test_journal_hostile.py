"""A hostile or malformed journal next to a checkpoint: refused clearly, the file never resized.

An in-place save never changes the checkpoint's size, so a journal naming
another size, or whose index says what no save writes, is not applied: the
load (or verify) raises ``FormatError`` naming the journal, and the
checkpoint keeps its size and bytes (issue 34: an 8.6 KB file with a tiny
journal used to be extended to 1 TB, and then no longer loaded). A fuzz
over tiny journals checks that whatever a journal holds, the file never
grows and reading it costs memory bounded by its size.
"""

from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import namedschema
import namedschema.checkpoint
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _journal as journal
from namedschema.errors import FormatError
from tests.bounds import bounded
from tests.figures import record
from tests.helpers import examples

MAGIC, END = b"NSJRNL01", b"NSJEND01"


def _journal(index: object, data: bytes = b"", *, raw_index: bytes | None = None) -> bytes:
    """The bytes of a whole journal: magic, index with its CRC-32, data, end marker."""
    text = json.dumps(index).encode() if raw_index is None else raw_index
    return (MAGIC + struct.pack("<Q", len(text)) + text + struct.pack("<I", zlib.crc32(text))
            + data + END)


def _small_checkpoint(tmp_path) -> tuple[str, str, bytes]:
    """An 8 KB incremental checkpoint: (path, its checkpoint id, its bytes)."""
    path = str(tmp_path / "small.nsb")
    namedschema.save({"x": np.arange(512, dtype=np.int64), "step": 3}, path, incremental=True)
    with open(path, "rb") as f:
        content = f.read()
    return path, namedschema.inspect(path).checkpoint_id, content


def _unchanged(path: str, content: bytes) -> None:
    assert os.path.getsize(path) == len(content)
    with open(path, "rb") as f:
        assert f.read() == content


@pytest.mark.parametrize("read", ["load", "verify"])
def test_a_journal_naming_a_huge_size_never_grows_the_file(tmp_path, read):
    path, ckpt_id, content = _small_checkpoint(tmp_path)
    jpath = journal.journal_path(path)
    with open(jpath, "wb") as f:
        f.write(_journal({"base": ckpt_id, "new": "x", "file_size": 2**40, "ranges": []}))
    with pytest.raises(FormatError, match="is for a checkpoint of 1099511627776 bytes"):
        getattr(namedschema.checkpoint, read)(path)
    _unchanged(path, content)
    assert os.path.exists(jpath)            # refused, not silently dropped
    os.unlink(jpath)                        # as the message says: the file as it is
    assert namedschema.load(path)["step"] == 3


def test_a_journal_for_a_smaller_file_is_refused_too(tmp_path):
    path, ckpt_id, content = _small_checkpoint(tmp_path)
    with open(journal.journal_path(path), "wb") as f:
        f.write(_journal({"base": ckpt_id, "new": "x", "file_size": 100,
                          "ranges": [[0, 4, zlib.crc32(b"\0\0\0\0")]]}, b"\0\0\0\0"))
    with pytest.raises(FormatError, match="has " + str(len(content))):
        namedschema.load(path)
    _unchanged(path, content)


@pytest.mark.parametrize("index, data, why", [
    ({"base": "a", "new": "b", "file_size": 8192, "ranges": [[-4, 4, 0]]}, b"\0" * 4,
     "does not lie"),
    ({"base": "a", "new": "b", "file_size": 8192, "ranges": [[8190, 4, 0]]}, b"\0" * 4,
     "does not lie"),
    ({"base": "a", "new": "b", "file_size": 8192, "ranges": [[0, 4, 0]]}, b"\0" * 8,
     "hold 4 bytes"),
    ({"base": "a", "new": "b", "file_size": "8192", "ranges": []}, b"", "is not a size"),
    ({"base": 1, "new": "b", "file_size": 8192, "ranges": []}, b"", "wrong type"),
    ({"base": "a", "new": "b", "file_size": 8192, "ranges": [[0, 4.5, 0]]}, b"\0" * 4,
     "is not \\[offset"),
    ({"base": "a", "new": "b", "file_size": 8192}, b"", "not a journal index"),
], ids=["negative", "past-the-end", "sum", "size-type", "base-type", "float", "missing"])
def test_a_whole_but_malformed_journal_is_refused_clearly(tmp_path, index, data, why):
    path, _id, content = _small_checkpoint(tmp_path)
    jpath = journal.journal_path(path)
    with open(jpath, "wb") as f:
        f.write(_journal(index, data))
    with pytest.raises(FormatError, match=why):
        namedschema.load(path)
    _unchanged(path, content)
    assert os.path.exists(jpath)


def test_a_journal_cut_short_is_still_discarded(tmp_path):
    """Not whole (no end marker): never committed, removed, the file loads as it is."""
    path, ckpt_id, content = _small_checkpoint(tmp_path)
    jpath = journal.journal_path(path)
    with open(jpath, "wb") as f:
        f.write(_journal({"base": ckpt_id, "new": "x", "file_size": 2**40, "ranges": []})[:-1])
    assert namedschema.load(path)["step"] == 3
    _unchanged(path, content)
    assert not os.path.exists(jpath)


# ---------------------------------------------------------------------------
# Fuzz: tiny journals of every kind
# ---------------------------------------------------------------------------

_ints = st.one_of(st.integers(-2**64, 2**64), st.integers(-16, 9000),
                  st.floats(allow_nan=False), st.text(max_size=4), st.none())
_range = st.lists(_ints, min_size=0, max_size=4)


@st.composite
def _journals(draw, ckpt_id: str, size: int = 8192) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind == 0:                                    # bytes, sometimes with the magic
        body = draw(st.binary(max_size=200))
        return (MAGIC + body) if draw(st.booleans()) else body
    index = {"base": draw(st.sampled_from([ckpt_id, "other", 7])),
             "new": draw(st.sampled_from(["n", ckpt_id, None])),
             "file_size": draw(st.one_of(st.integers(-1, 2**62), _ints,
                                         st.integers(size, 3 * size))),   # growth (item 13)
             "ranges": draw(st.lists(_range, max_size=6))}
    if draw(st.booleans()):
        del index[draw(st.sampled_from(sorted(index)))]
    data = draw(st.one_of(st.just(b""), st.binary(max_size=64)))
    out = _journal(index, data)
    if kind == 2:                                    # one byte flipped
        at = draw(st.integers(0, len(out) - 1))
        out = out[:at] + bytes([out[at] ^ draw(st.integers(1, 255))]) + out[at + 1:]
    elif kind == 3:                                  # cut short
        out = out[:draw(st.integers(0, len(out)))]
    return out


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_tiny_journals_never_grow_the_file_nor_memory(tmp_path, data):
    path = str(tmp_path / "fuzz.nsb")
    if not os.path.exists(path):
        namedschema.save({"x": np.arange(512, dtype=np.int64)}, path, incremental=True)
    ckpt_id = namedschema.inspect(path).checkpoint_id
    size = os.path.getsize(path)
    blob = data.draw(_journals(ckpt_id, size))
    jpath = journal.journal_path(path)
    with open(jpath, "wb") as f:
        f.write(blob)
    record("round4.journal_fuzz")
    with bounded(2**20 + 64 * len(blob)):      # memory and CPU time (tests/bounds.py)
        try:
            namedschema.load(path, verify=True)
        except FormatError:
            pass
    assert os.path.getsize(path) <= size
    if os.path.exists(jpath):
        os.unlink(jpath)


# ---------------------------------------------------------------------------
# Growth: a file short of its journal's size (issue 34 item 13, after d4fc04e)
# ---------------------------------------------------------------------------

class _Killed(Exception):
    pass


def _killed_after_commit(tmp_path, monkeypatch) -> tuple[str, bytes, bytes]:
    """A relaying incremental save stopped between its journal's commit and growing the
    file (what SIGKILL leaves there): (path, the file's bytes, the journal's bytes)."""
    path = str(tmp_path / "relaid.nsb")
    obj = {"big": np.arange(300_000, dtype=np.int64), "step": np.int64(1)}
    namedschema.save(obj, path, incremental=True)
    incremental.wait(path)
    obj["big"][5] = -1
    obj["step"] = np.int64(2)
    obj["burst"] = np.full(20_000, 2, np.int64)   # larger than the free space: relaid
    real = journal.write

    def write(jpath, *args):
        real(jpath, *args)
        raise _Killed

    monkeypatch.setattr(journal, "write", write)
    with pytest.raises(_Killed):
        namedschema.save(obj, path, incremental=True)
    monkeypatch.setattr(journal, "write", real)
    with open(path, "rb") as f, open(journal.journal_path(path), "rb") as j:
        return path, f.read(), j.read()


def test_a_relaying_save_stopped_after_its_commit_is_finished_by_the_next_load(
        tmp_path, monkeypatch):
    """The case the growth is for: the journal writes a consistent larger file."""
    path, content, _blob = _killed_after_commit(tmp_path, monkeypatch)
    entry = journal.read(journal.journal_path(path))
    assert entry is not None and entry.file_size > len(content)
    back = namedschema.load(path, verify=True)
    assert back["step"] == 2 and (back["burst"] == 2).all() and back["big"][5] == -1
    assert os.path.getsize(path) == entry.file_size
    assert not os.path.exists(journal.journal_path(path))


def _forged(blob: bytes, keep, **fields) -> bytes:
    """``blob`` (a whole journal) with only the ranges ``keep(offset, length)`` holds,
    and ``fields`` replaced in its index."""
    (length,) = struct.unpack("<Q", blob[8:16])
    index = json.loads(blob[16:16 + length])
    at, data, ranges = 16 + length + 4, b"", []
    for o, n, c in index["ranges"]:
        if keep(o, n):
            ranges.append([o, n, c])
            data += blob[at:at + n]
        at += n
    return _journal({**index, "ranges": ranges, **fields}, data)


@pytest.mark.parametrize("forge, why", [
    (lambda b, size: _forged(b, lambda o, n: o + n <= size), "do not write bytes"),
    (lambda b, size: _forged(b, lambda o, n: o != 0), "does not write the file's header"),
    (lambda b, size: _forged(b, lambda o, n: True, new="another"), "not its new checkpoint"),
], ids=["grown-blocks-dropped", "header-dropped", "other-checkpoint"])
def test_a_real_growth_journal_missing_a_part_is_refused(tmp_path, monkeypatch, forge, why):
    path, content, blob = _killed_after_commit(tmp_path, monkeypatch)
    jpath = journal.journal_path(path)
    with open(jpath, "wb") as f:
        f.write(forge(blob, len(content)))
    with pytest.raises(FormatError, match=why):
        namedschema.load(path)
    _unchanged(path, content)
    assert os.path.exists(jpath)
    os.unlink(jpath)
    assert namedschema.load(path, verify=True)["step"] == 1


def _zeros(lo: int, hi: int) -> tuple[list[int], bytes]:
    return [lo, hi - lo, zlib.crc32(bytes(hi - lo))], bytes(hi - lo)


@pytest.mark.parametrize("factor", [1.5, 2])
@pytest.mark.parametrize("kind", ["no-ranges", "half-the-growth", "all-the-growth",
                                  "old-header-and-growth"])
@pytest.mark.parametrize("read", ["load", "verify"])
def test_a_forged_journal_naming_a_larger_size_leaves_the_file_as_it_was(
        tmp_path, factor, kind, read):
    """Issue 34, item 13 after d4fc04e: a 100-byte journal naming twice the size, no
    ranges, grew the file, was removed, and the file no longer loaded."""
    path, ckpt_id, content = _small_checkpoint(tmp_path)
    size = len(content)
    grown = int(size * factor)
    ranges, data = [], b""
    if kind == "half-the-growth":
        r, d = _zeros(size, size + (grown - size) // 2)
        ranges, data = [r], d
    elif kind in ("all-the-growth", "old-header-and-growth"):
        r, d = _zeros(size, grown)
        ranges, data = [r], d
        if kind == "old-header-and-growth":   # the header as it is: for the old size
            head = content[:8 + struct.unpack("<Q", content[:8])[0]]
            ranges, data = [r, [0, len(head), zlib.crc32(head)]], d + head
    jpath = journal.journal_path(path)
    with open(jpath, "wb") as f:
        f.write(_journal({"base": ckpt_id, "new": "x", "file_size": grown,
                          "ranges": ranges}, data))
    with pytest.raises(FormatError, match="does not write a consistent file"):
        getattr(namedschema.checkpoint, read)(path)
    record("round4.journal_growth_refused")
    _unchanged(path, content)
    assert os.path.exists(jpath)            # whole but inconsistent: refused, kept
    os.unlink(jpath)
    assert namedschema.load(path, verify=True)["step"] == 3
