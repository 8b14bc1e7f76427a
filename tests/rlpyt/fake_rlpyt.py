'''A tiny stand-in for rlpyt, written for these tests, that reproduces its patterns.

Used only where no real rlpyt is present (``RLPYT_SRC`` unset: a user's clone, an
sdist; CI always has the real one): tests/rlpyt/test_rlpyt_patterns.py writes this
package to a temporary directory and runs its scenarios on it as on the real rlpyt.
It has rlpyt's module paths and class names (so ``patch_rlpyt`` and the shared
driver treat it like the real thing), and tests/rlpyt/test_fake_rlpyt_vs_real.py
checks it against the real rlpyt. The patterns that break pickling there:

* module-level ``namedarraytuple(...)`` calls (``SamplesFromReplay``);
* a module global type that stays ``None`` until a constructor assigns it
  (``BufferSamples`` in ``rlpyt.replays.frame``);
* buffers built from an example with ``buffer_from_example``;
* a ring buffer with a cursor, uniform sampling with ``np.random``;
* a frame store with a view of another array (``samples_new_frames``);
* a sum tree whose ``priorities`` is a view of ``tree``;
* ``collections.namedtuple`` imported into a module and called at run time.

write_fake_rlpyt   write the package under a directory; returns that directory
FILES              relative path -> source of each module
'''

from __future__ import annotations

import os
import textwrap

FILES = {}

for _package in ("rlpyt", "rlpyt/agents", "rlpyt/envs", "rlpyt/utils", "rlpyt/replays",
                 "rlpyt/replays/non_sequence"):
    FILES[_package + "/__init__.py"] = ""

FILES["rlpyt/utils/collections.py"] = '''
import sys
from collections import namedtuple

# What rlpyt does, as tests/rlpyt/test_fake_rlpyt_vs_real.py checks against
# the real rlpyt: reserved names, errors wrapped in a bare Exception naming the
# field, a None field written to when the value's field is not None, and
# predicates that look at the exact class layout (type(cls) is type, MRO length).
RESERVED_NAMES = ("get", "items")


def namedarraytuple(typename, field_names, return_namedtuple_cls=False,
                    classname_suffix=False):
    """A classic run-time class: a namedtuple subclass indexing every field."""
    nt_typename = typename
    if classname_suffix:
        nt_typename, typename = typename + "_nt", typename + "_nat"
    module = sys._getframe(1).f_globals.get("__name__", "__main__")
    base = namedtuple(nt_typename, field_names, module=module)
    for name in base._fields:
        if name in RESERVED_NAMES:
            raise ValueError(f"Disallowed field name: {name}.")

    def __getitem__(self, loc):
        try:
            return type(self)(*(None if v is None else v[loc] for v in self))
        except IndexError as exc:
            for name, v in zip(self._fields, self):
                if v is None:
                    continue
                try:
                    v[loc]
                except IndexError:
                    raise Exception(f"Occured in {self.__class__} at field "
                                    f"'{name}'.") from exc

    def __setitem__(self, loc, value):
        if not (isinstance(value, tuple)
                and getattr(value, "_fields", None) == self._fields):
            value = tuple(None if s is None else value for s in self)
        j = 0
        try:
            for j, (s, v) in enumerate(zip(self, value)):
                if s is not None or v is not None:
                    s[loc] = v
        except (ValueError, IndexError, TypeError) as exc:
            raise Exception(f"Occured in {self.__class__} at field "
                            f"'{self._fields[j]}'.") from exc

    def __contains__(self, key):
        return key in self._fields

    def get(self, index):
        return tuple.__getitem__(self, index)

    def items(self):
        yield from zip(self._fields, self)

    namespace = {"__slots__": (), "__getitem__": __getitem__,
                 "__setitem__": __setitem__, "__contains__": __contains__,
                 "get": get, "items": items}
    cls = type(typename, (base,), namespace)
    cls.__module__ = module
    return (cls, base) if return_namedtuple_cls else cls


def is_namedtuple_class(obj):
    if type(obj) is not type or obj is type or len(obj.mro()) != 3:
        return False
    return obj.mro()[1] is tuple and all(
        hasattr(obj, a) for a in ("_fields", "_asdict", "_make", "_replace"))


def is_namedarraytuple_class(obj):
    if type(obj) is not type or obj is type or len(obj.mro()) != 4:
        return False
    return is_namedtuple_class(obj.mro()[1]) and all(hasattr(obj, a) for a in RESERVED_NAMES)


def is_namedtuple(obj):
    return is_namedtuple_class(type(obj))


def is_namedarraytuple(obj):
    return is_namedarraytuple_class(type(obj))


def namedarraytuple_like(namedtuple_or_class, classname_suffix=False):
    example = namedtuple_or_class
    cls = example if isinstance(example, type) else type(example)
    if is_namedtuple_class(cls):
        return namedarraytuple(cls.__name__, cls._fields, classname_suffix=classname_suffix)
    if is_namedarraytuple_class(cls):
        return cls
    raise TypeError("Input must be namedtuple or namedarraytuple instance"
                    f" or class, got {type(example)}.")


DocExampleNat = namedarraytuple("DocExampleNat", ["field_1", "field_2"])
'''

