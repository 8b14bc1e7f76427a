"""Incremental saves: what they write, that loads equal the object, and their fallbacks."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import namedschema
from namedschema import NamedArrayTupleSchema
from namedschema.buffer import buffer_from_example, np_mp_array
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _journal as journal
from namedschema.checkpoint import _storage as pages
from namedschema.checkpoint import _tracking as tracking
from namedschema.checkpoint._header import updated_crc

needs_pages = pytest.mark.skipif(not pages.available(), reason="needs Linux pagemap")

Samples = NamedArrayTupleSchema("Samples", "observation action reward done")
ROWS = 600


def make_buffer(rows=ROWS):
    example = Samples(np.zeros((84, 84), np.uint8), np.int64(0), np.float32(0), False)
    buf = buffer_from_example(example, rows)
    rng = np.random.default_rng(0)
    buf.observation[:] = rng.integers(0, 255, buf.observation.shape, dtype=np.uint8)
    buf.action[:] = rng.integers(0, 6, rows)
    return buf


def equal(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def last(path):
    return namedschema.inspect(path).last_save


def check(path, obj, **kw):
    assert equal(namedschema.load(path, verify=True, **kw), obj)
    assert equal(namedschema.load(path, mmap_mode="r", verify=True, **kw), obj)


@pytest.mark.slow
@given(st.data())
def test_updated_crc_equals_the_crc_of_the_new_block(data):
    """updated_crc from the old CRC and per-range deltas equals zlib.crc32 of the new bytes."""
    old = np.frombuffer(data.draw(st.binary(min_size=1, max_size=5000)), np.uint8)
    new = old.copy()
    changes, position = [], 0
    while position < len(old):
        start = position + data.draw(st.integers(0, 300))
        stop = min(len(old), start + data.draw(st.integers(1, 300)))
        if start >= stop:
            break
        new[start:stop] = np.frombuffer(data.draw(st.binary(min_size=stop - start,
                                                          max_size=stop - start)), np.uint8)
        changes.append((stop, zlib.crc32(old[start:stop]) ^ zlib.crc32(new[start:stop])))
        position = stop
    assert updated_crc(zlib.crc32(old), len(old), changes) == zlib.crc32(new)


@pytest.mark.slow
@needs_pages
def test_buffer_from_example_saves_only_written_pages(tmp_path):
    """After one full save, a buffer_from_example buffer's next saves write what changed."""
    path = tmp_path / "b.nsb"
    buf = make_buffer()
    namedschema.save(buf, path, incremental=True)
    assert last(path).kind == "full"
    buf.observation[10:12] = 7           # namedschema-free numpy writes
    np.add(buf.reward[100:103], 1.5, out=buf.reward[100:103])  # in-place ufunc
    buf[300] = Samples(np.full((84, 84), 3, np.uint8), 5, 2.0, True)  # namedschema indexing
    namedschema.save(buf, path, incremental=True)
    record = last(path)
    assert record.kind == "incremental"
    assert 0 < record.bytes_written < 12 * pages.PAGE + 3 * 4096
    check(path, buf)
    namedschema.save(buf, path, incremental=True)  # nothing changed since
    assert last(path).bytes_written == 0
    check(path, buf)


@pytest.mark.slow
@needs_pages
def test_mmap_copy_on_write_load_then_write_then_save(tmp_path):
    """The resume path: load(mmap_mode='c'), write, save incrementally to the same path."""
    path = tmp_path / "b.nsb"
    namedschema.save(make_buffer(), path, incremental=True)
    buf = namedschema.load(path, mmap_mode="c")
    for step in range(3):
        buf.observation[50 * step:50 * step + 5] = step + 1
        buf.done[step::97] = True
        namedschema.save(buf, path, incremental=True)
        assert last(path).kind == "incremental"
        assert last(path).bytes_written < 5 * 7056 + 4 * pages.PAGE + ROWS
        check(path, buf)


@pytest.mark.slow
@needs_pages
def test_plain_save_file_gets_a_full_save_then_incremental_ones(tmp_path):
    """A file from a plain save is updated in full once (its layout), then incrementally."""
    path = tmp_path / "b.nsb"
    namedschema.save(make_buffer(), path)
    buf = namedschema.load(path, mmap_mode="c")
    buf.action[3] = 99
    namedschema.save(buf, path, incremental=True)
    assert last(path).kind == "full"    # a plain header has no room to grow
    check(path, buf)
    buf.observation[2] = 1
    namedschema.save(buf, path, incremental=True)
    assert last(path).kind == "incremental"
    assert last(path).bytes_written <= 3 * pages.PAGE
    check(path, buf)


