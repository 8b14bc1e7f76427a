"""One spelling of a field's path: a save error and an upgrade error name a field alike."""

from __future__ import annotations

import numpy as np
import pytest

import namedschema
from namedschema.errors import FieldMismatchError, NotDataError

KEY = "observations of the second camera, kept for the replay buffer"
Old = namedschema.NamedArrayTupleSchema("Step", "obs reward")


class Step(namedschema.NamedArrayTuple):
    obs: np.float32
    reward: float


def test_save_and_upgrade_name_a_field_alike(tmp_path):
    with pytest.raises(NotDataError) as saved:
        namedschema.save({"runs": [{KEY: Old(object(), 1.0)}]}, tmp_path / "x.ns")
    with pytest.raises(FieldMismatchError) as upgraded:
        namedschema.upgrade({"runs": [{KEY: Old(np.zeros(3), 1.0)}]}, Step)
    expected = f"runs[0][{KEY!r}].obs"   # the whole key: a long one is not cut short
    assert saved.value.path == expected
    assert upgraded.value.path == expected
    assert str(upgraded.value).startswith(expected + ":")
