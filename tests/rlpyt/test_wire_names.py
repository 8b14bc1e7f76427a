"""Pickles name namedschema functions by module path: those paths are a file format.

A patched rlpyt replay buffer pickles through ``namedschema.rlpyt.pickling`` and its
schemas through ``namedschema._pickle``. The package layout may change; these names
may not, or older pickles and checkpoints stop loading. The fixture was written by
the code from before the package became folders (commit b5e5454).
"""

import os
import pickletools

import pytest

from tests.helpers import run_fresh

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "prioritized-buffer-before-layers.pkl")
WIRE_MODULES = {"namedschema._pickle", "namedschema.rlpyt.pickling"}

_BUILD = """
import pickle, sys
sys.path.append({root!r})
import numpy as np, namedschema
namedschema.patch_rlpyt()
from rlpyt.replays.non_sequence.prioritized import PrioritizedReplayBuffer
from rlpyt.utils.collections import namedarraytuple
S = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])
ex = S(np.zeros(4, np.float32), np.int64(0), np.float32(0), False)
rb = PrioritizedReplayBuffer(example=ex, size=64, B=2, discount=0.99, n_step_return=1)
for i in range(5):
    rb.append_samples(S(np.full((3, 2, 4), i, np.float32), np.ones((3, 2), np.int64) * i,
                        np.ones((3, 2), np.float32), np.zeros((3, 2), bool)))
sys.stdout.buffer.write(pickle.dumps(rb, {protocol}))
"""


def namedschema_globals(data: bytes) -> set[str]:
    """Module paths of every namedschema global a pickle refers to."""
    modules, strings = set(), []
    for op, arg, _pos in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            modules.add(strings[-2])
        elif op.name == "GLOBAL":
            modules.add(arg.split(" ")[0])
    return {m for m in modules if m.split(".")[0] == "namedschema"}


def test_the_fixture_refers_only_to_wire_modules():
    with open(FIXTURE, "rb") as f:
        assert namedschema_globals(f.read()) == WIRE_MODULES


@pytest.mark.subprocess
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_patched_rlpyt_buffer_pickles_name_only_wire_modules(rlpyt_root, protocol):
    data = run_fresh(_BUILD.format(root=rlpyt_root, protocol=protocol)).stdout
    assert namedschema_globals(data) == WIRE_MODULES


@pytest.mark.subprocess
def test_buffer_pickled_before_the_layout_change_loads(rlpyt_root):
    out = run_fresh(f"""
        import pickle, sys
        sys.path.append({rlpyt_root!r})
        import numpy as np, namedschema
        namedschema.patch_rlpyt()
        with open({FIXTURE!r}, "rb") as f:
            rb = pickle.load(f)
        obs = rb.samples.observation
        assert rb.t == 15 and obs.shape == (32, 2, 4), (rb.t, obs.shape)
        assert [float(obs[t, 0, 0]) for t in (0, 3, 14)] == [0.0, 1.0, 4.0]
        assert type(rb.samples).__name__ == "SamplesToBuffer"
        print("ok", float(rb.priority_tree.tree.sum()) > 0)
        """).stdout.decode().split()
    assert out == ["ok", "True"]