FILES["rlpyt/utils/buffer.py"] = '''
import numpy as np

from rlpyt.utils.collections import namedarraytuple_like


def build_array(example, leading_dims, share_memory=False):
    a = np.asarray(example)
    if not isinstance(leading_dims, (list, tuple)):
        leading_dims = (leading_dims,)
    return np.zeros(tuple(leading_dims) + a.shape, dtype=a.dtype)


def buffer_from_example(example, leading_dims, share_memory=False):
    if example is None:
        return None
    try:
        cls = namedarraytuple_like(example)
    except TypeError:
        return build_array(example, leading_dims, share_memory)
    return cls(*(buffer_from_example(v, leading_dims, share_memory) for v in example))


def get_leading_dims(buffer_, n_dim=1):
    if isinstance(buffer_, np.ndarray):
        return buffer_.shape[:n_dim]
    dims = {get_leading_dims(b, n_dim) for b in buffer_ if b is not None}
    if len(dims) != 1:
        raise ValueError(f"mismatched leading dims {dims}")
    return dims.pop()
'''

FILES["rlpyt/agents/base.py"] = '''
from rlpyt.utils.collections import namedarraytuple

AgentInputs = namedarraytuple("AgentInputs",
                              ["observation", "prev_action", "prev_reward"])
'''

FILES["rlpyt/envs/base.py"] = '''
from collections import namedtuple

EnvStep = namedtuple("EnvStep", ["observation", "reward", "done", "env_info"])
EnvInfo = namedtuple("EnvInfo", [])
EnvSpaces = namedtuple("EnvSpaces", ["observation", "action"])
'''

FILES["rlpyt/replays/base.py"] = '''
class BaseReplayBuffer:

    async_ = False

    def append_samples(self, samples):
        raise NotImplementedError

    def sample_batch(self, batch_B, batch_T=None):
        raise NotImplementedError
'''

FILES["rlpyt/replays/n_step.py"] = '''
import numpy as np

from rlpyt.replays.base import BaseReplayBuffer
from rlpyt.utils.buffer import buffer_from_example, get_leading_dims


class BaseNStepReturnBuffer(BaseReplayBuffer):
    """Ring buffer [T, B] with a cursor (rlpyt's also keeps n-step returns)."""

    def __init__(self, example, size, B, discount=1, n_step_return=1):
        self.T, self.B, self.t = size // B, B, 0
        self.samples = buffer_from_example(example, (self.T, B))
        self._buffer_full = False

    def append_samples(self, samples):
        T, B = get_leading_dims(samples, 2)
        idxs = np.arange(self.t, self.t + T) % self.T
        self.samples[idxs] = samples
        self._buffer_full = self._buffer_full or self.t + T >= self.T
        self.t = (self.t + T) % self.T
        return T, idxs
'''

FILES["rlpyt/replays/non_sequence/n_step.py"] = '''
from rlpyt.agents.base import AgentInputs
from rlpyt.replays.n_step import BaseNStepReturnBuffer
from rlpyt.utils.collections import namedarraytuple

SamplesFromReplay = namedarraytuple("SamplesFromReplay",
    ["agent_inputs", "action", "return_", "done", "done_n", "target_inputs"])


class NStepReturnBuffer(BaseNStepReturnBuffer):

    def extract_batch(self, T_idxs, B_idxs):
        s = self.samples
        return SamplesFromReplay(
            agent_inputs=AgentInputs(self.extract_observation(T_idxs, B_idxs),
                                     s.action[T_idxs - 1, B_idxs],
                                     s.reward[T_idxs - 1, B_idxs]),
            action=s.action[T_idxs, B_idxs], return_=s.reward[T_idxs, B_idxs],
            done=s.done[T_idxs, B_idxs], done_n=s.done[T_idxs, B_idxs],
            target_inputs=None)

    def extract_observation(self, T_idxs, B_idxs):
        return self.samples.observation[T_idxs, B_idxs]
'''

FILES["rlpyt/replays/non_sequence/uniform.py"] = '''
import numpy as np

from rlpyt.replays.non_sequence.n_step import NStepReturnBuffer


class UniformReplay:
    """Samples uniformly with np.random."""

    def sample_batch(self, batch_B):
        T_idxs, B_idxs = self.sample_idxs(batch_B)
        return self.extract_batch(T_idxs, B_idxs)

    def sample_idxs(self, batch_B):
        high = self.T if self._buffer_full else self.t
        return (np.random.randint(0, high, size=batch_B),
                np.random.randint(0, self.B, size=batch_B))


class UniformReplayBuffer(UniformReplay, NStepReturnBuffer):
    pass
'''

