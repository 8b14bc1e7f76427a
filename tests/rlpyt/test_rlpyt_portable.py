"""Resume checkpoints hold named tuples that no process can find by name as schemas.

(namedschema.rlpyt.resume.table's portable: what lets ``resumable`` work without ``patch_rlpyt()``.)
"""

from __future__ import annotations

import collections
import pickle
import sys
import types

import numpy as np
import pytest

from namedschema.errors import UnpicklableError
from namedschema.rlpyt.resume import table as _portable

Findable = collections.namedtuple("Findable", ["a", "b"])   # a module holds it


def made_at_run_time():
    return collections.namedtuple("EnvInfo", ["game_score", "traj_done"])


def test_only_classes_pickle_cannot_find_become_schemas():
    EnvInfo = made_at_run_time()
    obs = np.zeros(3)
    state = {"info": EnvInfo(np.float32(1), False), "kept": Findable(obs, 2),
             "nested": [(EnvInfo(1, 2),)], "array": obs}
    out = _portable.portable(state)
    assert type(out["kept"]) is Findable and out["kept"].a is obs
    assert type(out["info"]) is not EnvInfo and out["info"]._fields == EnvInfo._fields
    assert out["nested"][0][0]._fields == EnvInfo._fields
    assert out["array"] is obs and state["info"].__class__ is EnvInfo   # input untouched
    back = pickle.loads(pickle.dumps(out))
    assert back["info"] == (1.0, False)
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(state)                                      # what it saves us from


def test_unchanged_containers_are_returned_as_they_are():
    state = {"a": [1, 2], "b": (np.ones(2), "x")}
    out = _portable.portable(state)
    assert out is state and out["b"] is state["b"]


def test_retype_gives_back_the_built_runs_classes():
    EnvInfo = made_at_run_time()
    saved = _portable.portable({"x": EnvInfo(1, 2)})["x"]
    assert type(_portable.retype(saved, EnvInfo(0, 0))) is EnvInfo
    assert _portable.retype(saved, Findable(0, 0)) is saved       # other fields: as is


def test_lazily_assigned_rlpyt_globals_are_refused_by_name(monkeypatch):
    module = types.ModuleType("rlpyt.replays.frame")
    BufferSamples = collections.namedtuple("BufferSamples", ["action"])
    BufferSamples.__module__ = "rlpyt.replays.frame"
    module.BufferSamples = BufferSamples
    monkeypatch.setitem(sys.modules, "rlpyt.replays.frame", module)
    out = _portable.portable({"s": BufferSamples(np.zeros(2))})
    assert type(out["s"]) is not BufferSamples                   # by value
    assert _portable.unsavable(out) is None
    why = _portable.unsavable({"cls": BufferSamples})
    assert why is not None and "patch_rlpyt()" in why
    with pytest.raises(UnpicklableError, match="issue #111"):
        _portable.dry_pickle({"cls": BufferSamples})
