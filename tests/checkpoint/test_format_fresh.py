"""Checkpoints written in one interpreter load in a fresh one (and back)."""

from __future__ import annotations

import fractions
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import namedschema
from tests.helpers import REPO_ROOT, run_fresh


def test_fresh_interpreter_loads_schemas_views_and_mmap(tmp_path):
    """A fresh interpreter rebuilds one class per schema, keeps aliasing, with and without mmap."""
    path = str(tmp_path / "buf.nsb")
    Obs = namedschema.NamedArrayTupleSchema("Obs", "pos vel")
    Traj = namedschema.NamedArrayTupleSchema("Traj", "obs reward")
    frames = np.arange(5 * 8, dtype=np.uint8).reshape(5, 8)
    obj = {"a": Traj(Obs(frames, frames[1:]), np.arange(5.0)), "b": [Traj(Obs(1, 2), 3)],
           "cls": Traj}
    namedschema.save(obj, path)
    proc = run_fresh(f"""
        import json, sys, numpy as np, namedschema
        out = {{}}
        for mode in (None, "r", "c"):
            obj = namedschema.load({path!r}, mmap_mode=mode, verify=True)
            a, b = obj["a"], obj["b"][0]
            assert type(a) is type(b) is obj["cls"], (type(a), type(b))
            assert type(a.obs) is not type(a) and type(a.obs).__name__ == "Obs"
            assert np.shares_memory(a.obs.pos, a.obs.vel)
            assert isinstance(a, namedschema.NamedArrayTuple) and a[2].reward == 2.0
            out[str(mode)] = [a.obs.vel.tolist(), b.obs.vel, type(a)._fields]
        print(json.dumps(out))
        """)
    out = json.loads(proc.stdout)
    for mode in ("None", "r", "c"):
        assert out[mode] == [frames[1:].tolist(), 2, ["obs", "reward"]]


def test_file_written_by_fresh_interpreter_loads_here(tmp_path):
    """A file saved in a child (schema defined in its __main__) loads here with a torch tensor."""
    torch = pytest.importorskip("torch")
    path = str(tmp_path / "child.nsb")
    run_fresh(f"""
        import numpy as np, torch, namedschema
        S = namedschema.NamedTupleSchema("Step", "obs act")
        t = torch.arange(6.0)
        namedschema.save([S(np.ones((2, 3), np.float16), t), S(None, t[2:])], {path!r})
        """)
    back = namedschema.load(path)
    assert type(back[0]) is type(back[1]) and type(back[0])._typename == "Step"
    assert back[0].obs.dtype == np.float16 and torch.equal(back[1].act, torch.arange(2.0, 6.0))
    assert back[1].act.untyped_storage().data_ptr() == back[0].act.untyped_storage().data_ptr()


def test_fresh_interpreter_refuses_pickle_and_import_is_lazy(tmp_path):
    """A fresh interpreter refuses a pickled checkpoint by default and never imports torch to load arrays."""
    path = str(tmp_path / "p.nsb")
    namedschema.save({"arr": np.arange(3), "obj": fractions.Fraction(1, 3)}, path,
                     allow_pickle=True)
    proc = run_fresh(f"""
        import sys, namedschema
        from namedschema.errors import UnsafeLoadError
        try:
            namedschema.load({path!r})
        except UnsafeLoadError as exc:
            print("refused:", exc)
        obj = namedschema.load({path!r}, allow_pickle=True)
        print(obj["arr"].tolist(), type(obj["obj"]).__name__, "torch" in sys.modules)
        """)
    lines = proc.stdout.decode().splitlines()
    assert lines[0].startswith("refused:") and "Fraction" in lines[0]
    assert lines[1] == "[0, 1, 2] Fraction False"


def test_concurrent_savers_to_one_path_never_remove_each_others_temp_files(tmp_path):
    """Three processes saving one path 15 times each all succeed; the file always loads."""
    path = str(tmp_path / "shared.nsb")
    namedschema.save({"writer": -1, "data": np.zeros(200_000)}, path)
    code = f"""
        import sys, numpy as np, namedschema
        writer = int(sys.argv[1])
        data = np.full(200_000, float(writer))
        for _ in range(15):
            namedschema.save({{"writer": writer, "data": data}}, {path!r})
            got = namedschema.load({path!r}, verify=True)
            assert (got["data"] == got["writer"]).all()
        """
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(w)],
                              env=env, stderr=subprocess.PIPE) for w in range(3)]
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    final = namedschema.load(path, verify=True)
    assert final["writer"] in (0, 1, 2) and (final["data"] == final["writer"]).all()
    assert os.listdir(tmp_path) == ["shared.nsb"]
