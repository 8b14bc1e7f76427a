"""Incremental saves whose small arrays change shape, come or go, or whose pickle outgrows its room.

A real run's checkpoints do all of these between saves (an emulator state a
few bytes longer, a sum tree's index list one entry shorter, an optimizer
state that appears after the first step, a pickled part that grew): such a
save rewrites those blocks and updates the large ones in place
(``relayout.py``); only a change to the large arrays' layout gives a full
save. Every file must load and verify, its padding must stay zeros and its
size bounded over many saves.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import namedschema
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint._header import read_header
from tests.helpers import examples

BIG = 1 << 19     # float64 elements: 4 MiB


class Payload:
    """Not data: saved through the pickle part (``allow_pickle=True``)."""

    def __init__(self, text: str):
        self.text = text

    def __eq__(self, other):
        return isinstance(other, Payload) and other.text == self.text

    __hash__ = None  # type: ignore[assignment]  # mutable: unhashable, as __eq__ implies


def state(emu: int = 14_420, idx: int = 31) -> dict:
    return {"big": np.arange(BIG, dtype=np.float64), "emu": np.full(emu, 7, np.uint8),
            "idx": np.arange(idx, dtype=np.int64)}


def last(path):
    return namedschema.inspect(path).last_save


def check(path, obj, allow_pickle=False):
    """The file loads as ``obj``, verifies, and its padding is zeros."""
    back = namedschema.load(path, verify=True, allow_pickle=allow_pickle)
    assert back.keys() == obj.keys()
    for k, v in obj.items():
        assert np.array_equal(back[k], v) if isinstance(v, np.ndarray) else back[k] == v, k
    with open(path, "rb") as f:
        header = read_header(f, str(path), os.fstat(f.fileno()).st_size)
        for name, t in header.tensors.items():
            if name.startswith("__pad__."):
                f.seek(header.data_start + t.start)
                assert not any(f.read(t.end - t.start)), f"padding {name} is not zeros"


def small_fraction(path):
    saved = last(path)
    assert saved.kind == "incremental", incremental.fallback_reason(path)
    return saved.bytes_written / saved.data_bytes


@pytest.mark.parametrize("change", ["grow", "shrink", "new", "gone"])
def test_a_small_array_that_changes_shape_is_rewritten_alone(tmp_path, change):
    """Emulator state 14,420 -> 14,447 bytes, index list 32 -> 31 entries, an optimizer state
    that appears, an array that goes: the save stays incremental and writes little."""
    path = tmp_path / "c.nsb"
    obj = state(idx=32)
    namedschema.save(obj, path, incremental=True)
    obj["big"][1000:1100] += 1
    if change == "grow":
        obj["emu"] = np.full(14_447, 9, np.uint8)
    elif change == "shrink":
        obj["idx"] = np.arange(31, dtype=np.int64) * 3
    elif change == "new":
        obj["opt"] = np.ones(3000, np.float32)
    else:
        del obj["emu"]
    namedschema.save(obj, path, incremental=True)
    assert small_fraction(path) < 0.02
    check(path, obj)
    safetensors = pytest.importorskip("safetensors.numpy")
    tensors = safetensors.load_file(str(path))   # blocks out of header order: still valid
    assert np.array_equal(tensors["big"], obj["big"])


def test_a_pickled_part_that_outgrows_its_room_is_moved(tmp_path):
    """The pickle of the non-data part grows past the room after it: incremental still."""
    path = tmp_path / "c.nsb"
    obj = state()
    obj["misc"] = Payload("x" * 100)
    namedschema.save(obj, path, incremental=True, allow_pickle=True)
    obj["big"][5] = -1
    obj["misc"] = Payload("y" * 60_000)
    namedschema.save(obj, path, incremental=True, allow_pickle=True)
    assert small_fraction(path) < 0.05
    check(path, obj, allow_pickle=True)
    obj["misc"] = Payload("z" * 10)   # and shrinks again, in place
    namedschema.save(obj, path, incremental=True, allow_pickle=True)
    assert small_fraction(path) < 0.02
    check(path, obj, allow_pickle=True)


def test_a_large_array_that_changes_shape_gives_a_full_save(tmp_path):
    """Rewriting the large array costs as much as a full save: one is done, and says why."""
    path = tmp_path / "c.nsb"
    obj = state()
    namedschema.save(obj, path, incremental=True)
    obj["big"] = np.arange(BIG + 512, dtype=np.float64)
    namedschema.save(obj, path, incremental=True)
    assert last(path).kind == "full"
    assert "'big'" in incremental.fallback_reason(path)
    check(path, obj)


@pytest.mark.slow
def test_wobbling_sizes_keep_the_file_bounded(tmp_path):
    """Many saves with sizes that go up and down: the file reuses its free space."""
    path = tmp_path / "c.nsb"
    rng = np.random.default_rng(0)
    obj = state()
    namedschema.save(obj, path, incremental=True)
    first = os.path.getsize(path)
    for i in range(120):
        obj["emu"] = np.full(int(rng.integers(14_420, 14_448)), i % 251, np.uint8)
        obj["idx"] = np.arange(int(rng.integers(31, 33)), dtype=np.int64) + i
        obj["big"][i] = i
        namedschema.save(obj, path, incremental=True)
        assert last(path).kind == "incremental", incremental.fallback_reason(path)
    assert os.path.getsize(path) <= first + 64 * 1024
    check(path, obj)


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40_000), st.integers(0, 40), st.booleans(),
                          st.integers(0, 3000)), min_size=1, max_size=6))
@pytest.mark.slow
def test_any_sequence_of_small_changes_round_trips(tmp_path_factory, steps):
    """Random sizes, arrays coming and going, pickles growing and shrinking: every save
    loads as what was saved, verifies, keeps its padding zero."""
    path = tmp_path_factory.mktemp("r") / "c.nsb"
    obj = state()
    obj["misc"] = Payload("")
    namedschema.save(obj, path, incremental=True, allow_pickle=True)
    for k, (emu, idx, extra, text) in enumerate(steps):
        obj["emu"] = np.full(emu, k, np.uint8)
        obj["idx"] = np.arange(idx, dtype=np.int64)
        if extra:
            obj["extra"] = np.full(emu // 3 + 1, k, np.float32)
        else:
            obj.pop("extra", None)
        obj["misc"] = Payload("q" * text)
        obj["big"][k * 7] = k
        namedschema.save(obj, path, incremental=True, allow_pickle=True)
        incremental.wait(str(path))
        check(path, obj, allow_pickle=True)


def optimizer_state(n_params: int = 10) -> dict:
    """Adam-like state of ``n_params`` parameters: several arrays each, nested dicts."""
    return {"state": {str(p): {"step": np.array(float(p), np.float32),
                               "exp_avg": np.full(64 + p, 0.5, np.float32),
                               "exp_avg_sq": np.full(64 + p, 0.25, np.float32)}
                      for p in range(n_params)},
            "param_groups": [{"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                              "weight_decay": 0.0, "amsgrad": False,
                              "params": list(range(n_params))}]}


def same(a, b) -> bool:
    """Nested dicts, lists and arrays equal, arrays bit for bit."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                and a.dtype == b.dtype and np.array_equal(a, b))
    if isinstance(a, dict):
        return (isinstance(b, dict) and list(a) == list(b)
                and all(same(a[k], b[k]) for k in a))
    if isinstance(a, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b, strict=True)))
    return bool(a == b)


