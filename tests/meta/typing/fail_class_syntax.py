"""Calls and accesses type checkers must reject; each marked line must give an error
in mypy and in pyright, and no other line may."""

import numpy as np

from namedschema import NamedArrayTuple, NamedTuple


class Config(NamedTuple):
    lr: float
    name: str = "run"


class Samples(NamedArrayTuple):
    observation: np.ndarray
    action: np.ndarray


Config()  # expect-error: missing argument
Config(0.1, "a", 3)  # expect-error: too many arguments
Config(0.1, nam="x")  # expect-error: wrong field name
Config("fast")  # expect-error: wrong type
_ = Config(0.1).nmae  # expect-error: wrong attribute
Samples(np.zeros(2))  # expect-error: missing argument
Samples(np.zeros(2), np.zeros(2), np.zeros(2))  # expect-error: too many arguments
Samples(observation=np.zeros(2), actions=np.zeros(2))  # expect-error: wrong field name
_ = Samples(np.zeros(2), np.zeros(2))[0].reward  # expect-error: wrong attribute
c = Config(0.1)
c.lr = 0.2  # expect-error: fields are read-only
lr: str = c.lr  # expect-error: wrong field type
_ = Samples._make([1, 2]).reward  # expect-error: wrong attribute on _make's result
_ = c._replace(lr=1.0).nmae  # expect-error: wrong attribute on _replace's result
