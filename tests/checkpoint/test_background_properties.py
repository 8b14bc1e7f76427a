"""Property: a background save holds the state at its snapshot, whatever the program writes after.

Random programs write to a buffer (made by ``buffer_from_example``, ``np.zeros``,
shared memory, ``load(mmap_mode='c')`` or torch) through numpy slices,
scatters and torch in-place ops, and start background saves (full or
incremental) without waiting for them; the writes go on while the writers
run. Every save, once waited for, loads (``verify=True``) equal to a copy of
the object taken when ``save`` returned, and the last one is what the file holds.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import namedschema
from namedschema.buffer import buffer_from_example
from tests.helpers import examples

pytestmark = pytest.mark.slow

S = namedschema.NamedArrayTupleSchema("S", "obs reward")
ROWS = 512
SOURCES = ("buffer_from_example", "np_zeros", "shared", "mmap_c", "torch")


def _make(source, path):
    example = S(np.zeros((64, 64), np.uint8), np.float32(0))
    if source in ("buffer_from_example", "shared"):
        return buffer_from_example(example, ROWS, share_memory=source == "shared")
    if source == "torch":
        import torch
        return S(torch.zeros((ROWS, 64, 64), dtype=torch.uint8), torch.zeros(ROWS))
    buf = S(np.zeros((ROWS, 64, 64), np.uint8), np.zeros(ROWS, np.float32))
    if source == "mmap_c":
        namedschema.save(buf, path)
        return namedschema.load(path, mmap_mode="c")
    return buf


def _numpy(buf):
    return [a.numpy() if hasattr(a, "numpy") else a for a in buf]


def _snapshot(obj):
    return {"t": obj["t"], "arrays": [a.copy() for a in _numpy(obj["buf"])]}


rows = st.integers(0, ROWS - 1)
steps = st.one_of(
    st.tuples(st.just("rows"), rows, st.integers(1, 40), st.integers(0, 255)),
    st.tuples(st.just("scatter"), st.lists(rows, min_size=1, max_size=20), st.just(0),
              st.integers(0, 255)),
    st.tuples(st.just("torch"), rows, st.integers(1, 40), st.integers(1, 5)),
    st.tuples(st.just("save"), st.booleans(), st.booleans(), st.just(0)),
)


@settings(max_examples=examples(25), deadline=None)
@given(source=st.sampled_from(SOURCES), sequence=st.lists(steps, min_size=1, max_size=10))
def test_background_saves_hold_their_snapshot(tmp_path_factory, source, sequence):
    if source == "torch":
        pytest.importorskip("torch")
    path = str(tmp_path_factory.mktemp("bg") / "ckpt.nsb")
    obj = {"buf": _make(source, path), "t": 0}
    pending = []
    for kind, a, b, c in [*sequence, ("save", True, True, 0)]:
        obs, reward = _numpy(obj["buf"])
        if kind == "rows":
            obs[a:a + b] = c
            reward[a:a + b] = c
        elif kind == "scatter":
            obs[np.array(a), c % 64] = c
        elif kind == "torch":
            import torch
            torch.from_numpy(reward[a:a + b]).add_(c)
            torch.from_numpy(obs[a:a + b]).bitwise_xor_(c)
        else:
            obj["t"] += 1
            handle = namedschema.save(obj, path, incremental=a, background=True)
            pending.append((handle, _snapshot(obj)))
            if b:   # sometimes wait at once, else let the next writes race with the writer
                handle.wait()
    for handle, _snap in pending:
        handle.wait()
    back = namedschema.load(path, verify=True)
    last = pending[-1][1]
    assert back["t"] == last["t"]
    for got, want in zip(_numpy(back["buf"]), last["arrays"], strict=True):
        np.testing.assert_array_equal(got, want)


@settings(max_examples=examples(10), deadline=None)
@given(sequence=st.lists(st.tuples(rows, st.integers(1, 40), st.booleans()), min_size=1,
                         max_size=6))
def test_every_background_save_loads_as_its_snapshot(tmp_path_factory, sequence):
    """Each save checked right after it ended, while the program kept writing."""
    path = str(tmp_path_factory.mktemp("bg") / "ckpt.nsb")
    obj = {"buf": _make("buffer_from_example", path), "t": 0}
    for start, n, incremental in sequence:
        obs, reward = _numpy(obj["buf"])
        obs[start:start + n] += 1
        obj["t"] += 1
        snap = copy.deepcopy(_snapshot(obj))
        handle = namedschema.save(obj, path, incremental=incremental, background=True)
        obs[:] = 255                       # races with the writer
        reward[:] = -1.0
        handle.wait()
        back = namedschema.load(path, verify=True)
        assert back["t"] == snap["t"]
        for got, want in zip(_numpy(back["buf"]), snap["arrays"], strict=True):
            np.testing.assert_array_equal(got, want)
        obs[:] = snap["arrays"][0]
        reward[:] = snap["arrays"][1]