@pytest.mark.parametrize("pickled", [False, True])
def test_an_optimizer_state_appearing_at_the_second_save_stays_incremental(tmp_path, pickled):
    """A real run's second checkpoint: the optimizer state appears (many arrays, a larger
    JSON header and pickled part). The header must not outgrow its room (it did: a full
    save of the whole file at the seed's scale)."""
    path = tmp_path / "c.nsb"
    obj = state()
    obj["model"] = {f"layer{i}.{kind}": np.full(256, i, np.float32)
                    for i in range(6) for kind in ("weight", "bias")}
    obj["optimizer"] = {}
    if pickled:
        obj["misc"] = Payload("x" * 100)
    namedschema.save(obj, path, incremental=True, allow_pickle=pickled)
    first = os.path.getsize(path)
    obj["big"][1000:1100] += 1
    obj["optimizer"] = optimizer_state(12)
    if pickled:
        obj["misc"] = Payload("y" * 20_000)
    namedschema.save(obj, path, incremental=True, allow_pickle=pickled)
    assert small_fraction(path) < 0.05
    assert same(namedschema.load(path, verify=True, allow_pickle=pickled), obj)
    assert os.path.getsize(path) <= first + 256 * 1024
    obj["optimizer"]["state"]["3"]["exp_avg"] += 1     # and the next save is in place
    namedschema.save(obj, path, incremental=True, allow_pickle=pickled)
    assert small_fraction(path) < 0.01
    assert same(namedschema.load(path, verify=True, allow_pickle=pickled), obj)
