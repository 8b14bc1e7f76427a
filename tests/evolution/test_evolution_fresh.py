"""Schema evolution in a fresh interpreter whose module defines today's schemas.

The saved data comes from other code (this process, or a child running the old
version of the module); the loading child imports only the new module and
lets ``upgrade(..., schemas=module)`` find the schemas by itself.
"""

from __future__ import annotations

import json
import pickle
import textwrap
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import namedschema
from namedschema import NamedArrayTupleSchema, upgrade
from namedschema.errors import SchemaEvolutionError
from tests.evolution import pairs as ep
from tests.helpers import examples, run_fresh

pytestmark = pytest.mark.subprocess

# The child describes what it got in the same form, so parent and child compare.
DESCRIBE = textwrap.dedent("""
    import hashlib
    import numpy as np

    def describe(x, classes):
        if isinstance(x, tuple) and hasattr(type(x), "_fields"):
            return {"type": type(x)._typename, "own": any(type(x) is c for c in classes),
                    "fields": {f: describe(v, classes) for f, v in zip(x._fields, x)}}
        a = np.ascontiguousarray(x)
        return [a.dtype.str, list(a.shape), hashlib.sha256(a.tobytes()).hexdigest()[:16]]
    """)
exec(DESCRIBE)  # the parent's describe(), identical to the child's


def make_schema(typename, fields, defaults=None):
    return NamedArrayTupleSchema(typename, fields, defaults=defaults or None)


def _child(tmp_path, module_name, body):
    code = (f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n" + DESCRIBE
            + textwrap.dedent(body))
    proc = run_fresh(code)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


@settings(max_examples=examples(6), deadline=None, suppress_health_check=list(HealthCheck))
@given(pair=ep.pairs(), extra=st.sampled_from(ep.EXTRAS),
       casting=st.sampled_from(ep.CASTINGS), leading=st.sampled_from([(5,), (5, 4)]))
def test_random_pairs_upgrade_alike_in_a_fresh_interpreter(tmp_path_factory, pair, extra,
                                                           casting, leading):
    """A checkpoint (load(schemas=module), read and mapped) and a pickle (upgrade) of old data become the module's new schemas."""
    tmp_path = tmp_path_factory.mktemp("evo")
    module_name = f"evo_today_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module_name}.py").write_text(ep.module_source(pair))
    old = ep.old_instance(pair, leading, make_schema)
    namedschema.save({"buf": old}, str(tmp_path / "old.nsb"))
    (tmp_path / "old.pkl").write_bytes(pickle.dumps({"buf": old}, protocol=5))

    classes = ep.new_schemas(pair, make_schema)
    errors = ep.expected_errors(pair, extra, casting)
    try:
        mine = upgrade({"buf": old}, list(classes.values()), extra=extra, casting=casting)
        expected = describe(mine["buf"], list(classes.values()))  # noqa: F821 - exec'd
    except SchemaEvolutionError as exc:
        expected = [type(exc).__name__, exc.schema, exc.field]

    got = _child(tmp_path, module_name, f"""
        import json, pickle, namedschema
        import {module_name} as today
        classes = [v for v in vars(today).values() if isinstance(v, type)]
        out = {{}}
        for how in ("load", "load-mmap", "pickle"):
            try:
                if how == "pickle":
                    with open({str(tmp_path / "old.pkl")!r}, "rb") as f:
                        new = namedschema.upgrade(pickle.load(f), today, extra={extra!r},
                                                  casting={casting!r})
                else:
                    new = namedschema.load({str(tmp_path / "old.nsb")!r},
                                           mmap_mode="r" if how == "load-mmap" else None,
                                           schemas=today, extra={extra!r}, casting={casting!r})
                out[how] = describe(new["buf"], classes)
            except namedschema.SchemaEvolutionError as exc:
                out[how] = [type(exc).__name__, exc.schema, exc.field]
        print(json.dumps(out))
        """)
    for how in ("load", "load-mmap", "pickle"):
        if errors:
            assert tuple(got[how]) in errors, (how, got[how], errors)
        else:
            assert got[how] == expected, how
            _all_own(got[how])


def _all_own(desc):
    if isinstance(desc, dict):
        assert desc["own"], desc["type"]
        for v in desc["fields"].values():
            _all_own(v)


OLD_MODULE = """
import numpy as np
from namedschema import NamedArrayTupleSchema, NamedTupleSchema

Obs = NamedArrayTupleSchema("Obs", "pixels")
Samples = NamedArrayTupleSchema("Samples", "observation action reward done")
Config = NamedTupleSchema("Config", "lr gamma")
"""

NEW_MODULE = """
import numpy as np
from namedschema import NamedArrayTupleSchema, NamedTupleSchema

Obs = NamedArrayTupleSchema("Obs", "pixels depth", defaults=(np.uint8(0),))
Samples = NamedArrayTupleSchema("Samples", "observation action reward done timeout",
                                defaults=(np.float64(0), np.bool_(False), np.bool_(False)))
Config = NamedTupleSchema("Config", "lr gamma n_step", defaults=(1,))


class Replay:
    def __init__(self, samples):
        self.samples = samples
        self.samples_return_ = samples.reward
"""

