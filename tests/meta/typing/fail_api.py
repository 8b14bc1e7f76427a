"""Top-level API calls type checkers must reject (see fail_class_syntax.py for the markers)."""

import numpy as np
import numpy.typing as npt

import namedschema
from namedschema import NamedArrayTuple, NamedTuple
from namedschema.ray import ShardedReplay

namedschema.load("replay.nsb", mmap_mode="w")  # expect-error: not a mmap mode
namedschema.save({"a": 1})  # expect-error: missing path
namedschema.is_namedtuple()  # expect-error: missing argument
namedschema.inspect()  # expect-error: missing path
namedschema.patch_rlpyt(True)  # expect-error: options are keyword-only
namedschema.unpatch_rlpyt(1)  # expect-error: takes no argument
namedschema.load("replay.nsb", schemas=[], extra="drop")  # expect-error: not an extra choice
namedschema.upgrade({}, [], casting="same-kind")  # expect-error: not a casting rule
namedschema.upgrade({}, "train")  # expect-error: a module's name is not schemas
namedschema.lod("replay.nsb")  # expect-error: no such name (the lazy names are typed)
namedschema.RunCheckpoint("run.nsc").next_step + None  # expect-error: an int


# Replay buffers are generic in the example's array tuple type.
class Samples(NamedArrayTuple):
    obs: npt.NDArray[np.float32]
    reward: npt.NDArray[np.float64]


class Other(NamedArrayTuple):
    obs: npt.NDArray[np.float32]
    reward: npt.NDArray[np.float64]


class Step(NamedTuple):
    obs: npt.NDArray[np.float32]
    reward: float


rb = namedschema.ReplayBuffer(Samples(np.zeros(4, np.float32), np.zeros(())), 100)
other = Other(np.zeros((8, 4), np.float32), np.zeros(8))
rb.extend(other)  # expect-error: another schema's batch
rb.add(other[0])  # expect-error: another array schema's step (records are accepted)
ints: npt.NDArray[np.int64] = rb.sample(4).reward  # expect-error: the field is float64
_ = rb.sample(4).rewards  # expect-error: no such field
prb = namedschema.PrioritizedReplayBuffer(Samples(np.zeros(4, np.float32), np.zeros(())), 100)
_ = prb.sample(4).obs  # expect-error: a prioritized sample is (batch, indices, weights)
prb.extend(other)  # expect-error: another schema's batch
namedschema.ReplayBuffer[Step]  # expect-error: a record is not an array tuple
sharded = ShardedReplay(Samples(np.zeros(4, np.float32), np.zeros(())), 100, num_shards=2)
sharded.extend(other)  # expect-error: another schema's batch
sharded.add(other[0])  # expect-error: another array schema's step
ints = sharded.sample(4).reward  # expect-error: the field is float64
sharded_p = ShardedReplay(Samples(np.zeros(4, np.float32), np.zeros(())), 100, num_shards=2,
                          prioritized=True)
_ = sharded_p.sample(4).obs  # expect-error: a prioritized sample is (batch, indices, weights)