def test_untracked_memory_is_compared_and_never_misses_a_change(tmp_path):
    """np.zeros arrays and shared memory (not remappable) are compared byte for byte."""
    path = tmp_path / "b.nsb"
    obj = {"heap": np.zeros((300, 1000), np.float32), "shared": np_mp_array((200, 999), np.uint8),
           "t": 0}
    namedschema.save(obj, path, incremental=True)
    rng = np.random.default_rng(1)
    for step in range(1, 6):
        obj["heap"][rng.integers(0, 300), rng.integers(0, 1000)] = step
        obj["shared"][rng.integers(0, 200)] += 1
        obj["t"] = step * 10**9   # the header changes too
        namedschema.save(obj, path, incremental=True)
        assert last(path).kind == "incremental"
        back = namedschema.load(path, verify=True)
        assert back["t"] == obj["t"]
        assert np.array_equal(back["heap"], obj["heap"])
        assert np.array_equal(back["shared"], obj["shared"])


@pytest.mark.slow
def test_torch_in_place_ops_on_shared_tensors_are_saved(tmp_path):
    """Tensors sharing memory with the arrays (torch.from_numpy) write pages that are saved."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "b.nsb"
    buf = make_buffer()
    namedschema.save(buf, path, incremental=True)
    torch.from_numpy(buf.reward).add_(1.0)
    torch.from_numpy(buf.observation)[5].fill_(9)
    namedschema.save(buf, path, incremental=True)
    assert last(path).kind == "incremental"
    check(path, buf)
    tensors = {"w": torch.zeros(50_000), "b": torch.ones(10)}
    namedschema.save(tensors, path, incremental=True)
    tensors["w"].mul_(2).add_(torch.arange(50_000.0))
    namedschema.save(tensors, path, incremental=True)
    back = namedschema.load(path, verify=True)
    assert torch.equal(back["w"], tensors["w"]) and torch.equal(back["b"], tensors["b"])


@pytest.mark.slow
@pytest.mark.parametrize("change", ["shape", "dtype", "field", "view"])
def test_changed_structure_falls_back_to_a_full_save(tmp_path, change):
    """A new shape, dtype or view relation of the large array gives a full (atomic) save;
    a new small field is written beside it (see test_incremental_relayout.py)."""
    path = tmp_path / "b.nsb"
    a = np.arange(100_000, dtype=np.float64)
    namedschema.save({"a": a}, path, incremental=True)
    other = {"shape": {"a": a[:50_000].copy()}, "dtype": {"a": a.astype(np.float32)},
             "field": {"a": a, "b": np.ones(3)}, "view": {"a": a, "tail": a[-10:]}}[change]
    namedschema.save(other, path, incremental=True)
    assert last(path).kind == ("incremental" if change == "field" else "full")
    back = namedschema.load(path, verify=True)
    assert back.keys() == other.keys()
    assert all(np.array_equal(back[k], other[k]) for k in other)


def test_many_changes_fall_back_to_a_full_save(tmp_path):
    """More than a quarter of the data changed: a full save is cheaper and is done."""
    path = tmp_path / "b.nsb"
    buf = make_buffer()
    namedschema.save(buf, path, incremental=True)
    buf.observation[: ROWS // 2] += 1
    namedschema.save(buf, path, incremental=True)
    assert last(path).kind == "full"
    check(path, buf)


class Holder:
    """An object that is not data (so the graph is pickled)."""


@pytest.mark.slow
def test_pickled_objects_update_their_pickle_in_place(tmp_path):
    """A graph that needs pickle: arrays incrementally, the pickle rewritten when it changes."""
    path = tmp_path / "b.nsb"
    h = Holder()
    h.samples, h.t = make_buffer(), 0
    namedschema.save(h, path, incremental=True, allow_pickle=True)
    for t in (5, 300, 70_000, 2**40):
        h.t = t
        h.samples.reward[t % ROWS] = t
        namedschema.save(h, path, incremental=True, allow_pickle=True)
        assert last(path).kind == "incremental"
        back = namedschema.load(path, allow_pickle=True, verify=True)
        assert back.t == t and equal(back.samples, h.samples)


def test_committed_journal_is_applied_by_the_next_load(tmp_path, monkeypatch):
    """A save that stops after its journal's commit is finished by whoever opens the file."""
    path = tmp_path / "b.nsb"
    buf = make_buffer()
    namedschema.save(buf, path, incremental=True)
    before = namedschema.load(path)
    buf.observation[7] = 42
    buf.action[:] += 1

    real = tracking.write_in_place

    def half_then_crash(fd, size, pieces):
        real(fd, size, pieces[: len(pieces) // 2])
        raise OSError("simulated crash")

    monkeypatch.setattr(tracking, "write_in_place", half_then_crash)
    # the in-place writes are the finishing thread's (the save returned once committed)
    namedschema.save(buf, path, incremental=True)
    incremental.wait(str(path))
    assert namedschema.inspect(path).last_save.kind == "incremental"
    monkeypatch.setattr(tracking, "write_in_place", real)
    assert os.path.exists(journal.journal_path(str(path)))
    check(path, buf)      # the journal was replayed: the new state, whole
    assert not os.path.exists(journal.journal_path(str(path)))
    assert not equal(before, buf)


def test_torn_journal_is_discarded_and_the_old_state_kept(tmp_path):
    """A journal without its end marker was never committed: the old checkpoint stands."""
    path = tmp_path / "b.nsb"
    buf = make_buffer()
    namedschema.save(buf, path, incremental=True)
    jpath = journal.journal_path(str(path))
    piece = bytes(4096)
    journal.write(jpath, "x", "y", os.path.getsize(path), [(4096, piece, zlib.crc32(piece))])
    with open(jpath, "r+b") as f:
        f.truncate(os.path.getsize(jpath) - 1)
    check(path, buf)
    assert not os.path.exists(jpath)


@pytest.mark.slow
def test_file_size_stays_bounded_over_many_saves(tmp_path):
    """Many incremental saves keep the file about the size of the data."""
    path = tmp_path / "b.nsb"
    buf = make_buffer()
    for step in range(30):
        buf.observation[step * 7 % ROWS] = step
        namedschema.save(buf, path, incremental=True)
    data = sum(a.nbytes for a in buf)
    assert os.path.getsize(path) < 1.1 * data + 64 * 1024
    incremental.wait(str(path))
    assert sorted(os.listdir(tmp_path)) == ["b.nsb"]


def test_inspect_and_cli_say_what_the_last_save_wrote(tmp_path, capsys):
    """inspect's record and text, and `namedschema inspect`, report the bytes written."""
    from namedschema.apps import cli

    path = tmp_path / "b.nsb"
    buf = make_buffer()
    namedschema.save(buf, path, incremental=True)
    buf.action[0] = 17
    namedschema.save(buf, path, incremental=True, progress=True)
    assert "saving (incremental)" in capsys.readouterr().err
    record = namedschema.inspect(path).last_save
    assert record.kind == "incremental" and 0 < record.bytes_written <= pages.PAGE
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "last save: incremental, wrote" in out
    namedschema.save(buf, path)
    assert "last save: full, wrote all" in str(namedschema.inspect(path))


def test_incremental_save_is_refused_for_non_data_without_allow_pickle(tmp_path):
    """incremental=True keeps save's rule: non-data needs allow_pickle."""
    with pytest.raises(namedschema.errors.NotDataError):
        namedschema.save({"s": {1, 2}}, tmp_path / "x.nsb", incremental=True)


def test_recover_is_a_no_op_without_a_journal(tmp_path):
    """recover on a path without a journal touches nothing."""
    path = tmp_path / "b.nsb"
    namedschema.save({"a": np.arange(10)}, path, incremental=True)
    before = os.stat(path)
    incremental.recover(str(path))
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns


@pytest.mark.slow
@needs_pages
@pytest.mark.parametrize("mode", ["r", "c"])
def test_other_maps_of_the_file_keep_their_data(tmp_path, mode):
    """While another map of the file exists, a save writes a new file: that map is unchanged."""
    path = tmp_path / "b.nsb"
    buf = make_buffer()
    namedschema.save(buf, path, incremental=True)
    other = namedschema.load(path, mmap_mode=mode)
    before = [np.array(a) for a in other]
    buf.observation[5] = 200
    namedschema.save(buf, path, incremental=True)
    assert last(path).kind == "full"
    assert equal(other, before)
    check(path, buf)
    del other
    buf.observation[6] = 201
    namedschema.save(buf, path, incremental=True)
    assert last(path).kind == "incremental"
    check(path, buf)
