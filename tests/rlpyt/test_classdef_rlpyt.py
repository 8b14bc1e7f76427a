"""Class-syntax schemas in real rlpyt's replay buffers (opt-in: needs RLPYT_SRC)."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import run_fresh

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = pytest.mark.rlpyt


def _run(body):
    # Appended, not prepended: an rlpyt checkout has its own top-level `tests`.
    return run_fresh("import os, sys\nsys.path.append(os.environ['RLPYT_SRC'])\n" + textwrap.dedent(body),
                     timeout=300)


def test_rlpyt_replay_buffer_of_a_class_schema_resumes_in_a_fresh_interpreter(tmp_path):
    """Patched rlpyt keeps the class-syntax type for its buffer (unpatched rlpyt accepts no
    schema: its heuristics want ``type(cls) is type``); the pickled buffer loads elsewhere."""
    path = tmp_path / "replay.pkl"
    out = _run(f"""
        import pickle, numpy as np
        import namedschema
        namedschema.patch_rlpyt()
        from rlpyt.replays.non_sequence.uniform import UniformReplayBuffer
        from tests.core.class_schemas import Transition
        example = Transition(np.zeros((2, 2), np.uint8), np.int64(0), np.float32(0), np.False_)
        replay = UniformReplayBuffer(example=example, size=40, B=2, discount=0.9, n_step_return=1)
        assert type(replay.samples) is Transition, type(replay.samples)
        for t in range(5):
            step = Transition(np.full((3, 2, 2, 2), t, np.uint8), np.full((3, 2), t),
                              np.ones((3, 2), np.float32), np.zeros((3, 2), bool))
            replay.append_samples(step)
        assert replay.samples.total_reward() == 30.0
        with open({str(path)!r}, "wb") as f:
            pickle.dump(replay, f, protocol=4)
        print(replay.t)
        """)
    assert out.stdout.split()[-1] == b"15"
    out = _run(f"""
        import pickle, sys, numpy as np
        import namedschema
        with open({str(path)!r}, "rb") as f:
            replay = pickle.load(f)
        assert "tests.core.class_schemas" not in sys.modules
        names = [type(replay.samples).__name__, str(hasattr(replay.samples, "total_reward"))]
        from tests.core.class_schemas import Transition
        assert type(replay.samples) is Transition
        np.random.seed(0)
        batch = replay.sample_batch(4)
        print(*names, replay.samples.total_reward(), int(replay.samples.observation[14, 1].max()))
        """)
    assert out.stdout.split()[-4:] == [b"Transition", b"False", b"30.0", b"4"]
