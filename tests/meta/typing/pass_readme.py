"""The README's patterns as a user writes them, checked by mypy --strict and pyright.

Keep in step with README.md (quickstart, class syntax, buffers, checkpoints): a change there
that stops type-checking, or starts leaking ``Any`` out of a named tuple, fails here.
"""

import pickle
from typing import assert_type

import numpy as np
import numpy.typing as npt

import namedschema
from namedschema import NamedArrayTupleSchema
from namedschema._core.dynamic_types import DynamicNamedArrayTuple
from namedschema.buffer import buffer_from_example
from namedschema.checkpoint import CheckpointInfo

# Quickstart: a factory-made schema (fields unknown to checkers; the API keeps its types).
Dyn = NamedArrayTupleSchema("Samples", ["observation", "action", "reward"])
dyn = Dyn(np.zeros((1000, 84, 84), np.uint8), np.zeros(1000, np.int64), np.zeros(1000))
dyn[3] = Dyn(np.ones((84, 84), np.uint8), 2, 1.0)
assert_type(dyn[10:42], DynamicNamedArrayTuple)
data = pickle.dumps(dyn, protocol=4)


# Class syntax: a batch (arrays) and a step (one of each, Python scalars allowed).
class Samples(namedschema.NamedArrayTuple):
    observation: npt.NDArray[np.uint8]
    action: npt.NDArray[np.int64]
    reward: npt.NDArray[np.float64]


class Step(namedschema.NamedTuple):
    observation: npt.NDArray[np.uint8]
    action: int
    reward: float


buf = Samples(np.zeros((1000, 84, 84), np.uint8), np.zeros(1000, np.int64), np.zeros(1000))
buf[3] = Step(np.ones((84, 84), np.uint8), 2, 1.0)     # one step into every field
batch = buf[10:42]
assert_type(batch, Samples)
assert_type(batch.reward, npt.NDArray[np.float64])

# A step unpacks and indexes with its fields' types: no Any.
step = Step(np.ones((84, 84), np.uint8), 2, 1.0)
frame, action, reward = step
assert_type(frame, npt.NDArray[np.uint8])
assert_type(action, int)
assert_type(reward, float)
assert_type(step[1], int)
assert_type(step[-1], float)
assert_type(step._replace(reward=0.5), Step)
for name in step._fields:
    assert_type(name, str)


class Point(namedschema.NamedTuple):
    x: int
    y: float = 0.0


x, y = Point(1)
assert_type(x, int)
assert_type(y, float)
assert_type(Point(1, 2.0)[0], int)

# Buffers: the buffer has the example's type.
Transition = NamedArrayTupleSchema("Transition", ["observation", "action", "reward"])
example_step = Transition(np.zeros((84, 84), np.uint8), np.int64(0), np.float32(0))
samples = buffer_from_example(example_step, (64, 8), share_memory=True)
assert_type(samples, DynamicNamedArrayTuple)
typed = buffer_from_example(buf[0], (64, 8))
assert_type(typed, Samples)
assert_type(buffer_from_example(None, 3), None)

# Checkpoints.
namedschema.save(samples, "samples.nsb")
view = namedschema.load("samples.nsb", mmap_mode="r")
info = namedschema.inspect("samples.nsb")
assert_type(info, CheckpointInfo)
print(info)
namedschema.save(samples, "live.nsb", incremental=True)
samples[5] = example_step
namedschema.save(samples, "live.nsb", incremental=True)