FILES["rlpyt/replays/frame.py"] = '''
from rlpyt.utils.buffer import buffer_from_example, get_leading_dims
from rlpyt.utils.collections import namedarraytuple

BufferSamples = None


class FrameBufferMixin:
    """Stores each observation's newest frame once; old frames are a view."""

    def __init__(self, example, **kwargs):
        field_names = [f for f in example._fields if f != "observation"]
        global BufferSamples
        BufferSamples = namedarraytuple("BufferSamples", field_names)
        buffer_example = BufferSamples(*(v for k, v in example.items()
                                         if k != "observation"))
        super().__init__(example=buffer_example, **kwargs)
        self.n_frames = n = get_leading_dims(example.observation, n_dim=1)[0]
        self.samples_frames = buffer_from_example(example.observation[0],
                                                  (self.T + n - 1, self.B))
        self.samples_new_frames = self.samples_frames[n - 1:]

    def append_samples(self, samples):
        start = self.t
        T, idxs = super().append_samples(BufferSamples(
            *(v for k, v in samples.items() if k != "observation")))
        self.samples_new_frames[idxs] = samples.observation[:, :, -1]
        if start == 0:
            for f in range(self.n_frames - 1):
                self.samples_frames[f] = samples.observation[0, :, f]
        elif self.t < start and self.n_frames > 1:
            self.samples_frames[:self.n_frames - 1] = self.samples_frames[-(self.n_frames - 1):]
        return T, idxs
'''

FILES["rlpyt/replays/sum_tree.py"] = '''
import numpy as np


class SumTree:
    """Leaves are a [T, B] view of the tree array; parents hold sums."""

    def __init__(self, T, B, default_value=1.0):
        self.T, self.B, self.default_value = T, B, default_value
        self.levels = int(np.ceil(np.log2(T * B))) + 1
        self.tree = np.zeros(2 ** self.levels - 1)
        self.low_idx = 2 ** (self.levels - 1) - 1
        self.priorities = self.tree[self.low_idx:self.low_idx + T * B].reshape(T, B)

    def _rebuild(self):
        for level in range(self.levels - 2, -1, -1):
            lo, hi = 2 ** level - 1, 2 ** (level + 1) - 1
            idx = np.arange(lo, hi)
            self.tree[idx] = self.tree[2 * idx + 1] + self.tree[2 * idx + 2]

    def advance(self, idxs):
        self.priorities[idxs] = self.default_value
        self._rebuild()

    def sample(self, n):
        values = np.random.rand(n) * self.tree[0]
        idx = np.zeros(n, dtype=np.int64)
        for _ in range(self.levels - 1):
            left = 2 * idx + 1
            go_right = values > self.tree[left]
            values = np.where(go_right, values - self.tree[left], values)
            idx = np.where(go_right, left + 1, left)
        self.prev_tree_idxs = idx
        return np.divmod(idx - self.low_idx, self.B), self.tree[idx]

    def update_batch_priorities(self, priorities):
        self.tree[self.prev_tree_idxs] = priorities
        self._rebuild()
'''

FILES["rlpyt/replays/non_sequence/prioritized.py"] = '''
from rlpyt.replays.non_sequence.n_step import NStepReturnBuffer, SamplesFromReplay
from rlpyt.replays.sum_tree import SumTree
from rlpyt.utils.collections import namedarraytuple

SamplesFromReplayPri = namedarraytuple("SamplesFromReplayPri",
                                       SamplesFromReplay._fields + ("is_weights",))


class PrioritizedReplay:

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.priority_tree = SumTree(self.T, self.B)

    def append_samples(self, samples):
        T, idxs = super().append_samples(samples)
        self.priority_tree.advance(idxs)
        return T, idxs

    def sample_batch(self, batch_B):
        (T_idxs, B_idxs), priorities = self.priority_tree.sample(batch_B)
        batch = self.extract_batch(T_idxs, B_idxs)
        return SamplesFromReplayPri(*batch, is_weights=1.0 / priorities)

    def update_batch_priorities(self, priorities):
        self.priority_tree.update_batch_priorities(priorities)


class PrioritizedReplayBuffer(PrioritizedReplay, NStepReturnBuffer):
    pass
'''

FILES["rlpyt/replays/non_sequence/frame.py"] = '''
import numpy as np

from rlpyt.replays.frame import FrameBufferMixin
from rlpyt.replays.non_sequence.n_step import NStepReturnBuffer
from rlpyt.replays.non_sequence.prioritized import PrioritizedReplay
from rlpyt.replays.non_sequence.uniform import UniformReplay


class NStepFrameBuffer(FrameBufferMixin, NStepReturnBuffer):

    def extract_observation(self, T_idxs, B_idxs):
        return np.stack([self.samples_frames[t:t + self.n_frames, b]
                         for t, b in zip(T_idxs, B_idxs)])


class UniformReplayFrameBuffer(UniformReplay, NStepFrameBuffer):
    pass


class PrioritizedReplayFrameBuffer(PrioritizedReplay, NStepFrameBuffer):
    pass
'''


def write_fake_rlpyt(root) -> str:
    """Write the stand-in package under ``root`` and return ``root`` (a str)."""
    root = os.fspath(root)
    for rel, source in FILES.items():
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(source).lstrip("\n"))
    return root
