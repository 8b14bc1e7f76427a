"""A program reads what it saved: load, inspect and verify of a path wait for this
process's background save of it (the file may still hold the previous checkpoint)."""

from __future__ import annotations

import numpy as np
import pytest

import namedschema

pytestmark = pytest.mark.slow

Step = namedschema.NamedArrayTupleSchema("Step", "obs action")


@pytest.mark.parametrize("reader", ["load", "load_mmap", "inspect", "verify"])
def test_reading_right_after_a_background_save_sees_it(tmp_path, reader):
    path = tmp_path / "x.nsb"
    first = Step(np.zeros((256, 64), np.float32), np.zeros(256, np.int64))
    namedschema.save(first, path)
    # big enough that the background write is still running when the read starts
    second = Step(np.ones((2**17, 256), np.float32), np.arange(2**17))
    handle = namedschema.save(second, path, background=True)
    if reader == "load":
        got = namedschema.load(path)
        assert np.array_equal(got.action, second.action)
    elif reader == "load_mmap":
        got = namedschema.load(path, mmap_mode="r")
        assert np.array_equal(got.action, second.action)
    elif reader == "inspect":
        assert "(131072," in str(namedschema.inspect(path))
    else:
        from namedschema.checkpoint._read import verify
        verify(path)
    assert handle.done()
    handle.wait()
