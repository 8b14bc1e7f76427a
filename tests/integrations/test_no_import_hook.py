"""``import namedschema`` installs no import hook (issue 29); torch, cloudpickle and joblib
imported after it are hooked at the next schema made, unpickled or pickled.

Every check runs in a fresh interpreter, which imports namedschema first.
"""

from __future__ import annotations

import pytest

from tests.helpers import run_fresh

pytestmark = pytest.mark.subprocess


def _out(code: str, **kw) -> list[str]:
    return run_fresh(code, **kw).stdout.decode().split()


def test_import_namedschema_leaves_meta_path_alone():
    """Nothing is added to ``sys.meta_path``, and the import-hook module is not loaded."""
    out = _out("""
        import sys
        before = list(sys.meta_path)
        import namedschema
        P = namedschema.NamedTupleSchema("P", "x y")
        print(sys.meta_path == before, "namedschema.integrations.import_hooks" in sys.modules)
        """)
    assert out == ["True", "False"]


def test_explicit_install_adds_the_finder_until_the_library_is_imported():
    """``namedschema.integrations.install()`` is the opt-in import hook."""
    out = _out("""
        import sys
        import namedschema, namedschema.integrations
        before = len(sys.meta_path)
        namedschema.integrations.install()
        print(len(sys.meta_path) - before)
        """)
    assert out == ["1"]


def test_torch_imported_after_a_schema_round_trips_weights_only():
    """The schema is made before torch is imported; ``torch.save`` pickles it (a schema
    event), so a weights-only load in the same process accepts it."""
    pytest.importorskip("torch")
    out = _out("""
        import io, sys
        before = list(sys.meta_path)
        import namedschema as ns
        Traj = ns.NamedArrayTupleSchema("Traj", "obs done")
        import torch
        assert sys.meta_path == before
        buf = io.BytesIO()
        torch.save({"t": Traj(torch.arange(3.0), None)}, buf)
        buf.seek(0)
        back = torch.load(buf, weights_only=True)["t"]
        print(type(back) is Traj, back.obs.tolist(), sys.meta_path == before)
        """)
    assert out == ["True", "[0.0,", "1.0,", "2.0]", "True"]


def test_torch_imported_first_a_fresh_load_accepts_a_file_made_elsewhere():
    """A weights-only load in a process that made its schema after importing torch (the
    schema's creation hooks torch), of a file that another process wrote."""
    pytest.importorskip("torch")
    saved = run_fresh("""
        import io, sys, namedschema as ns, torch
        Traj = ns.NamedArrayTupleSchema("Traj", "obs done")
        buf = io.BytesIO()
        torch.save([Traj(torch.ones(2), None)], buf)
        sys.stdout.buffer.write(buf.getvalue())
        """).stdout
    out = _out("""
        import io, sys
        import namedschema as ns
        import torch
        Other = ns.NamedTupleSchema("Other", "a")      # any schema event after torch
        back = torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=True)[0]
        print(type(back).__name__, back.obs.tolist())
        """, stdin=saved)
    assert out == ["Traj", "[1.0,", "1.0]"]


_BY_ID = b"rebuild_schema"          # in a pickle that names the schema by id
_BY_VALUE = b"_make_skeleton_class"  # in a cloudpickle pickle of a class by value


def test_cloudpickle_imported_after_namedschema_ships_schemas_by_id():
    """A schema made after cloudpickle's import is pickled by id (copyreg), and comes back
    as one class in a fresh process that loads two pickles of it."""
    pytest.importorskip("cloudpickle")
    data = run_fresh("""
        import sys
        import namedschema as ns
        import cloudpickle
        Step = ns.NamedArrayTupleSchema("Step", "obs reward")
        one = cloudpickle.dumps(Step([1, 2], 0.5))
        two = cloudpickle.dumps([Step([3], 1.0)])
        sys.stdout.buffer.write(len(one).to_bytes(4, "little") + one + two)
        """).stdout
    n = int.from_bytes(data[:4], "little")
    one, two = data[4:4 + n], data[4 + n:]
    assert _BY_ID in one and _BY_VALUE not in one and _BY_ID in two
    out = _out(f"""
        import pickle, namedschema
        a, [b] = pickle.loads({one!r}), pickle.loads({two!r})
        print(type(a) is type(b), a.obs, b.reward)
        """)
    assert out == ["True", "[1,", "2]", "1.0"]


def test_cloudpickle_imported_after_the_schema_is_hooked_at_the_next_schema_event():
    """The honest gap, and its fixes: a schema made before cloudpickle's import, with no
    schema event since, ships by value; the next event, or ``install()``, hooks it."""
    pytest.importorskip("cloudpickle")
    out = _out("""
        import pickle
        import namedschema as ns
        Step = ns.NamedArrayTupleSchema("Step", "obs reward")
        import cloudpickle
        first = cloudpickle.dumps(Step(1, 2))
        pickle.dumps(Step)                  # a schema event: cloudpickle is hooked now
        second = cloudpickle.dumps(Step(1, 2))
        print(b"_make_skeleton_class" in first, b"rebuild_schema" in second)
        """)
    assert out == ["True", "True"]
    out = _out("""
        import namedschema as ns, namedschema.integrations
        Step = ns.NamedArrayTupleSchema("Step", "obs reward")
        namedschema.integrations.install()
        import cloudpickle
        print(b"rebuild_schema" in cloudpickle.dumps(Step(1, 2)))
        """)
    assert out == ["True"]


def test_joblib_imported_after_namedschema_round_trips():
    """joblib's files (pickle) and the pickler of its loky workers (cloudpickle), both
    imported after namedschema."""
    pytest.importorskip("joblib")
    out = _out("""
        import os, pickle, tempfile
        import numpy as np
        import namedschema as ns
        import joblib
        from joblib.externals.loky.backend import reduction
        Step = ns.NamedArrayTupleSchema("Step", "obs reward")
        path = os.path.join(tempfile.mkdtemp(), "x.joblib")
        joblib.dump({"s": Step(np.arange(4), np.ones(4))}, path)
        back = joblib.load(path)["s"]
        data = bytes(reduction.dumps(Step(np.arange(2), None)))
        again = pickle.loads(data)
        print(reduction.get_loky_pickler_name(), type(back) is Step, int(back.obs[3]),
              type(again) is Step, b"rebuild_schema" in data,
              b"_make_skeleton_class" not in data)
        """)
    assert out == ["cloudpickle", "True", "3", "True", "True", "True"]


def test_hook_modules_load_only_once_their_library_is_imported():
    """A process that never imports torch or cloudpickle loads neither hook module; the
    first schema made after cloudpickle's import loads (and applies) its hook."""
    out = _out("""
        import sys
        import namedschema
        P = namedschema.NamedTupleSchema("P", "x y")
        hooks = ("namedschema.integrations._torch_hook",
                 "namedschema.integrations._cloudpickle_hook")
        print(*(name in sys.modules for name in hooks))
        import cloudpickle
        Q = namedschema.NamedTupleSchema("Q", "x y")
        from namedschema.integrations import _cloudpickle_hook
        print(_cloudpickle_hook.is_patched(sys.modules["cloudpickle.cloudpickle"]))
        """)
    assert out == ["False", "False", "True"]


def test_the_watched_names_match_the_hook_modules():
    """``integrations`` looks for the very modules the hooks act on."""
    from namedschema import integrations
    from namedschema.integrations import _cloudpickle_hook, _torch_hook
    assert integrations._CLOUDPICKLE_MODULES == _cloudpickle_hook.MODULES
    assert integrations._TORCH_MODULE == _torch_hook._WATCHED
