"""The copy-aside snapshot of a background incremental save: run arrays, the page gather,
the two-thread split and the snapshot buffer kept between saves."""

from __future__ import annotations

import mmap
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import namedschema
from namedschema.buffer import buffer_from_example
from namedschema.checkpoint import _tracking as tracking
from namedschema.checkpoint import _tracking as writeprotect
from tests.helpers import examples

PAGE = mmap.PAGESIZE
needs_writeprotect = pytest.mark.skipif(
    not writeprotect.available(), reason="userfaultfd write protection is not available here")


def _naive_union(runs):
    out = []
    for a, b in sorted(r for r in runs if r[1] > r[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=40))
def test_union_matches_the_one_run_at_a_time_definition(pairs):
    runs = np.array([(a, a + n) for a, n in pairs], np.int64).reshape(-1, 2)
    got = writeprotect.union(runs)
    assert [tuple(r) for r in got.tolist()] == _naive_union([(a, a + n) for a, n in pairs])
    if len(got) > 1:   # sorted, disjoint and not touching
        assert (got[1:, 0] > got[:-1, 1]).all()


Step = namedschema.NamedArrayTupleSchema("Step", "obs reward")


def _buffer(rows):
    buf = buffer_from_example(Step(np.zeros((64, 64), np.uint8), np.float32(0)), rows)
    buf.obs[:] = np.arange(rows, dtype=np.uint8)[:, None, None]
    return buf


@pytest.mark.slow
@needs_writeprotect
@pytest.mark.parametrize("split", [False, True])
def test_background_incremental_saves_hold_the_state_at_their_return(tmp_path, monkeypatch,
                                                                     split):
    if split:   # every gather goes through the two-thread path
        monkeypatch.setattr(tracking, "_SPLIT", PAGE)
    rng = np.random.default_rng(1)
    buf = _buffer(4096)                                  # 16 MiB of frames
    path = tmp_path / "b.nsb"
    namedschema.save(buf, path, incremental=True, background=True).wait()
    for round_ in range(6):
        rows = rng.choice(len(buf.obs), 60, replace=False)      # scattered rows
        buf.obs[rows] = rng.integers(0, 255, (60, 64, 64), dtype=np.uint8)
        buf.obs[100 * round_:100 * round_ + 50] = round_ + 7     # a ring segment
        buf.reward[rows] += 1.0
        expected = [buf.obs.copy(), buf.reward.copy()]
        handle = namedschema.save(buf, path, incremental=True, background=True)
        buf.obs[rows] = 0                      # after the snapshot: must not reach the file
        buf.reward[:] = -1.0
        record = handle.wait()
        assert record is not None and record.kind == "incremental"
        back = namedschema.load(path, verify=True)
        np.testing.assert_array_equal(back.obs, expected[0])
        np.testing.assert_array_equal(back.reward, expected[1])
        buf.obs[rows] = expected[0][rows]
        buf.reward[:] = expected[1]


@pytest.mark.slow
@needs_writeprotect
def test_the_snapshot_buffer_is_reused_and_a_full_save_readies_one(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking, "_spare", tracking._Spare())
    buf = _buffer(8192)                                  # 32 MiB of data
    path = tmp_path / "b.nsb"
    namedschema.save(buf, path, incremental=True, background=True).wait()
    ready = tracking._spare._buffer
    assert ready is not None and ready.size >= int(buf.obs.nbytes * tracking.SPARE_FRACTION)
    taken = []
    real_take = tracking._spare.take
    monkeypatch.setattr(tracking._spare, "take", lambda: taken.append(real_take()) or taken[-1])
    for k in range(3):
        buf.obs[k * 10:k * 10 + 5] = 200 + k
        namedschema.save(buf, path, incremental=True, background=True).wait()
        np.testing.assert_array_equal(namedschema.load(path).obs, buf.obs)
    assert len(taken) == 3 and all(a is ready for a in taken)   # the same warm pages


def test_a_failed_half_of_a_split_gather_is_raised(monkeypatch):
    memory = np.arange(64 * PAGE, dtype=np.uint64).view(np.uint8).reshape(-1, PAGE)
    out = np.zeros((10, PAGE), np.uint8)
    monkeypatch.setattr(tracking, "_SPLIT", PAGE)
    where = np.array([3, 5, 7, 60, 61, 0, 1, 2, 9, 11])
    tracking._gather(memory, where, out)
    np.testing.assert_array_equal(out, memory[where])
    real_take = np.take

    def take(*args, **kwargs):
        if threading.current_thread().name == "namedschema-snapshot":
            raise MemoryError("the helper's half")
        return real_take(*args, **kwargs)

    monkeypatch.setattr(np, "take", take)
    with pytest.raises(MemoryError, match="helper's half"):
        tracking._gather(memory, where, out)
