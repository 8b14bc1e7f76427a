"""Schema identity a file cannot forge (regression tests of hardening round 2, issue 16).

Schema identity a file cannot forge (4), the ``__module__`` of a class built
from a file (5), ``weights_only`` instances that are well formed (8) and the
field-count limit through every way a schema is built (3). Scenarios that
depend on what a process has seen run in fresh interpreters, in a directory
holding the user's module, as a user's script would.
"""

import copyreg
import io
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import namedschema
from namedschema import NamedTupleSchema
from namedschema.errors import SchemaDefinitionError
from tests.checkpoint import crafted, limited
from tests.figures import record
from tests.helpers import REPO_ROOT

torch = pytest.importorskip("torch")

_MODULE = """
from namedschema import NamedTupleSchema
Point = NamedTupleSchema("Point", "x y", defaults=(0,))
"""


def _run(cwd, *parts, check=True):
    """Run the code ``parts`` in a fresh interpreter whose working directory is ``cwd``."""
    code = "".join(textwrap.dedent(part) for part in parts)
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd,
                          capture_output=True, timeout=120, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr.decode(errors="replace")[-3000:])
    return proc


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    """A directory with the user's module ``pointmod`` and an honest checkpoint and torch file.

    Shared by the tests of this module (each writes its forgery under the same
    names, and each scenario runs in its own fresh interpreter).
    """
    tmp_path = tmp_path_factory.mktemp("user")
    (tmp_path / "pointmod.py").write_text(_MODULE)
    _run(tmp_path, """
        import torch, namedschema, pointmod
        namedschema.save({"p": pointmod.Point(1)}, "honest.nsb")
        torch.save({"p": pointmod.Point(1)}, "honest.pt")
        """)
    return tmp_path


def _forge(user_dir, name, **changes):
    """A checkpoint claiming the id of the user's module-level Point with other contents."""
    header, desc, body = crafted.split((user_dir / "honest.nsb").read_bytes())
    entry = desc["schemas"][0]
    entry.update(changes)
    if "fields" in changes:
        desc["structure"]["dict"][0][1]["values"] = [1] * len(changes["fields"])
    (user_dir / name).write_bytes(crafted.join(header, desc, body))
    record("collision.files")


_CHECK_POINT = """
    import pointmod
    P = pointmod.Point
    assert P.__module__ == "pointmod", P.__module__
    assert P._field_defaults == {"y": 0} and type(P._field_defaults["y"]) is int, \\
        P._field_defaults
    assert type(P(1).y) is int and P(1).y == 0
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("defaults", [[False], [0.0], ["0"]])
def test_file_loaded_first_does_not_pre_empt_the_module_class(user_dir, defaults):
    """4: a file with the module's id and ==-equal defaults loaded first; the module keeps its own."""
    _forge(user_dir, "forged.nsb", defaults=defaults, module="PWNED")
    _run(user_dir, """
        import namedschema
        forged = namedschema.load("forged.nsb")["p"]
        """, _CHECK_POINT, """
        honest = namedschema.load("honest.nsb")["p"]
        assert type(honest) is P and honest == (1, 0)
        """)


@pytest.mark.subprocess
@pytest.mark.parametrize("changes", [{"defaults": ["PWNED"]}, {"defaults": [False]},
                                     {"fields": ["x", "y", "z"], "defaults": [0]},
                                     {"typename": "Pt"}])
def test_file_loaded_first_cannot_change_or_block_the_users_checkpoint(user_dir, changes):
    """4: in a process that never imports the module, a forged file cannot change or block a later load."""
    _forge(user_dir, "forged.nsb", **changes)
    _run(user_dir, """
        import namedschema
        from namedschema.errors import FormatError
        try:
            namedschema.load("forged.nsb")
        except FormatError:
            pass
        honest = namedschema.load("honest.nsb")["p"]
        cls = type(honest)
        assert cls._typename == "Point" and cls._fields == ("x", "y"), cls._fields
        assert cls._field_defaults == {"y": 0} and type(cls._field_defaults["y"]) is int, \\
            cls._field_defaults
        assert cls(1).y == 0 and type(cls(1).y) is int
        """, _CHECK_POINT, """
        assert namedschema.load("honest.nsb")["p"].__class__ is P
        """)


