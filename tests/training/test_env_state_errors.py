"""A captured env state restored into an env built differently: a NamedSchemaError naming where."""

from __future__ import annotations

import pytest

from namedschema.errors import NamedSchemaError
from namedschema.state.env import EnvStateError, capture_env, restore_env

gym = pytest.importorskip("gymnasium")


def test_a_state_of_another_env_raises_a_namedschema_error_naming_the_layer():
    cart = gym.make("CartPole-v1")
    cart.reset(seed=0)
    state, reason = capture_env(cart, "env")
    assert reason is None
    other = gym.make("MountainCar-v0")
    with pytest.raises(EnvStateError, match=r"env: the checkpoint has a .* here") as info:
        restore_env(other, state, "env")
    assert isinstance(info.value, NamedSchemaError) and isinstance(info.value, ValueError)
