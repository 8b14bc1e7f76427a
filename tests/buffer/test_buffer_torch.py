"""torch helpers of namedschema.buffer, and their behaviour when torch is missing."""

import collections
import pickle

import numpy as np
import pytest

from namedschema import NamedArrayTupleSchema, StructureMismatchError
from namedschema.buffer import (
    buffer_from_example,
    buffer_func,
    buffer_method,
    buffer_to,
    get_leading_dims,
    is_shared_memory,
    numpify_buffer,
    torchify_buffer,
)
from namedschema.errors import BufferShapeError
from tests.helpers import run_fresh

torch = pytest.importorskip("torch")

Obs = collections.namedtuple("Obs", "image vec")
Samples = NamedArrayTupleSchema("Samples", "observation reward extra")


def make_buffer(share_memory=False):
    ex = Samples(Obs(np.zeros((2, 2), np.uint8), np.zeros(3, np.float32)), 0.0, None)
    return buffer_from_example(ex, (4, 2), share_memory=share_memory)


def test_torchify_shares_memory_and_keeps_types():
    """torchify_buffer gives tensors aliasing the arrays, same classes, None kept."""
    buf = make_buffer()
    t = torchify_buffer(buf)
    assert type(t) is type(buf) and type(t.observation) is type(buf.observation)
    assert isinstance(t.observation.image, torch.Tensor) and t.extra is None
    assert t.observation.image.dtype == torch.uint8 and t.reward.dtype == torch.float64
    t.reward[1, 0] = 3.0
    assert buf.reward[1, 0] == 3.0
    assert torchify_buffer(t).reward is t.reward  # tensors are left alone


def test_torchify_plain_tuple_and_scalars():
    """Plain tuples stay tuples; numpy scalars become 0-d tensors."""
    out = torchify_buffer((np.arange(3), None, np.float32(2)))
    assert type(out) is tuple and out[1] is None
    assert out[0].tolist() == [0, 1, 2] and out[2].shape == () and out[2].item() == 2.0


def test_torchify_shared_buffer_writes_reach_shared_memory():
    """Tensors made from a shared buffer write into its shared memory."""
    buf = make_buffer(share_memory=True)
    t = torchify_buffer(buf)
    t.observation.vec.add_(1)
    assert is_shared_memory(buf.observation.vec) and buf.observation.vec.min() == 1


def test_numpify_round_trip():
    """numpify_buffer inverts torchify_buffer and keeps numpy leaves."""
    buf = make_buffer()
    back = numpify_buffer(torchify_buffer(buf))
    assert type(back) is type(buf) and isinstance(back.observation.image, np.ndarray)
    assert back.observation.vec.dtype == np.float32 and back.extra is None
    mixed = numpify_buffer((torch.ones(2), np.zeros(1)))
    assert all(isinstance(x, np.ndarray) for x in mixed)


def test_buffer_to_moves_and_refuses_numpy():
    """buffer_to moves tensors and names the numpy leaf it refuses."""
    t = torchify_buffer(make_buffer())
    moved = buffer_to(t, device="cpu")
    assert type(moved) is type(t) and moved.reward.device.type == "cpu"
    assert buffer_to(t, torch.float16).reward.dtype == torch.float16
    with pytest.raises(StructureMismatchError, match=r"Samples\.observation\.image"):
        buffer_to(make_buffer(), "cpu")


def test_buffer_method_func_and_leading_dims_on_tensors():
    """buffer_method, buffer_func and get_leading_dims work on tensor leaves."""
    t = torchify_buffer(make_buffer())
    floats = buffer_method(t, "float")
    assert floats.observation.image.dtype == torch.float32 and floats.extra is None
    flat = buffer_func(t, torch.flatten, 0, 1)
    assert flat.reward.shape == (8,) and flat.observation.image.shape == (8, 2, 2)
    dims = get_leading_dims(t, n_dim=2)
    assert isinstance(dims, torch.Size) and tuple(dims) == (4, 2)
    with pytest.raises(BufferShapeError, match=r"Samples\.reward \(8,\)"):
        get_leading_dims(t._replace(reward=flat.reward))


def test_torchified_buffer_pickles_with_torch_save(tmp_path):
    """A torchified schema buffer survives torch.save/torch.load (weights_only=False)."""
    t = torchify_buffer(make_buffer())
    t.reward[...] = 1.5
    path = tmp_path / "t.pt"
    torch.save(t, path)
    back = torch.load(path, weights_only=False)
    assert type(back) is type(t) and back.reward.sum().item() == 12.0
    assert pickle.loads(pickle.dumps(t)).observation.vec.shape == (4, 2, 3)


def test_without_torch_numpy_parts_work_and_torch_parts_say_how_to_install():
    """With torch unimportable, numpy helpers work and torch helpers name the extra."""
    run_fresh("""
        import sys
        sys.modules["torch"] = None  # import torch now raises ImportError
        import numpy as np
        import namedschema.buffer as nb
        from namedschema import namedtuple
        P = namedtuple("P", "a b")
        buf = nb.buffer_from_example(P(np.zeros(2), None), 3, share_memory=True)
        assert nb.get_leading_dims(buf) == (3,)
        assert nb.buffer_method(buf, "sum").a == 0
        assert nb.buffer_func(buf, np.shape).a == (3, 2)
        for name in ["torchify_buffer", "numpify_buffer", "buffer_to"]:
            try:
                getattr(nb, name)(buf)
            except ImportError as exc:
                assert "install the torch extra" in str(exc) and "torch>=2.0" in str(exc), exc
                assert name in str(exc) and exc.name == "torch"
            else:
                raise AssertionError(name + " did not raise")
        """)


def test_import_does_not_load_torch():
    """Importing namedschema.buffer and allocating shared buffers never imports torch."""
    run_fresh("""
        import sys
        import numpy as np
        import namedschema.buffer as nb
        nb.buffer_from_example((np.zeros(2),), 3, share_memory=True)
        assert "torch" not in sys.modules
        """)