@pytest.mark.subprocess
def test_weights_only_file_loaded_first_does_not_pre_empt_the_module_class(user_dir):
    """4: the same through torch.load(weights_only=True): a forged .pt file first."""
    # Forge in a process that never saw the module: same id, defaults ('PWNED',).
    _run(user_dir, """
        import json, torch, namedschema
        from tests.checkpoint import crafted
        header, desc, body = crafted.split(open("honest.nsb", "rb").read())
        sid = desc["schemas"][0]["id"]
        Forged = namedschema._pickle.rebuild_schema(
            "NamedTupleSchema", sid, "Point", ("x", "y"), ("PWNED",), "pointmod")
        torch.save({"p": Forged(1)}, "forged.pt")
        """)
    record("collision.files")
    _run(user_dir, """
        import torch, namedschema
        try:
            torch.load("forged.pt", weights_only=True)
        except Exception:
            pass
        back = torch.load("honest.pt", weights_only=True)["p"]
        assert type(back)._field_defaults == {"y": 0}, type(back)._field_defaults
        """, _CHECK_POINT, """
        assert type(torch.load("honest.pt", weights_only=True)["p"]) is P
        """)


def test_pickled_schema_with_a_forged_definition_is_a_conflict():
    """4: a pickle claiming a live schema's id with defaults of another type is refused."""
    from namedschema._core.pickling import rebuild_schema
    from namedschema.errors import SchemaConflictError
    P = NamedTupleSchema("P", "x y", defaults=(0,))
    for defaults in ((False,), ("PWNED",), (0.0,), ()):
        with pytest.raises(SchemaConflictError):
            rebuild_schema("NamedTupleSchema", P._schema_id, "P", ("x", "y"), defaults, "m")
        record("collision.files")
    assert rebuild_schema("NamedTupleSchema", P._schema_id, "P", ("x", "y"), (0,),
                          P.__module__) is P


def test_forged_variant_id_cannot_pre_empt_either():
    """4: a forger who also takes the id a conflicting definition would move to gains nothing."""
    from namedschema._core.pickling import _variant_id, rebuild_schema
    sid = "v" * 32
    first = rebuild_schema("NamedTupleSchema", sid, "V", ("a",), (1,), None)
    honest_def = ("NamedTupleSchema", sid, "V", ("a",), (2,), None)
    moved = _variant_id(sid, "NamedTupleSchema", "V", ("a",), (2,))
    squatter = rebuild_schema("NamedTupleSchema", moved, "V", ("a",), ("PWNED",), None)
    honest = rebuild_schema(*honest_def)
    assert honest._field_defaults == {"a": 2} and honest is not squatter
    assert first._field_defaults == {"a": 1}
    record("collision.files", 2)


# ---------------------------------------------------------------------------
# 5. A file does not choose an importable __module__
# ---------------------------------------------------------------------------

@pytest.mark.subprocess
def test_file_built_class_does_not_name_an_unimported_module(tmp_path):
    """5: a schema entry naming module 'train' builds a class whose pickling imports nothing."""
    (tmp_path / "train.py").write_text(
        "open('IMPORTED', 'w').close()\n")  # what a user's training script would do: run
    seed = tmp_path / "seed.nsb"
    namedschema.save({"p": NamedTupleSchema("Point", "x y")(1, 2)}, seed)
    header, desc, body = crafted.split(seed.read_bytes())
    desc["schemas"][0]["module"] = "train"
    (tmp_path / "file.nsb").write_bytes(crafted.join(header, desc, body))
    _run(tmp_path, """
        import os, pickle, dill, cloudpickle, namedschema
        p = namedschema.load("file.nsb")["p"]
        assert type(p).__module__ != "train", type(p).__module__
        for dumps in (pickle.dumps, dill.dumps, cloudpickle.dumps):
            again = pickle.loads(dumps(p))
            assert again == (1, 2)
        dill.dumps(type(p)); cloudpickle.dumps(type(p))
        assert not os.path.exists("IMPORTED")
        """)
    assert not (tmp_path / "IMPORTED").exists()


