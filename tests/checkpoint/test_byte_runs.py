"""The comparison at the heart of an incremental save: which byte runs differ from the file."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from namedschema.checkpoint import _tracking as tracking
from tests.helpers import examples


def _reference(new: np.ndarray, old: np.ndarray) -> list[tuple[int, int]]:
    """Byte by byte: differing grains, joined when closer than MERGE_GAP."""
    g = tracking.GRAIN
    n = new.size
    flags = [bool((new[k:k + g] != old[k:k + g]).any()) for k in range(0, n, g)]
    runs: list[list[int]] = []
    for i, f in enumerate(flags):
        if not f:
            continue
        if runs and i * g - runs[-1][1] < tracking.MERGE_GAP:
            runs[-1][1] = min((i + 1) * g, n)
        else:
            runs.append([i * g, min((i + 1) * g, n)])
    return [(a, b) for a, b in runs]


@settings(max_examples=examples(300), deadline=None)
@given(size=st.integers(0, 6000),
       edits=st.lists(st.tuples(st.integers(0, 5999), st.integers(1, 300)), max_size=12),
       seed=st.integers(0, 2**32 - 1))
def test_byte_runs_are_exactly_the_differing_grains(size, edits, seed):
    rng = np.random.default_rng(seed)
    old = rng.integers(0, 256, size, dtype=np.uint8)
    new = old.copy()
    for start, length in edits:
        if start < size:
            stop = min(size, start + length)
            new[start:stop] ^= rng.integers(1, 256, stop - start, dtype=np.uint8)
    runs = tracking._byte_runs(new, old)
    assert runs == _reference(new, old)
    covered = np.zeros(size, bool)
    for a, b in runs:
        covered[a:b] = True
    assert not (new != old)[~covered].any()
