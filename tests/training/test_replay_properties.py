"""Any sequence of replay-buffer operations, saved and loaded at any point, continues identically.

Operations: extend (1..2*capacity rows, so writes wrap and overrun), add, sample,
update_priorities (indices and priorities drawn by hypothesis, never by the
buffer), a change of beta. The run is split at a random point: the prefix runs on
one buffer, whose state is saved with ``namedschema.save`` (plain data; the same
file is also saved incrementally at earlier points) and loaded into a buffer built
with another seed, or rebuilt from the file alone (``from_state_dict``); the
suffix then draws and writes exactly what the uninterrupted buffer does. One
example also continues in a fresh interpreter.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import namedschema
from namedschema.training.replay import PrioritizedReplayBuffer, ReplayBuffer
from tests.helpers import run_fresh

Step = namedschema.NamedArrayTupleSchema("ReplayPropStep", "obs action")
CAPACITY = 7


def example():
    return Step(np.zeros(2, np.float32), np.int64(0))


ops = st.one_of(
    st.tuples(st.just("extend"), st.integers(1, 2 * CAPACITY)),
    st.tuples(st.just("add"), st.just(1)),
    st.tuples(st.just("sample"), st.integers(1, 9)),
    st.tuples(st.just("update"), st.lists(st.tuples(st.integers(0, 10 ** 6),
                                                    st.floats(0.01, 100.0)), min_size=1,
                                          max_size=6)),
    st.tuples(st.just("beta"), st.floats(0.0, 1.0)))


def apply(rb, op, counter):
    """Run one operation; return what it produced (for comparison)."""
    kind, arg = op
    if kind == "extend":
        ids = np.arange(counter[0], counter[0] + arg)
        counter[0] += arg
        rb.extend(Step(np.stack([ids, -ids], 1).astype(np.float32), ids))
        return None
    if kind == "add":
        counter[0] += 1
        rb.add(Step(np.array([counter[0], 0.5], np.float32), counter[0]))
        return None
    if len(rb) == 0:
        return "empty"
    if kind == "sample":
        out = rb.sample(arg)
        if isinstance(rb, PrioritizedReplayBuffer):
            batch, index, weights = out
            return (batch.obs.tobytes(), batch.action.tobytes(), index.tobytes(),
                    weights.tobytes())
        return (out.obs.tobytes(), out.action.tobytes())
    if kind == "update" and isinstance(rb, PrioritizedReplayBuffer):
        index = np.array([i % len(rb) for i, _ in arg])
        rb.update_priorities(index, np.array([p for _, p in arg]))
    if kind == "beta" and isinstance(rb, PrioritizedReplayBuffer):
        rb.beta = arg
    return None


def final(rb):
    state = rb.state_dict()
    return [np.asarray(v).tobytes() if not isinstance(v, tuple) else
            [f.tobytes() for f in v] for v in state.values()]


@given(prioritized=st.booleans(), sequence=st.lists(ops, max_size=25), data=st.data())
def test_save_load_at_any_point_continues_identically(tmp_path_factory, prioritized,
                                                      sequence, data):
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    split = data.draw(st.integers(0, len(sequence)), label="split")
    rebuild = data.draw(st.booleans(), label="from_state_dict")
    path = tmp_path_factory.mktemp("rb") / "rb.nsb"

    twin, counter = cls(example(), CAPACITY, seed=3), [0]
    expected = [apply(twin, op, counter) for op in sequence]

    rb, counter = cls(example(), CAPACITY, seed=3), [0]
    got = []
    for i, op in enumerate(sequence[:split]):
        got.append(apply(rb, op, counter))
        if i % 3 == 0:   # earlier saves to the same file: the last one is incremental
            namedschema.save(rb.state_dict(), path, incremental=True)
    namedschema.save(rb.state_dict(), path, incremental=True)
    loaded = namedschema.load(path)
    if rebuild:
        rb = cls.from_state_dict(loaded)
    else:
        rb = cls(example(), CAPACITY, seed=99)
        rb.load_state_dict(loaded)
    got += [apply(rb, op, counter) for op in sequence[split:]]
    assert got == expected
    assert final(rb) == final(twin)


def test_continues_identically_in_a_fresh_interpreter(tmp_path):
    sequence = [("extend", 5), ("sample", 4), ("update", [(1, 3.0), (4, 0.5)]),
                ("extend", 9), ("sample", 6), ("add", 1), ("update", [(2, 9.0)]),
                ("sample", 8), ("beta", 0.9), ("extend", 3), ("sample", 5)]
    for prioritized in (False, True):
        cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
        twin, counter = cls(example(), CAPACITY, seed=1), [0]
        for op in sequence:
            apply(twin, op, counter)
        rb, counter = cls(example(), CAPACITY, seed=1), [0]
        for op in sequence[:5]:
            apply(rb, op, counter)
        namedschema.save(rb.state_dict(), tmp_path / "rb.nsb")
        run_fresh(f"""
            import numpy as np, namedschema
            from namedschema.training.replay import {cls.__name__} as cls
            from tests.training.test_replay_properties import apply
            rb = cls.from_state_dict(namedschema.load({str(tmp_path / "rb.nsb")!r}))
            counter = [{counter[0]}]
            for op in {sequence[5:]!r}:
                apply(rb, op, counter)
            namedschema.save(rb.state_dict(), {str(tmp_path / "after.nsb")!r})
            """)
        after = namedschema.load(tmp_path / "after.nsb")
        for key, value in twin.state_dict().items():
            if isinstance(value, tuple):
                for a, b in zip(value, after[key], strict=True):
                    np.testing.assert_array_equal(a, b)
            else:
                np.testing.assert_array_equal(np.asarray(value), np.asarray(after[key]))
