"""Checkpoints that need pickle describe themselves: arrays named by path, views counted once.

Also: a module (or class) missing when unpickling is its own error, naming it,
not a FormatError about the file.
"""

import collections
import os
import pickle
import textwrap

import numpy as np
import pytest

import namedschema
from namedschema import (
    FormatError,
    MissingClassError,
    MissingModuleError,
    NamedSchemaError,
)
from namedschema.checkpoint._graph import MAX_VISITS, array_paths
from tests.helpers import run_fresh

torch = pytest.importorskip("torch")


class Buffer:
    """An object that is not data: save has to pickle it."""

    def __init__(self):
        Samples = namedschema.NamedArrayTupleSchema("Samples", "observation reward")
        self.samples = Samples(np.zeros((16, 2, 3), np.uint8), np.arange(32.0).reshape(16, 2))
        self.frames = np.zeros((18, 2), np.float32)
        self.new_frames = self.frames[2:]
        self.t = 3


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU())
        self.head = torch.nn.Linear(2, 1)


def mixed():
    net = Net()
    return {"replay": Buffer(), "agent": {"model": net.state_dict(), "live": net},
            "counters": {"itr": 7, "steps": 700}}


def test_inspect_names_every_array_of_a_pickled_graph(tmp_path):
    """Every stored array has its path (attributes, fields, state_dict names), none pickled[i]."""
    path = tmp_path / "mixed.nsc"
    namedschema.save(mixed(), path, allow_pickle=True)
    info = namedschema.inspect(path)
    assert info.needs_pickle
    names = [f.path for f in info.fields]
    assert not [n for n in names if n.startswith("pickled[")], names
    for expected in ("replay.samples.observation", "replay.samples.reward",
                     "replay.frames", "replay.new_frames",
                     "agent.model.conv.0.weight", "agent.model.conv.0.bias",
                     "agent.model.head.weight", "agent.live.conv.0.weight"):
        assert expected in names, (expected, names)
    text = str(info)
    assert "replay.samples.observation: uint8 (16, 2, 3) 96 B" in text
    assert "pickled[" not in text


def test_views_are_counted_once(tmp_path):
    """A view is listed as a view of its base, and its bytes are stored once."""
    path = tmp_path / "mixed.nsc"
    namedschema.save(mixed(), path, allow_pickle=True)
    info = namedschema.inspect(path)
    by_name = {f.path: f for f in info.fields}
    assert by_name["replay.new_frames"].view_of == "replay.frames"
    assert by_name["replay.frames"].view_of is None
    # torch pickles an nn.Parameter through a new tensor on the same memory
    assert by_name["agent.live.conv.0.weight"].view_of == "agent.model.conv.0.weight"
    assert "replay.new_frames: float32 (16, 2) 128 B, view of replay.frames" in str(info)
    stored = sum(f.nbytes for f in info.fields if f.view_of is None)
    assert sum(f.nbytes for f in info.fields) > stored
    assert info.data_bytes < stored + 4096  # the pickle itself is the rest
    back = namedschema.load(path, allow_pickle=True)
    assert np.shares_memory(back["replay"].frames, back["replay"].new_frames)


def test_data_path_marks_views_too(tmp_path):
    """Without pickle the tree lists views as views as well."""
    base = np.zeros((10, 3))
    path = tmp_path / "data.nsc"
    namedschema.save({"base": base, "tail": base[4:]}, path)
    info = namedschema.inspect(path)
    assert [f.view_of for f in info.fields] == [None, "base"]
    assert "view of base" in info.tree


@pytest.mark.slow
def test_naming_is_bounded_and_shortest_first():
    """The walk stops after MAX_VISITS objects; the shortest path to an array wins."""
    arr = np.zeros(3)
    graph = {"deep": {"a": {"b": arr}}, "near": arr,
             "many": [object() for _ in range(MAX_VISITS + 10)] + [np.ones(2)]}
    names = array_paths(graph, lambda x: type(x) is np.ndarray)
    assert names.name_of(arr) == "near"
    assert names.name_of(graph["many"][-1]) is None  # past the bound: positional name
    assert names.name_of(np.zeros(3)) is None


def test_ordered_dict_keys_and_odd_keys():
    """state_dict keys read as dotted paths; other keys are quoted."""
    sd = collections.OrderedDict([("conv.0.weight", np.zeros(1)), ("a b", np.ones(1))])
    names = array_paths({"m": sd}, lambda x: type(x) is np.ndarray)
    assert names.name_of(sd["conv.0.weight"]) == "m.conv.0.weight"
    assert names.name_of(sd["a b"]) == "m['a b']"