SAVE_OLD = """
import namedschema, numpy as np, pickle
from evo_app import Obs, Samples, Config
T, B = 16, 2
samples = Samples(Obs(np.arange(T * B * 4, dtype=np.uint8).reshape(T, B, 4)),
                  np.arange(T * B).reshape(T, B), np.ones((T, B), np.float32),
                  np.zeros((T, B), bool))
namedschema.save({"samples": samples, "config": Config(1e-3, 0.99), "t": 5}, sys.argv_path)
"""


def test_same_module_name_new_definitions(tmp_path):
    """Old code saves; new code (same module, changed schemas) loads, upgrades, appends, samples."""
    old_dir, new_dir = tmp_path / "v1", tmp_path / "v2"
    old_dir.mkdir()
    new_dir.mkdir()
    (old_dir / "evo_app.py").write_text(OLD_MODULE)
    (new_dir / "evo_app.py").write_text(NEW_MODULE)
    path = str(tmp_path / "run.nsb")
    run_fresh(f"import sys\nsys.path.insert(0, {str(old_dir)!r})\nsys.argv_path = {path!r}\n"
              + SAVE_OLD)
    got = _child(new_dir, "evo_app", f"""
        import json, logging, io, mmap, numpy as np, namedschema, evo_app

        def mapped(a):
            while isinstance(a, np.ndarray):
                a = a.base
            return isinstance(a.obj if isinstance(a, memoryview) else a, mmap.mmap)
        log = io.StringIO()
        logging.basicConfig(stream=log, level=logging.INFO, format="%(message)s")
        ckpt = namedschema.load({path!r}, mmap_mode="c")
        before_obs = ckpt["samples"].observation.pixels
        ckpt, rep = namedschema.upgrade(ckpt, evo_app, casting="safe", report=True)
        s = ckpt["samples"]
        replay = evo_app.Replay(s)
        new_step = evo_app.Samples(evo_app.Obs(np.full((2, 4), 9, np.uint8), np.ones((2,), np.uint8)),
                                   np.array([1, 1]), np.array([0.5, 0.5]), np.array([True, False]),
                                   np.array([True, True]))
        s[ckpt["t"]] = new_step
        rng = np.random.default_rng(0)
        batch = s[rng.integers(0, 16, 8), rng.integers(0, 2, 8)]
        print(json.dumps(dict(
            types=[type(s) is evo_app.Samples, type(s.observation) is evo_app.Obs,
                   type(ckpt["config"]) is evo_app.Config],
            mapped_pixels=s.observation.pixels is before_obs,
            memmap=mapped(before_obs),
            depth=[s.observation.depth.shape, s.observation.depth.dtype.str],
            reward=s.reward.dtype.str, timeout=s.timeout[5].tolist(),
            alias=replay.samples_return_ is s.reward,
            config=list(ckpt["config"]), batch_fields=list(batch._fields),
            batch_shape=list(batch.observation.pixels.shape),
            report=str(rep), log=log.getvalue())))
        """)
    assert got["types"] == [True, True, True]
    assert got["mapped_pixels"] and got["memmap"]   # unchanged field: still the mapped array
    assert got["depth"] == [[16, 2], "|u1"] and got["reward"] == "<f8"
    assert got["timeout"] == [True, True] and got["alias"]
    assert got["config"] == [1e-3, 0.99, 1]
    assert got["batch_fields"] == ["observation", "action", "reward", "done", "timeout"]
    assert got["batch_shape"] == [8, 4]
    for line in ("Samples -> Samples (evo_app)", "added timeout", "cast reward float32->float64",
                 "Obs -> Obs (evo_app)", "added depth", "Config -> Config (evo_app)"):
        assert line in got["report"] and line in got["log"], line


def test_pickled_object_upgrades_in_fresh_interpreter(tmp_path):
    """upgrade() on a pickle-loaded object: its attributes become the module's schemas."""
    (tmp_path / "evo_app.py").write_text(NEW_MODULE)
    Old = NamedArrayTupleSchema("Samples", "observation action reward done")
    T, B = 8, 2
    old = Old(np.zeros((T, B, 4), np.uint8), np.zeros((T, B), np.int64),
              np.arange(T * B, dtype=np.float64).reshape(T, B), np.zeros((T, B), bool))
    blob = pickle.dumps({"replay": {"samples": old, "ret": old.reward}}, protocol=5)
    (tmp_path / "obj.pkl").write_bytes(blob)
    got = _child(tmp_path, "evo_app", f"""
        import json, pickle, namedschema, evo_app
        with open({str(tmp_path / "obj.pkl")!r}, "rb") as f:
            obj = pickle.load(f)
        namedschema.upgrade(obj, evo_app)
        s = obj["replay"]["samples"]
        print(json.dumps([type(s) is evo_app.Samples, obj["replay"]["ret"] is s.reward,
                          s.timeout.shape, s.reward[3].tolist()]))
        """)
    assert got == [True, True, [8, 2], [6.0, 7.0]]
