"""``namedschema demo``: the resume scenario end to end, and its replay and RNG state."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namedschema import NamedArrayTupleSchema, NamedTupleSchema
from namedschema.apps import demo
from namedschema.state.rng import pcg64_words
from tests.helpers import REPO_ROOT, echo_fresh, examples, run_fresh

Transition = NamedArrayTupleSchema("Transition", demo.FIELDS)
State = NamedTupleSchema("ReplayState", ("samples", "cursor", "filled", "rng_state"))


def _replay(capacity, seed=0):
    samples = Transition(np.zeros((capacity, *demo.FRAME), np.uint8), np.zeros(capacity, np.int32),
                         np.zeros(capacity, np.float32), np.zeros(capacity, bool))
    return demo.TinyReplay(samples, seed=seed)


@pytest.mark.subprocess
def test_demo_command_passes_every_check():
    """`namedschema demo` at a small size exits 0 and prints the table, checks and rlpyt failures."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    env.pop("RLPYT_SRC", None)
    proc = subprocess.run([sys.executable, "-m", "namedschema", "demo", "--size", "2MB",
                           "--no-progress"], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "all checks passed" in out and "FAILED" not in out
    assert "pickle protocol 4" in out and "namedschema.save" in out
    assert "resume = twin" in out and "bit-exact" in out
    assert "(load: the load call alone" in out          # what the load column measures
    # rlpyt-style classes fail, and the failure text is shown rather than raised
    assert "Can't pickle" in out or "PicklingError" in out
    assert "Can't get attribute 'Transition'" in out
    assert "Traceback" not in proc.stderr


@pytest.mark.subprocess
def test_demo_detects_a_broken_checkpoint(monkeypatch, tmp_path):
    """When namedschema.save writes a damaged file, the demo reports FAILED and returns 1."""
    import namedschema.checkpoint as checkpoint_module
    real_save = checkpoint_module.save

    def damaged_save(obj, path, **kwargs):
        real_save(obj, path, **kwargs)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)

    monkeypatch.setattr(checkpoint_module, "save", damaged_save)
    out = io.StringIO()
    status = demo.run_demo(size=600_000, workdir=str(tmp_path), progress=False, out=out)
    assert status == 1
    text = out.getvalue()
    assert "namedschema.save: load in a fresh interpreter" in text and "FAILED" in text
    assert "[ok] pickle protocol 4: contents bit-exact" in text


@pytest.mark.subprocess
def test_demo_keeps_files_only_when_asked(tmp_path):
    """--keep leaves the checkpoints in --workdir; without it they are removed."""
    kept, cleaned = tmp_path / "kept", tmp_path / "cleaned"
    assert demo.run_demo(size=400_000, workdir=str(kept), progress=False, keep=True,
                         out=io.StringIO()) == 0
    assert demo.run_demo(size=400_000, workdir=str(cleaned), progress=False,
                         out=io.StringIO()) == 0
    assert "replay.pkl" in os.listdir(kept)
    assert os.listdir(cleaned) == []


@given(words=st.lists(st.integers(0, 2**64 - 1), min_size=4, max_size=4),
       has_uint32=st.integers(0, 1), uinteger=st.integers(0, 2**32 - 1))
def test_rng_state_round_trip(words, has_uint32, uinteger):
    """Packing a PCG64 state into six uint64 words and back reproduces the stream."""
    bit_generator = np.random.PCG64()
    bit_generator.state = {"bit_generator": "PCG64",
                           "state": {"state": (words[0] << 64) | words[1],
                                     "inc": ((words[2] << 64) | words[3]) | 1},
                           "has_uint32": has_uint32, "uinteger": uinteger}
    original = np.random.Generator(bit_generator)
    rebuilt = demo._unpack_rng(pcg64_words(original))
    assert rebuilt.bit_generator.state == original.bit_generator.state
    assert np.array_equal(rebuilt.integers(0, 1 << 30, 16), original.integers(0, 1 << 30, 16))


@pytest.mark.slow
@settings(max_examples=examples(20))
@given(capacity=st.integers(2, 40), appends=st.lists(st.integers(1, 60), max_size=4),
       draws=st.integers(0, 3), seed=st.integers(0, 2**32 - 1))
def test_replay_state_pickle_round_trip_resumes_identically(capacity, appends, draws, seed):
    """A TinyReplay rebuilt from its pickled state samples exactly like the original."""
    replay = _replay(capacity, seed)
    for i, n in enumerate([capacity, *appends]):
        replay.append(demo.synthetic(Transition, n, seed + i))
    for _ in range(draws):
        replay.sample(3)
    state = pickle.loads(pickle.dumps(replay.state(State), protocol=4))
    twin = demo.TinyReplay.from_state(state)
    assert (twin.cursor, twin.filled) == (replay.cursor, replay.filled)
    assert demo._digest_fields(twin.samples) == demo._digest_fields(replay.samples)
    assert demo._resume_and_sample(twin, seed) == demo._resume_and_sample(replay, seed)


def test_ring_buffer_wraps_and_keeps_newest():
    """Appending past capacity overwrites the oldest transitions in order."""
    replay = _replay(5)
    batch = demo.synthetic(Transition, 7, 1)
    replay.append(batch)
    assert (replay.cursor, replay.filled) == (2, 5)
    np.testing.assert_array_equal(replay.samples.action[:2], batch.action[5:])
    np.testing.assert_array_equal(replay.samples.action[2:], batch.action[2:5])


@pytest.mark.subprocess
def test_replay_state_loads_in_fresh_interpreter():
    """A replay state pickled here loads in a fresh interpreter and resumes like the original."""
    replay = _replay(16, seed=3)
    replay.append(demo.synthetic(Transition, 20, 3))
    back = echo_fresh(replay.state(State))
    assert type(back.samples) is Transition
    proc = run_fresh("""
        import pickle, sys
        from namedschema.apps import demo
        state = pickle.loads(sys.stdin.buffer.read())
        print(demo._resume_and_sample(demo.TinyReplay.from_state(state), 3))
        """, stdin=pickle.dumps(replay.state(State), protocol=4))
    assert proc.stdout.decode().strip() == demo._resume_and_sample(replay, 3)


@pytest.mark.subprocess
def test_importing_demo_defines_no_schema():
    """Importing namedschema.apps.demo registers no schema (the fresh-interpreter claim rests on it)."""
    proc = run_fresh("""
        from namedschema._core import pickling as _pickle
        from namedschema.apps import demo
        print(len(_pickle._registry))
        """)
    assert proc.stdout.decode().strip() == "0"
