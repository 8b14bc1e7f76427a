"""Write-protect tokens armed a few saves ago stay good: saving one buffer alternately to
two files (latest/previous, or a sharded replay's two slots) keeps kernel tracking."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

import namedschema
from namedschema.buffer import buffer_from_example
from namedschema.checkpoint import _tracking as writeprotect

pytestmark = pytest.mark.skipif(not writeprotect.available(),
                                reason="userfaultfd write protection is not available here")
PAGE = mmap.PAGESIZE


def pages_of(runs, base):
    return sorted({(a - base) // PAGE + k for a, b in runs for k in range((b - a) // PAGE)})


def test_an_older_token_sees_every_write_since_it():
    region = mmap.mmap(-1, 64 * PAGE)
    mem = np.frombuffer(region, np.uint8)
    lo = mem.ctypes.data
    mem[:] = 1                                   # populate
    first = writeprotect.arm(lo, lo + mem.nbytes)
    mem[3 * PAGE] = 2
    second = writeprotect.arm(lo, lo + mem.nbytes)   # another file's save arms again
    assert second != first
    mem[40 * PAGE + 7] = 3
    since_first = writeprotect.scan(lo, lo + mem.nbytes, first)
    assert pages_of(since_first, lo) == [3, 40]
    third = writeprotect.token(lo, lo + mem.nbytes)
    mem[9 * PAGE] = 4
    # second's interval: page 40 (before the scan above) and page 9 (after it)
    assert pages_of(writeprotect.scan(lo, lo + mem.nbytes, second), lo) == [9, 40]
    assert pages_of(writeprotect.scan(lo, lo + mem.nbytes, third), lo) == [9]
    # a token older than the history is refused (compare instead), never wrong
    old = writeprotect.token(lo, lo + mem.nbytes)
    for _ in range(writeprotect.HISTORY + 1):
        writeprotect.arm(lo, lo + mem.nbytes)
    assert writeprotect.scan(lo, lo + mem.nbytes, old) is None
    del mem
    region.close()


@pytest.mark.slow
def test_alternating_two_files_keeps_kernel_tracking(tmp_path, monkeypatch):
    Step = namedschema.NamedArrayTupleSchema("Step", "obs action")
    buf = buffer_from_example(Step(np.zeros((84, 84), np.uint8), np.int64(0)), 2000)
    rng = np.random.default_rng(0)
    buf.obs[:] = rng.integers(0, 255, buf.obs.shape, dtype=np.uint8)
    paths = [tmp_path / "a.nsb", tmp_path / "b.nsb"]
    results = []
    real_scan = writeprotect.scan_and_token

    def spy(lo, hi, since):
        out = real_scan(lo, hi, since)
        results.append(out is not None)
        return out

    monkeypatch.setattr(writeprotect, "scan_and_token", spy)
    for path in paths:
        namedschema.save(buf, path, incremental=True)
    for step in range(6):
        rows = slice(step * 20, step * 20 + 20)
        buf.obs[rows] = step + 1
        buf.action[rows] = step
        path = paths[step % 2]
        results.clear()
        namedschema.save(buf, path, incremental=True)
        assert results and all(results), f"save {step}: a token was lost: {results}"
        record = namedschema.inspect(path).last_save
        assert record.kind == "incremental"
        # rows written since this file's own last save: this step's and the previous one's
        assert record.bytes_written <= 2 * 20 * (84 * 84 + 8) + 4 * PAGE
        loaded = namedschema.load(path, verify=True)
        assert np.array_equal(loaded.obs, buf.obs) and np.array_equal(loaded.action,
                                                                      buf.action)


def test_overlapping_ranges_each_see_every_write():
    # Re-arming pages re-arms them for every range holding them: a write seen (and
    # re-armed) through one range must still be reported by the other.
    region = mmap.mmap(-1, 64 * PAGE)
    mem = np.frombuffer(region, np.uint8)
    lo = mem.ctypes.data
    mem[:] = 1
    whole = writeprotect.arm(lo, lo + mem.nbytes)
    mem[20 * PAGE] = 2
    part = writeprotect.arm(lo + 8 * PAGE, lo + 40 * PAGE)   # a view, armed blindly
    mem[30 * PAGE] = 3
    assert pages_of(writeprotect.scan(lo, lo + mem.nbytes, whole), lo) == [20, 30]
    mem[10 * PAGE] = 4
    # the whole range's scan re-armed page 30 (and 10 stays written): the view sees both
    assert pages_of(writeprotect.scan(lo + 8 * PAGE, lo + 40 * PAGE, part), lo) == [10, 30]
    del mem
    region.close()


def test_saving_an_overlapping_view_elsewhere_keeps_incremental_saves_exact(tmp_path):
    a = np.zeros(1 << 20)
    first, second = tmp_path / "a.ns", tmp_path / "b.ns"
    namedschema.save(a, first, incremental=True)
    a[500_000] = 7.0
    namedschema.save(a[4096:], second, incremental=True)     # arms an overlapping range
    a[10] = 1.0
    namedschema.save(a, first, incremental=True)
    np.testing.assert_array_equal(namedschema.load(first), a)
    a[600_000] = 5.0
    namedschema.save(a[4096:], second, incremental=True)
    np.testing.assert_array_equal(namedschema.load(second), a[4096:])


def test_runs_kept_for_a_range_nobody_scans_are_bounded(monkeypatch):
    monkeypatch.setattr(writeprotect, "_HISTORY_RUNS", 4)
    region = mmap.mmap(-1, 64 * PAGE)
    mem = np.frombuffer(region, np.uint8)
    lo = mem.ctypes.data
    mem[:] = 1
    stale = writeprotect.arm(lo + 8 * PAGE, lo + 40 * PAGE)   # saved once, never again
    token = writeprotect.arm(lo, lo + mem.nbytes)
    for page in range(10, 40, 2):                               # scattered runs
        mem[page * PAGE] = 2
        assert writeprotect.scan(lo, lo + mem.nbytes, token) is not None
        token = writeprotect.token(lo, lo + mem.nbytes)
    assert writeprotect.scan(lo + 8 * PAGE, lo + 40 * PAGE, stale) is None   # compare instead
    del mem
    region.close()


def test_a_save_records_the_token_of_its_own_scan(tmp_path, monkeypatch):
    # Another thread arming the same memory (its save to another file) right after this
    # save's scan: this file's next save must still see a write made in between.
    a = np.zeros(1 << 20)
    path = tmp_path / "a.ns"
    namedschema.save(a, path, incremental=True)
    a[1000] = 1.0
    lo = a.ctypes.data

    def then_another_thread(real):
        def scan(*args):
            found = real(*args)
            a[700_000] = 3.0                      # after the scan: not in this save
            writeprotect.arm(lo, lo + a.nbytes)   # the other thread's save arms the range
            return found
        return scan
    monkeypatch.setattr(writeprotect, "scan_and_token",
                        then_another_thread(writeprotect.scan_and_token))
    namedschema.save(a, path, incremental=True)
    monkeypatch.undo()
    namedschema.save(a, path, incremental=True)
    np.testing.assert_array_equal(namedschema.load(path), a)
