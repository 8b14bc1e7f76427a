"""Files written by released versions still load: format 1.0 checkpoints and 0.1.0 pickles."""

import glob
import os
import pickle

import numpy as np
import pytest

import namedschema
from namedschema import NamedArrayTuple, NamedTuple
from tests.checkpoint.make_fixtures import DATA, expected
from tests.helpers import run_fresh

CHECKPOINTS = sorted(glob.glob(os.path.join(DATA, "format-*.nsb")))
PICKLES = sorted(glob.glob(os.path.join(DATA, "pickle-*.pkl")))


def assert_same_contents(got, want, path="obj"):
    """Same kinds of schema (name, fields, defaults), same values, recursively."""
    if isinstance(want, NamedTuple):
        assert isinstance(got, NamedTuple), path
        assert type(got).__name__ == type(want).__name__, path
        assert got._fields == want._fields and got._field_defaults == want._field_defaults, path
        assert isinstance(got, NamedArrayTuple) == isinstance(want, NamedArrayTuple), path
        for name, a, b in zip(want._fields, got, want, strict=True):
            assert_same_contents(a, b, f"{path}.{name}")
    elif isinstance(want, dict):
        assert got.keys() == want.keys(), path
        for key in want:
            assert_same_contents(got[key], want[key], f"{path}[{key!r}]")
    elif isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape, path
        np.testing.assert_array_equal(got, want, err_msg=path)
    else:
        assert got == want, path


def test_fixtures_exist():
    """The compat data directory holds at least one checkpoint and one pickle per protocol."""
    assert CHECKPOINTS and len(PICKLES) >= 3


@pytest.mark.parametrize("path", CHECKPOINTS, ids=os.path.basename)
@pytest.mark.parametrize("mmap_mode", [None, "r"])
def test_old_checkpoints_load(path, mmap_mode):
    """A checkpoint of each released format version loads with its contents and views intact."""
    got = namedschema.load(path, mmap_mode=mmap_mode, verify=True)
    assert_same_contents(got, expected())
    obs = got["buffer"].observation
    assert np.shares_memory(obs.last, obs.frames)
    assert type(got["buffer"].observation) is type(got["buffer"][0].observation)


@pytest.mark.parametrize("path", PICKLES, ids=os.path.basename)
def test_old_pickles_load(path):
    """A pickle written by a released version loads in this version, value for value."""
    with open(path, "rb") as f:
        got = pickle.load(f)
    assert_same_contents(got, expected())


@pytest.mark.parametrize("path", CHECKPOINTS + PICKLES, ids=os.path.basename)
def test_old_files_load_in_a_fresh_interpreter(path):
    """Each fixture loads in an interpreter that has made no schema at all."""
    loader = ("namedschema.load(path)" if path.endswith(".nsb")
              else "pickle.load(open(path, 'rb'))")
    proc = run_fresh(f"""
        import pickle, namedschema
        path = {path!r}
        obj = {loader}
        print(type(obj["buffer"]).__name__, obj["buffer"].observation.frames.sum(), obj["meta"].name)
        """)
    assert proc.stdout.split() == [b"Step", str(int(np.arange(96).sum())).encode(), b"demo"]
