"""Class-syntax schemas: what type checkers must infer (checked by mypy and pyright)."""

from typing import Any, ClassVar, assert_type

import numpy as np
import numpy.typing as npt

import namedschema
from namedschema import NamedArrayTuple, NamedTuple


class Samples(NamedArrayTuple):
    """Experience."""

    observation: npt.NDArray[np.uint8]
    action: npt.NDArray[np.int64]
    reward: npt.NDArray[np.float32] | float = 0.0
    LIMIT: ClassVar[int] = 3

    def total(self) -> float:
        return float(np.sum(self.reward))

    @property
    def steps(self) -> int:
        return len(self.action)

    @classmethod
    def empty(cls, n: int) -> "Samples":
        return cls(np.zeros(n, np.uint8), np.zeros(n, np.int64))


class Config(NamedTuple):
    lr: float
    name: str = "run"


obs = np.zeros((4, 2), np.uint8)
act = np.zeros(4, np.int64)

# Constructor: positional, keyword, defaults.
s = Samples(obs, act)
assert_type(s, Samples)
assert_type(Samples(observation=obs, action=act, reward=1.0), Samples)
assert_type(Samples(obs, act, np.ones(4, np.float32)), Samples)
c = Config(0.1)
assert_type(c, Config)
assert_type(Config(lr=0.1, name="x"), Config)

# Field types and attribute access.
assert_type(s.observation, npt.NDArray[np.uint8])
assert_type(s.action, npt.NDArray[np.int64])
assert_type(s.reward, npt.NDArray[np.float32] | float)
assert_type(c.lr, float)
assert_type(c.name, str)
assert_type(Samples.LIMIT, int)

# Methods, properties and classmethods from the class body.
assert_type(s.total(), float)
assert_type(s.steps, int)
assert_type(Samples.empty(3), Samples)

# Indexing an array tuple returns the same schema; assignment is accepted.
assert_type(s[0], Samples)
assert_type(s[1:3], Samples)
assert_type(s[np.array([0, 2])], Samples)
assert_type(s[1:3].observation, npt.NDArray[np.uint8])
s[0] = Samples(obs[0], act[0], 1.0)
s[1:] = 0
assert_type(s.get(0), Any)
for name, value in s.items():
    assert_type(value, Any)
    assert_type(name, str)

# The namedtuple API.
assert_type(s._replace(reward=2.0), Samples)
assert_type(c._replace(lr=0.2), Config)
assert_type(Samples._fields, tuple[str, ...])
assert_type(s._fields, tuple[str, ...])
assert_type(Config._field_defaults, dict[str, Any])
assert_type(Config._make([0.1, "x"]), Config)
assert_type(c._asdict(), dict[str, Any])

# Instances are tuples and schema instances; the classes are schemas. To checkers,
# namedschema.NamedTuple is typing.NamedTuple (records unpack and index with their
# fields' types), so an array tuple is a NamedArrayTuple and a tuple, not a NamedTuple.
t: tuple[Any, ...] = c
record: namedschema.NamedTuple = c
base: tuple[Any, ...] = s
array_base: NamedArrayTuple = s


def first_step(batch: Samples) -> Samples:
    return batch[0]


def generic_index(batch: NamedArrayTuple) -> NamedArrayTuple:
    return batch[1:]


def unpack(config: Config) -> None:
    match config:
        case Config(lr, name):
            assert_type(lr, float)
            assert_type(name, str)
    lr2, name2 = config
