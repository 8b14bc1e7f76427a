"""Property: random writes through every path, interleaved with incremental saves, always load equal.

Each example makes a buffer in one of the ways that matter (``buffer_from_example``,
``load(mmap_mode='c')`` of a checkpoint, ``np.zeros`` arrays, shared memory,
torch tensors sharing memory with the arrays), then runs a random sequence of
steps: writes through namedschema indexing, plain numpy assignment on a field,
in-place ufuncs, torch in-place operations, changes of structure (a new
field, another shape), and incremental saves, each save followed by loads
(plain and memory-mapped, verified) that must equal the object bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import namedschema
from namedschema.buffer import buffer_from_example, np_mp_array
from tests.helpers import run_fresh

S = namedschema.NamedArrayTupleSchema("S", "obs reward step")
ROWS = 1200
SOURCES = ("buffer_from_example", "mmap_c", "np_zeros", "shared", "torch")


def _make(source, path):
    example = S(np.zeros((32, 32), np.uint8), np.float32(0), np.int64(0))
    if source == "buffer_from_example":
        return buffer_from_example(example, ROWS)
    if source == "shared":
        return buffer_from_example(example, ROWS, share_memory=True)
    if source == "torch":
        import torch
        return S(torch.zeros((ROWS, 32, 32), dtype=torch.uint8), torch.zeros(ROWS),
                 torch.zeros(ROWS, dtype=torch.int64))
    buf = S(np.zeros((ROWS, 32, 32), np.uint8), np.zeros(ROWS, np.float32),
            np.zeros(ROWS, np.int64))
    if source == "mmap_c":
        namedschema.save(buf, path)
        return namedschema.load(path, mmap_mode="c")
    return buf


def _arrays_of(buf):
    return [np.asarray(a) if not hasattr(a, "numpy") else a.numpy() for a in buf]


def _equal(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return type(a).__name__ == type(b).__name__ and all(
            _equal(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "numpy"):
        a = a.numpy()
    if hasattr(b, "numpy"):
        b = b.numpy()
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


rows = st.integers(0, ROWS - 1)
steps = st.one_of(
    st.tuples(st.just("index"), rows, st.integers(1, 60), st.integers(0, 255)),
    st.tuples(st.just("field"), rows, st.integers(1, 60), st.integers(0, 255)),
    st.tuples(st.just("ufunc"), rows, st.integers(1, 400), st.integers(1, 5)),
    st.tuples(st.just("scatter"), st.lists(rows, min_size=1, max_size=30), st.just(0),
              st.integers(0, 255)),
    st.tuples(st.just("torch"), rows, st.integers(1, 60), st.integers(1, 5)),
    st.tuples(st.just("structure"), st.sampled_from(["field", "shape", "back"]), st.just(0),
              st.just(0)),
    st.tuples(st.just("save"), st.just(0), st.just(0), st.just(0)),
)


def _apply(state, step):
    kind, a, b, c = step
    buf = state["obj"]["buf"]
    obs, reward, counter = _arrays_of(buf)
    if kind == "index":
        n = min(b, ROWS - a)
        batch = S(np.full((n, 32, 32), c, np.uint8), np.full(n, c, np.float32),
                  np.full(n, c, np.int64))
        if state["source"] == "torch":
            obs[a:a + n], reward[a:a + n], counter[a:a + n] = batch
        else:
            buf[a:a + n] = batch
    elif kind == "field":
        obs[a:a + b, c % 32] = c
    elif kind == "ufunc":
        np.add(reward[a:a + b], c, out=reward[a:a + b])
        np.multiply(counter[a:a + b], c, out=counter[a:a + b])
    elif kind == "scatter":
        obs[np.array(a)] = c
        counter[np.array(a)] += 1
    elif kind == "torch":
        torch = pytest.importorskip("torch")
        torch.from_numpy(reward[a:a + b]).add_(c)
        torch.from_numpy(obs[a:a + b]).bitwise_xor_(c)
    elif kind == "structure":
        extra = state["obj"]
        if a == "field":
            extra["more"] = np.arange(100_000, dtype=np.int32)
        elif a == "shape":
            extra["more"] = np.ones((3, 7), np.float64)
        else:
            extra.pop("more", None)
    else:
        state["obj"]["t"] += 1
        namedschema.save(state["obj"], state["path"], incremental=True)
        for mode in (None, "r"):
            back = namedschema.load(state["path"], mmap_mode=mode, verify=True)
            assert _equal(state["obj"], back), (mode, step)


@given(source=st.sampled_from(SOURCES), sequence=st.lists(steps, min_size=1, max_size=12))
def test_any_writes_between_incremental_saves_load_equal(tmp_path_factory, source, sequence):
    """Whatever wrote to the arrays since, every incremental save loads as the object."""
    if source == "torch":
        pytest.importorskip("torch")
    path = str(tmp_path_factory.mktemp("incr") / "ckpt.nsb")
    state = {"source": source, "path": path,
             "obj": {"buf": _make(source, path), "t": 0}}
    namedschema.save(state["obj"], path, incremental=True)
    for step in [*sequence, ("save", 0, 0, 0)]:
        _apply(state, step)


def test_incremental_saves_load_in_a_fresh_interpreter(tmp_path):
    """After several incremental saves, a fresh interpreter loads the same bytes."""
    path = str(tmp_path / "ckpt.nsb")
    buf = buffer_from_example(S(np.zeros((32, 32), np.uint8), np.float32(0), np.int64(0)),
                              ROWS)
    obj = {"buf": buf, "shared": np_mp_array((500,), np.float64), "t": 0}
    namedschema.save(obj, path, incremental=True)
    rng = np.random.default_rng(3)
    for t in range(1, 5):
        buf.obs[rng.integers(0, ROWS, 20)] = t
        buf[t * 100] = S(np.full((32, 32), t, np.uint8), float(t), t)
        obj["shared"][t] = t
        obj["t"] = t
        namedschema.save(obj, path, incremental=True)
    digest = _digest(obj)
    proc = run_fresh(f"""
        import hashlib, numpy as np, namedschema
        for mode in (None, "r", "c"):
            obj = namedschema.load({path!r}, mmap_mode=mode, verify=True)
            h = hashlib.sha256()
            for a in (*obj["buf"], obj["shared"]):
                h.update(np.ascontiguousarray(a).tobytes())
            print(h.hexdigest(), obj["t"], type(obj["buf"]).__name__)
        """)
    for line in proc.stdout.decode().split("\n")[:-1]:
        assert line.split() == [digest, "4", "S"]


def _digest(obj):
    import hashlib
    h = hashlib.sha256()
    for a in (*obj["buf"], obj["shared"]):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()