@pytest.mark.subprocess
def test_file_built_class_keeps_a_module_that_is_already_imported(tmp_path):
    """5: the rule's other half: a module name already imported is kept (importing it runs nothing)."""
    seed = tmp_path / "seed.nsb"
    namedschema.save({"p": NamedTupleSchema("Point", "x y", module="json")(1, 2)}, seed)
    proc = _run(tmp_path, f"""
        import json, namedschema
        print(type(namedschema.load({str(seed)!r})["p"]).__module__)
        """)
    assert proc.stdout.strip() == b"json"


# ---------------------------------------------------------------------------
# 8. weights_only cannot build malformed instances
# ---------------------------------------------------------------------------

One = NamedTupleSchema("One", "a")
Three = NamedTupleSchema("Three", "x y z")


class _Relabel:
    """Pickles as NEWOBJ One(1) followed by BUILD setting ``__class__`` to Three."""

    @property
    def __class__(self):  # what the pickler checks NEWOBJ's class against
        return One

    def __reduce__(self):
        return (copyreg.__newobj__, (One, 1), (None, {"__class__": Three}))


def test_weights_only_build_cannot_set_the_class_of_an_instance():
    """8: a BUILD opcode cannot relabel a 1-value schema instance as a 3-field schema."""
    buf = io.BytesIO()
    torch.save({"r": _Relabel()}, buf)
    buf.seek(0)
    try:
        r = torch.load(buf, weights_only=True)["r"]
    except (pickle.UnpicklingError, TypeError) as exc:
        assert "no state" in str(exc), exc
        return
    assert len(r) == len(type(r)._fields), (type(r), len(r))


def test_plain_pickle_build_cannot_set_the_class_of_an_instance():
    """8: the same stream through plain pickle also refuses the state."""
    with pytest.raises(TypeError):
        pickle.loads(pickle.dumps(_Relabel(), protocol=2))


# ---------------------------------------------------------------------------
# 3. A documented field-count limit, wherever a schema is built
# ---------------------------------------------------------------------------

class _BigSchemaPickle:
    """Pickles as a rebuild_schema call for a schema of ``n`` fields."""

    def __init__(self, n):
        self.n = n

    def __reduce__(self):
        from namedschema._core.pickling import rebuild_schema
        return (rebuild_schema, ("NamedTupleSchema", f"big-{self.n}", "Big",
                                 tuple(f"f{i}" for i in range(self.n)), (), "m"))


@pytest.mark.slow
def test_schema_field_count_is_limited_in_the_factory():
    """3: NamedTupleSchema with more fields than the documented limit is a SchemaDefinitionError."""
    with pytest.raises(SchemaDefinitionError, match="fields"):
        NamedTupleSchema("Big", [f"f{i}" for i in range(1_000_000)])


@pytest.mark.subprocess
def test_schema_field_count_is_limited_through_pickle_and_weights_only(tmp_path):
    """3: a 3M-field schema in a pickle, a 200k-field one in a weights_only file: prompt errors.

    (torch's weights-only unpickler is pure Python: reading 3M strings takes
    it longer than the time limit before namedschema is called.)
    """
    plain = tmp_path / "big.pkl"
    plain.write_bytes(pickle.dumps(_BigSchemaPickle(3_000_000), protocol=4))
    pt = tmp_path / "big.pt"
    torch.save({"s": _BigSchemaPickle(200_000)}, pt)
    outcomes = limited.outcomes_of(limited.run_limited("""
        import pickle, torch, namedschema
        _limit_memory(HEADROOM)
        def plain():
            with open(PATHS[0], "rb") as f:
                pickle.load(f)
        def weights_only():
            torch.load(PATHS[1], weights_only=True)
        out = []
        for fn in (plain, weights_only):
            out.append(outcome(fn, seconds=SECONDS))
        print(json.dumps(out))
        """, PATHS=[str(plain), str(pt)], SECONDS=5))
    # SchemaError: SchemaDefinitionError's class since issue 29 (the old name is an alias)
    assert outcomes[0].startswith("other:SchemaError"), outcomes
    assert outcomes[1].startswith(("other:UnpicklingError", "other:SchemaError")) \
        and "100,000 fields" in outcomes[1], outcomes
