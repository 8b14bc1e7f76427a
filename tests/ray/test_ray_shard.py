"""The consistent-cut protocol of namedschema.ray's shards, without Ray."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import namedschema as ns
from namedschema.ray.shard import ReplayShard, last_routed, route
from tests.helpers import examples

Step = ns.NamedArrayTupleSchema("Step", "obs action")
EXAMPLE = Step(np.zeros(2, np.float32), np.int64(0))


def batch(writer, seq):
    return Step(np.zeros((1, 2), np.float32), np.array([writer * 1000 + seq]))


def shards(n, capacity=1000):
    spec = {"example": EXAMPLE, "capacity": capacity, "prioritized": False, "alpha": 0.6,
            "beta": 0.4}
    return [ReplayShard(spec, i, n, seed=i) for i in range(n)]


@given(writer=st.integers(0, 2**62), upto=st.integers(-1, 200), n=st.integers(1, 7))
def test_last_routed_is_the_last_call_routed_to_each_shard(writer, upto, n):
    for shard in range(n):
        calls = [s for s in range(upto + 1) if route(writer, s, n) == shard]
        assert last_routed(writer, upto, shard, n) == (calls[-1] if calls else -1)


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None)
@given(n=st.integers(1, 4), plan=st.lists(st.tuples(st.integers(0, 2), st.booleans()),
                                          min_size=1, max_size=40),
       freeze_at=st.integers(0, 40), shuffle=st.randoms(use_true_random=False))
def test_cut_holds_a_prefix_of_every_writer(n, plan, freeze_at, shuffle):
    """Calls arrive on time, or late and in any order; whatever was sent before and
    after the freeze, each shard's file holds exactly the calls up to the cut, and
    every call is applied once afterwards."""
    group = shards(n)
    seqs = {w: -1 for w in range(3)}
    delayed: list = []
    cut = None

    def freeze():
        out: dict = {}
        for a in [s.freeze() for s in group]:
            for k, v in a.items():
                out[k] = max(v, out.get(k, -1))
        return out

    for step, (w, late) in enumerate(plan):
        if step == freeze_at:
            cut = freeze()
        seqs[w] += 1
        call = (w, seqs[w])
        target = group[route(w, call[1], n)]
        if late:
            delayed.append((target, call))
        else:
            target.extend(batch(*call), *call)
    if cut is None:
        cut = freeze()
    shuffle.shuffle(delayed)
    with tempfile.TemporaryDirectory() as directory:
        paths = [os.path.join(directory, f"{i}.nsb") for i in range(n)]
        done = {}
        while len(done) < n:         # the owner polls; late calls arrive in between
            for i, s in enumerate(group):
                if i not in done and (info := s.snapshot(cut, paths[i])) is not None:
                    done[i] = info
            if delayed:
                target, call = delayed.pop()
                target.extend(batch(*call), *call)
            elif len(done) < n:
                raise AssertionError(f"shards {set(range(n)) - set(done)} never reached "
                                     f"the cut {cut}")
        for s, p in zip(group, paths, strict=True):
            assert s.finish(p)["bytes"] > 0
        for i, p in enumerate(paths):
            saved = ns.load(p)["buffer"]
            got = sorted(saved["storage"].action[:saved["size"]].tolist())
            want = sorted(w * 1000 + q for w, upto in cut.items() for q in range(upto + 1)
                          if route(w, q, n) == i)
            assert got == want, (i, cut)
    for target, call in delayed:
        target.extend(batch(*call), *call)
    assert sum(len(s.buffer) for s in group) == len(plan)


def test_calls_past_the_cut_are_held_then_applied_in_order():
    (s,) = shards(1)
    s.extend(batch(1, 0), 1, 0)
    assert s.freeze() == {1: 0}
    s.extend(batch(1, 1), 1, 1)            # held: past the cut
    s.extend(batch(2, 0), 2, 0)            # held: a writer the cut does not know
    assert len(s.buffer) == 1
    with pytest.raises(RuntimeError, match="already under way"):
        s.freeze()
    s.thaw()
    assert len(s.buffer) == 3 and s.applied == {1: 1, 2: 0}
    assert s.buffer.storage.action[:3].tolist() == [1000, 1001, 2000]


def test_a_call_that_arrives_twice_is_refused():
    (s,) = shards(1)
    s.extend(batch(1, 0), 1, 0)
    with pytest.raises(ValueError, match="arrived twice"):
        s.extend(batch(1, 0), 1, 0)


def test_snapshot_saves_exactly_the_cut(tmp_path):
    (s,) = shards(1)
    for q in range(3):
        s.extend(batch(1, q), 1, q)
    s.freeze()
    s.extend(batch(1, 3), 1, 3)            # after the freeze: not in the file
    info = s.snapshot({1: 2}, str(tmp_path / "s.nsb"))
    assert info["rows"] == 3 and info["missing_writers"] == []
    assert len(s.buffer) == 4               # applied once the shard thawed
    s.extend(batch(1, 4), 1, 4)             # written while the save runs: not in the file
    s.finish(str(tmp_path / "s.nsb"))
    with pytest.raises(RuntimeError, match="no save to finish"):
        s.finish(str(tmp_path / "s.nsb"))
    saved = ns.load(str(tmp_path / "s.nsb"))
    assert saved["buffer"]["size"] == 3
    with pytest.raises(RuntimeError, match="without freeze"):
        s.snapshot({1: 2}, str(tmp_path / "s.nsb"))


def test_snapshot_waits_for_a_late_call_then_can_give_up(tmp_path):
    a, b = shards(2)
    w = 0                                   # writer 0: seq 0 -> shard 0, seq 1 -> shard 1
    b.extend(batch(w, 1), w, 1)             # seq 0 has not reached shard 0
    cut = {w: 1}
    a.freeze()
    assert a.snapshot(cut, str(tmp_path / "a.nsb")) is None        # still on its way
    info = a.snapshot(cut, str(tmp_path / "a.nsb"), give_up=True)  # the writer died
    assert info["missing_writers"] == [w] and info["rows"] == 0
    a.finish(str(tmp_path / "a.nsb"))