def _write_module(directory, source):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "ckpt_user_mod.py"), "w") as f:
        f.write(textwrap.dedent(source))


@pytest.mark.subprocess
def test_missing_module_at_load_is_its_own_error(tmp_path):
    """A module that cannot be imported: MissingModuleError naming it, not FormatError."""
    mod_dir = str(tmp_path / "mods")
    _write_module(mod_dir, """
        import numpy as np
        class Thing:
            def __init__(self):
                self.data = np.arange(4)
        """)
    path = str(tmp_path / "thing.nsc")
    run_fresh(f"""
        import sys; sys.path.insert(0, {mod_dir!r})
        import namedschema, ckpt_user_mod
        namedschema.save({{"thing": ckpt_user_mod.Thing()}}, {path!r}, allow_pickle=True)
        """)
    proc = run_fresh(f"""
        import json, namedschema
        try:
            namedschema.load({path!r}, allow_pickle=True)
        except Exception as exc:
            print(json.dumps([type(exc).__name__, exc.module, exc.qualname, exc.file,
                              isinstance(exc, ModuleNotFoundError),
                              isinstance(exc, namedschema.NamedSchemaError),
                              isinstance(exc, namedschema.FormatError), str(exc)]))
        """)
    kind, module, qualname, file, is_mnf, is_ns, is_format, text = \
        __import__("json").loads(proc.stdout)
    assert (kind, module, qualname, file) == ("MissingModuleError", "ckpt_user_mod", "Thing",
                                              path)
    assert is_mnf and is_ns and not is_format
    assert "ckpt_user_mod" in text
    # with the module importable again, the very same file loads
    proc = run_fresh(f"""
        import sys; sys.path.insert(0, {mod_dir!r})
        import namedschema
        print(namedschema.load({path!r}, allow_pickle=True)["thing"].data.sum())
        """)
    assert proc.stdout.decode().strip() == "6"


@pytest.mark.subprocess
def test_missing_class_at_load_is_its_own_error(tmp_path):
    """The module imports but lacks the class (renamed since): MissingClassError."""
    mod_dir = str(tmp_path / "mods")
    _write_module(mod_dir, "class Thing:\n    pass\n")
    path = str(tmp_path / "thing.nsc")
    run_fresh(f"""
        import sys; sys.path.insert(0, {mod_dir!r})
        import namedschema, ckpt_user_mod
        namedschema.save(ckpt_user_mod.Thing(), {path!r}, allow_pickle=True)
        """)
    _write_module(mod_dir, "class Renamed:\n    pass\n")
    proc = run_fresh(f"""
        import sys; sys.path.insert(0, {mod_dir!r})
        import namedschema
        try:
            namedschema.load({path!r}, allow_pickle=True)
        except namedschema.MissingClassError as exc:
            print(exc.module, exc.qualname, isinstance(exc, AttributeError),
                  isinstance(exc, namedschema.FormatError))
        """)
    assert proc.stdout.decode().split() == ["ckpt_user_mod", "Thing", "True", "False"]


def test_a_damaged_pickle_is_still_a_format_error(tmp_path):
    """Negative control: garbage in the pickle block stays a FormatError (about the file)."""
    path = tmp_path / "b.nsc"
    namedschema.save(Buffer(), path, allow_pickle=True)
    data = bytearray(path.read_bytes())
    at = data.rfind(b"Buffer")
    data[at:at + 6] = b"\xff\xfe\x00\x01\x02\x03"
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError) as info:
        namedschema.load(path, allow_pickle=True)
    assert not isinstance(info.value, (MissingModuleError, MissingClassError))


def test_errors_pickle_and_subclass():
    """Both classes are NamedSchemaErrors, pickle (for multiprocessing) and keep their fields."""
    for cls, builtin in ((MissingModuleError, ModuleNotFoundError),
                         (MissingClassError, AttributeError)):
        exc = cls("mod", "Name", "why")
        back = pickle.loads(pickle.dumps(exc))
        assert isinstance(back, (NamedSchemaError, builtin))
        assert (back.module, back.qualname, back.reason) == ("mod", "Name", "why")
    assert MissingModuleError("mod", "X").name == "mod"
