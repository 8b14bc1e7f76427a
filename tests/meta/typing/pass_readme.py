"""The README's patterns as a user writes them, checked by mypy --strict and pyright (strict).

Keep in step with README.md (quickstart, class syntax, buffers, checkpoints, schema changes,
rlpyt resume, replay buffers and run checkpoints, Ray): a change there that stops
type-checking, or starts leaking ``Any`` out of a named tuple, fails here. The file is only
type-checked, never run. tests/meta/test_static_typing.py also checks that it calls every
entry point the README shows.
"""
# pyright: strict

import pickle
from typing import Any, assert_type

import numpy as np
import numpy.typing as npt

import namedschema
import namedschema.errors
from namedschema import NamedArrayTupleSchema
from namedschema._core.schema import DynamicNamedArrayTuple
from namedschema.buffer import buffer_from_example
from namedschema.checkpoint import BackgroundSave, CheckpointInfo, verify
from namedschema.evolution import UpgradeReport
from namedschema.ray import ShardedReplay
from namedschema.rlpyt import resumable
from namedschema.state import capture_env, restore_env
from namedschema.training import PrioritizedSample

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
pending = namedschema.save(samples, "live.nsb", incremental=True, background=True)
assert_type(pending, BackgroundSave)
pending.wait()
assert_type(verify("live.nsb"), CheckpointInfo)

# What a class-syntax schema declares.
assert_type(namedschema.declared_dtypes(Samples), dict[str, np.dtype[Any] | None])
assert_type(namedschema.has_class_body(Samples), bool)

# Code changes between runs: load into today's schemas, or upgrade what was loaded.
NewStep = NamedArrayTupleSchema("Step", ["observation", "action", "reward", "timeout"],
                                defaults=(np.bool_(False),))
old = namedschema.load("samples.nsb", schemas=[NewStep])
new, report = namedschema.load("samples.nsb", schemas=NewStep, extra="keep", casting="safe",
                               report=True)
assert_type(report, UpgradeReport)
print(report.kept_fields("samples"))
upgraded = namedschema.upgrade({"samples": old}, {"Step": NewStep}, extra="ignore")
upgraded, report = namedschema.upgrade(upgraded, [NewStep], report=True)
assert_type(report, UpgradeReport)
try:
    namedschema.upgrade(old, NewStep)
except namedschema.MissingFieldError as exc:
    print(exc.schema, exc.field, exc.path)


# rlpyt: resumable gives the runner back, typed as it was (rlpyt itself has no types, so a
# class of the user's stands in for MinibatchRl here).
class Runner:
    def train(self) -> None: ...


runner = resumable(Runner(), "run.nsc", every_steps=80)
assert_type(runner, Runner)
runner.train()
resumable(Runner(), "run.nsc", every_itrs=10, accept_changes=["algo.learning_rate"])
try:
    resumable(Runner(), "run.nsc", accept_changes=True, incremental=False, background=False)
except namedschema.errors.ResumeError as exc:
    print(exc)
patch = namedschema.patch_rlpyt()
print(patch, namedschema.unpatch_rlpyt())

# Any PyTorch loop: replay buffers and the run's checkpoint.
Transition2 = namedschema.NamedArrayTupleSchema("Step", "obs action reward")
rb = namedschema.PrioritizedReplayBuffer(Transition2(np.zeros(4, np.float32), 0, 0.0), 10_000,
                                         seed=1)
uniform = namedschema.ReplayBuffer(Transition2(np.zeros(4, np.float32), 0, 0.0), 1_000)
ckpt = namedschema.RunCheckpoint("loop.nsc", every_steps=1_000)
ckpt.track(replay=rb, uniform=uniform)
ckpt.restore()
for t in range(ckpt.next_step, 3_000):
    rb.add(Transition2(np.full(4, t, np.float32), t % 4, 1.0))
    drawn, index, weights = rb.sample(32)
    rb.update_priorities(index, np.abs(drawn.reward) + 0.1)
    ckpt.maybe_save(t)
    assert_type(drawn, DynamicNamedArrayTuple)
    assert_type(index, npt.NDArray[np.int64])
    assert_type(weights, npt.NDArray[np.float32])
assert_type(ckpt.next_step, int)
assert_type(rb, namedschema.PrioritizedReplayBuffer[DynamicNamedArrayTuple])
copy = namedschema.ReplayBuffer.from_state_dict(uniform.state_dict())
assert_type(copy, namedschema.ReplayBuffer)
assert_type(copy, namedschema.ReplayBuffer[Any])

# Buffers are generic in an array tuple example's type: samples keep their fields' types.
one_step = Samples(np.zeros((84, 84), np.uint8), np.zeros((), np.int64), np.zeros(()))
typed_rb = namedschema.ReplayBuffer(one_step, 1_000, seed=0)
assert_type(typed_rb, namedschema.ReplayBuffer[Samples])
typed_rb.extend(buf[:10])
typed_rb.add(buf[3])
typed_rb.add(Step(np.ones((84, 84), np.uint8), 2, 1.0))   # a record of the same fields
sampled = typed_rb.sample(32)
assert_type(sampled, Samples)
frames: npt.NDArray[np.uint8] = sampled.observation
rewards: npt.NDArray[np.float64] = sampled.reward
assert_type(sampled.action, npt.NDArray[np.int64])
assert_type(typed_rb.storage, Samples)
prioritized = namedschema.PrioritizedReplayBuffer(buf[0], 1_000, alpha=0.6, seed=0)
prioritized.extend(buf[:10])
first, first_index, first_weights = prioritized.sample(8)
assert_type(first, Samples)
assert_type(prioritized.sample(8), PrioritizedSample[Samples])
prioritized.update_priorities(first_index, np.abs(first.reward) + 0.1)
assert_type(first_weights * 2, npt.NDArray[np.float32])
resumed = namedschema.PrioritizedReplayBuffer[Samples].from_state_dict(prioritized.state_dict())
assert_type(resumed, namedschema.PrioritizedReplayBuffer[Samples])
as_uniform: namedschema.ReplayBuffer[Samples] = typed_rb
from_record = namedschema.ReplayBuffer(Step(np.ones((84, 84), np.uint8), 2, 1.0), 10)
assert_type(from_record, namedschema.ReplayBuffer[Any])   # its storage's schema is made at run time
state, why_not = capture_env(object())
if state is not None:
    restore_env(object(), state)

# Beyond one machine.
sharded = ShardedReplay(buf[0], 100_000, num_shards=4, prioritized=True)
sharded.extend(buf)
sharded.add(Step(np.ones((84, 84), np.uint8), 2, 1.0))
across, global_index, across_weights = sharded.sample(64)
assert_type(across, Samples)
assert_type(global_index, npt.NDArray[np.int64])
sharded.update_priorities(global_index, across_weights + 0.1)
print(sharded.checkpoint("replay.ckpt").path)
assert_type(ShardedReplay(buf[0], 1_000, num_shards=2).sample(8), Samples)
dynamic = ShardedReplay(Transition2(np.zeros(4, np.float32), 0, 0.0), 1_000, num_shards=2)
dynamic.add(Transition2(np.zeros(4, np.float32), 0, 0.0))
assert_type(dynamic.sample(8), DynamicNamedArrayTuple)
with ShardedReplay.restore("replay.ckpt", num_shards=8) as restored:
    assert_type(restored, ShardedReplay[Any, Any])
