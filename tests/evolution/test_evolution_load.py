"""namedschema.load(path, schemas=...): the evolution rules applied while loading."""

from __future__ import annotations

import json
import mmap

import numpy as np
import pytest

import namedschema
from namedschema import NamedArrayTupleSchema
from namedschema.errors import ExtraFieldError, FieldMismatchError, MissingFieldError
from tests.helpers import run_fresh

T, B = 32, 4


class Replay:
    """A replay-buffer-like object: its graph is pickled, its arrays stored raw."""


def _mapped(arr) -> bool:
    while isinstance(arr, np.ndarray):
        arr = arr.base
    return isinstance(arr.obj if isinstance(arr, memoryview) else arr, mmap.mmap)


@pytest.fixture
def saved(tmp_path):
    """A checkpoint of an old Samples(observation, action, reward) buffer, and its data."""
    Old = NamedArrayTupleSchema("Samples", "observation action reward")
    rng = np.random.default_rng(0)
    old = Old(rng.integers(0, 255, (T, B, 8), dtype=np.uint8),
              rng.integers(0, 4, (T, B)), rng.standard_normal((T, B)).astype(np.float32))
    path = str(tmp_path / "old.nsb")
    namedschema.save({"samples": old, "t": 7}, path)
    return path, old


@pytest.mark.parametrize("mode", [None, "r", "c"])
def test_load_into_todays_schema(saved, mode):
    """load(schemas=...) returns today's class; unchanged fields stay mapped, new ones are made."""
    path, old = saved
    Samples = NamedArrayTupleSchema("Samples", "observation action reward timeout",
                                    defaults=(np.bool_(False),))
    state, report = namedschema.load(path, mmap_mode=mode, schemas=[Samples], report=True)
    s = state["samples"]
    assert type(s) is Samples and state["t"] == 7
    assert s.timeout.shape == (T, B) and not s.timeout.any() and s.timeout.flags.writeable
    for name in old._fields:
        assert np.array_equal(getattr(s, name), getattr(old, name))
        assert _mapped(getattr(s, name)) == (mode is not None)
    assert report.mappings[0].added == ("timeout",)


def test_cast_while_loading_copies_only_that_field(saved):
    """A widened declared dtype is cast (in memory); the other fields stay mapped."""
    path, old = saved
    Samples = NamedArrayTupleSchema("Samples", "observation action reward",
                                    defaults=(np.float64(0),))
    with pytest.raises(FieldMismatchError, match="float32") as info:
        namedschema.load(path, mmap_mode="r", schemas=[Samples])
    assert any(path in note for note in info.value.__notes__)
    s = namedschema.load(path, mmap_mode="r", schemas=[Samples], casting="safe")["samples"]
    assert s.reward.dtype == np.float64 and not _mapped(s.reward)
    assert np.array_equal(s.reward, old.reward.astype(np.float64))
    assert _mapped(s.observation) and _mapped(s.action)


def test_load_errors_and_options(saved, tmp_path):
    """Rule violations raise the documented errors; bad options fail before the file is read."""
    path, _old = saved
    with pytest.raises(MissingFieldError, match="'timeout'"):
        namedschema.load(path, schemas=[NamedArrayTupleSchema(
            "Samples", "observation action reward timeout")])
    with pytest.raises(ExtraFieldError, match="'action'"):
        namedschema.load(path, schemas=[NamedArrayTupleSchema("Samples", "observation reward")])
    s = namedschema.load(path, extra="ignore", schemas=[NamedArrayTupleSchema(
        "Samples", "observation reward")])["samples"]
    assert s._fields == ("observation", "reward")
    missing = str(tmp_path / "does-not-exist.nsb")
    with pytest.raises(ValueError, match="extra must be one of"):
        namedschema.load(missing, schemas=[], extra="drop")
    with pytest.raises(TypeError, match="report=True needs schemas"):
        namedschema.load(path, report=True)
    assert type(namedschema.load(path)["samples"]).__name__ == "Samples"   # unchanged default


def test_pickled_graph_upgrades_while_loading(tmp_path):
    """A checkpoint whose graph was pickled (an object) is upgraded after unpickling."""
    Old = NamedArrayTupleSchema("Samples", "observation reward")
    replay = Replay()
    replay.samples = Old(np.zeros((T, B, 3), np.uint8), np.zeros((T, B), np.float32))
    replay.samples_return_ = replay.samples.reward
    path = str(tmp_path / "replay.nsb")
    namedschema.save(replay, path, allow_pickle=True)
    Samples = NamedArrayTupleSchema("Samples", "observation reward done",
                                    defaults=(np.bool_(False),))
    back = namedschema.load(path, allow_pickle=True, mmap_mode="c", schemas=[Samples])
    assert type(back.samples) is Samples and back.samples_return_ is back.samples.reward
    assert back.samples.done.shape == (T, B) and _mapped(back.samples.observation)


@pytest.mark.subprocess
def test_mmap_evolution_reads_nothing_of_the_rest(tmp_path):
    """A 64 MiB buffer mapped with mmap_mode='r' and a new field: no data read, no RSS growth."""
    path = str(tmp_path / "big.nsb")
    Old = NamedArrayTupleSchema("Samples", "observation reward")
    n = 64 * 2**20 // (84 * 84)
    namedschema.save(Old(np.ones((n, 84, 84), np.uint8), np.ones(n, np.float32)), path)
    # A small file of the same kind, loaded first: the modules a load imports (about 1 MiB
    # of .pyc files, which /proc/self/io counts as read) are not the buffer's data.
    small = str(tmp_path / "small.nsb")
    namedschema.save(Old(np.ones((2, 84, 84), np.uint8), np.ones(2, np.float32)), small)
    proc = run_fresh(f"""
        import json, numpy as np, namedschema

        def io():
            with open("/proc/self/io") as f:
                rchar = int(next(l for l in f if l.startswith("rchar")).split()[1])
            with open("/proc/self/status") as f:
                rss = int(next(l for l in f if l.startswith("VmRSS")).split()[1]) * 1024
            return rchar, rss

        Samples = namedschema.NamedArrayTupleSchema(
            "Samples", "observation reward timeout", defaults=(np.bool_(False),))
        namedschema.load({small!r}, mmap_mode="r", schemas=[Samples])
        r0, m0 = io()
        s = namedschema.load({path!r}, mmap_mode="r", schemas=[Samples])
        r1, m1 = io()
        print(json.dumps(dict(read=r1 - r0, rss=m1 - m0, own=type(s) is Samples,
                              timeout=list(s.timeout.shape), writable=s.timeout.flags.writeable,
                              obs_writable=s.observation.flags.writeable)))
        """)
    out = json.loads(proc.stdout)
    assert out["own"] and out["timeout"] == [n] and out["writable"]
    assert not out["obs_writable"]                 # still the read-only map
    assert out["read"] < 1 * 2**20, out            # the header only, not 64 MiB
    assert out["rss"] < 16 * 2**20, out            # nothing of the buffer paged in
