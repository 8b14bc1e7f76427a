"""State-dict values as checkpoint data and back (namedschema.state.plain)."""

from __future__ import annotations

import numpy as np

from namedschema.state.plain import from_data, to_data


def test_dicts_round_trip_even_when_they_look_like_the_markers():
    for value in ({"namedschema.int": "5"}, {"namedschema.keyed": [[1, 2]]},
                  {0: {"namedschema.int": "7"}, "lr": 0.1}, {"a": 1 << 80}, {3: [1, (2, 3)]}):
        assert from_data(to_data(value, "state")) == value
    back = from_data(to_data({"x": np.arange(3)}, "state"))
    assert np.array_equal(back["x"], np.arange(3))
