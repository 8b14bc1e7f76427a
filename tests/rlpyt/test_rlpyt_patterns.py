"""rlpyt drop-in tested on a stand-in rlpyt (tests/rlpyt/fake_rlpyt.py).

Every scenario runs in fresh interpreters: patching, un-patching, and the
resume scenario (checkpoint a replay buffer mid-training, restore it in a new
process, check it continues exactly like an uninterrupted twin).
"""

from __future__ import annotations

import importlib
import json
import pickle
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import run_fresh
from tests.rlpyt.fake_rlpyt import write_fake_rlpyt


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    return write_fake_rlpyt(tmp_path_factory.mktemp("fake_rlpyt"))


def _run(root, body, check=True):
    """Run ``body`` in a fresh interpreter that can import the stand-in rlpyt."""
    return run_fresh(f"import sys\nsys.path.insert(0, {root!r})\n" + textwrap.dedent(body),
                     check=check)


def _last_json(proc):
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def _driver(root, call):
    return _last_json(_run(root, "from tests.rlpyt.replay_driver import *\n" + call))


def test_patch_without_rlpyt_raises_clear_import_error():
    """patch_rlpyt() raises RlpytImportError (ImportError + NamedSchemaError) without rlpyt."""
    proc = run_fresh("""
        import sys, json
        sys.modules["rlpyt"] = None   # make rlpyt unimportable even if installed
        import namedschema
        from namedschema.errors import NamedSchemaError
        try:
            namedschema.patch_rlpyt()
        except ImportError as exc:
            print(json.dumps({"ns": isinstance(exc, NamedSchemaError),
                              "msg": str(exc), "patched":
                              namedschema.rlpyt.patch.is_patched()}))
        """)
    out = _last_json(proc)
    assert out["ns"] and not out["patched"]
    assert "rlpyt is not importable" in out["msg"]


def test_patch_rebinds_loaded_modules_and_unpatch_restores(fake_root):
    """Globals of already imported rlpyt modules point at namedschema; unpatch restores them."""
    out = _last_json(_run(fake_root, """
        import json, collections
        import rlpyt.utils.collections as C, rlpyt.utils.buffer as Bu
        import rlpyt.replays.uniform as U, rlpyt.envs as E
        before = {n: id(getattr(m, n)) for m, n in [
            (C, "namedarraytuple"), (Bu, "namedarraytuple_like"), (U, "namedarraytuple"),
            (U, "SamplesFromReplay"), (E, "namedtuple"), (C, "ExampleNat")]}
        import namedschema
        from namedschema import NamedArrayTupleSchema
        report = namedschema.patch_rlpyt()
        during = dict(
            c_nat=C.namedarraytuple is namedschema.namedarraytuple,
            u_nat=U.namedarraytuple is namedschema.namedarraytuple,
            b_like=Bu.namedarraytuple_like is namedschema.namedarraytuple_like,
            env_nt=E.namedtuple is namedschema.namedtuple,
            stdlib_untouched=collections.namedtuple.__module__ == "collections",
            sfr_schema=isinstance(U.SamplesFromReplay, NamedArrayTupleSchema),
            sfr_fields=list(U.SamplesFromReplay._fields),
            recreated=sorted(report.recreated))
        undone = namedschema.unpatch_rlpyt()
        after = {n: id(getattr(m, n)) for m, n in [
            (C, "namedarraytuple"), (Bu, "namedarraytuple_like"), (U, "namedarraytuple"),
            (U, "SamplesFromReplay"), (E, "namedtuple"), (C, "ExampleNat")]}
        print(json.dumps(dict(during=during, undone=undone, same=before == after,
                              again=namedschema.unpatch_rlpyt())))
        """))
    during = out["during"]
    assert all(during[k] for k in ("c_nat", "u_nat", "b_like", "env_nt",
                                   "stdlib_untouched", "sfr_schema"))
    assert during["sfr_fields"] == ["observation", "action", "reward", "index"]
    assert during["recreated"] == ["rlpyt.replays.uniform.SamplesFromReplay",
                                   "rlpyt.utils.collections.ExampleNat"]
    assert out["undone"] is True and out["same"] is True and out["again"] is False


def test_patch_is_idempotent(fake_root):
    """A second patch_rlpyt() changes nothing already patched; one unpatch undoes all."""
    out = _last_json(_run(fake_root, """
        import json, namedschema
        import rlpyt.utils.collections as C
        original = C.namedarraytuple
        first = namedschema.patch_rlpyt()
        second = namedschema.patch_rlpyt()
        patched_once = C.namedarraytuple is namedschema.namedarraytuple
        namedschema.unpatch_rlpyt()
        print(json.dumps(dict(first=first.already_patched, second=second.already_patched,
                              second_rebound=list(second.rebound), once=patched_once,
                              restored=C.namedarraytuple is original)))
        """))
    assert out == dict(first=False, second=True, second_rebound=[], once=True,
                       restored=True)


def test_modules_imported_after_patch_use_schemas_and_are_restored(fake_root):
    """Import hook: later imports get schemas; unpatch puts the originals back there too."""
    out = _last_json(_run(fake_root, """
        import json, namedschema
        namedschema.patch_rlpyt()
        import rlpyt.replays.prioritized as P, rlpyt.envs as E
        import rlpyt.utils.collections as C
        during = dict(
            pri=type(P.SamplesFromReplayPri).__name__,
            env_nt=E.namedtuple is namedschema.namedtuple,
            info=type(type(E.info_to_nt({"x": 1}))).__name__,
            source=bool(__import__("inspect").getsource(P)))
        namedschema.unpatch_rlpyt()
        print(json.dumps(dict(during=during,
                              nat_back=P.namedarraytuple is C.namedarraytuple
                                       and C.namedarraytuple is not namedschema.namedarraytuple,
                              env_back=E.namedtuple.__module__ == "collections")))
        """))
    assert out["during"] == dict(pri="NamedArrayTupleSchema", env_nt=True,
                                 info="NamedTupleSchema", source=True)
    assert out["nat_back"] and out["env_back"]


def test_stdlib_namedtuple_flag_leaves_stdlib_references(fake_root):
    """patch_rlpyt(stdlib_namedtuple=False) leaves modules' own collections.namedtuple alone."""
    out = _last_json(_run(fake_root, """
        import json, collections, namedschema
        import rlpyt.envs as E, rlpyt.utils.collections as C
        namedschema.patch_rlpyt(stdlib_namedtuple=False, recreate_types=False)
        print(json.dumps(dict(env=E.namedtuple is collections.namedtuple,
                              coll=C.namedtuple is namedschema.namedtuple,
                              example=type(C.ExampleNat).__name__)))
        """))
    assert out == dict(env=True, coll=True, example="type")


def test_unpatched_frame_buffer_pickle_fails_in_fresh_interpreter(fake_root, tmp_path):
    """Without the patch the issue reproduces: the lazily assigned global is None on load."""
    path = str(tmp_path / "frame.pkl")
    _driver(fake_root, f"checkpoint_run('fake', 'FrameRing', 'pickle', {path!r}, patch=False)")
    proc = _run(fake_root, f"""
        import pickle
        pickle.load(open({path!r}, "rb"))
        """, check=False)
    assert proc.returncode != 0
    assert b"NoneType" in proc.stderr


@pytest.mark.parametrize("construct_first", [True, False])
def test_uniform_buffer_resumes_from_plain_pickle(fake_root, tmp_path, construct_first):
    """A patched uniform ring buffer pickled mid-training resumes exactly in a fresh process."""
    path = str(tmp_path / "uniform.pkl")
    twin = _driver(fake_root, f"checkpoint_run('fake', 'UniformRing', 'pickle', {path!r})")
    resumed = _driver(fake_root, f"resume_run('fake', 'UniformRing', 'pickle', {path!r}, "
                                 f"construct_first={construct_first})")
    assert len(twin["twin"]) == 10
    assert resumed["resumed"] == twin["twin"]


def test_frame_buffer_needs_construction_before_resume(fake_root, tmp_path):
    """Restoring a frame buffer without building one first fails: the global is still None."""
    path = str(tmp_path / "frame.pkl")
    _driver(fake_root, f"checkpoint_run('fake', 'FrameRing', 'pickle', {path!r})")
    proc = _run(fake_root, "from tests.rlpyt.replay_driver import *\n"
                f"resume_run('fake', 'FrameRing', 'pickle', {path!r}, construct_first=False)",
                check=False)
    assert proc.returncode != 0
    assert b"NoneType" in proc.stderr


def test_plain_pickle_keeps_sum_tree_view_and_resumes_exactly(fake_root, tmp_path):
    """The patch gives SumTree a view-keeping reduction: plain pickle resumes exactly."""
    path = str(tmp_path / "pri.pkl")
    twin = _driver(fake_root, f"checkpoint_run('fake', 'PrioritizedRing', 'pickle', {path!r})")
    resumed = _driver(fake_root, f"resume_run('fake', 'PrioritizedRing', 'pickle', {path!r})")
    assert len(twin["twin"]) > 5 and resumed["resumed"] == twin["twin"]


def test_plain_pickle_without_view_pickling_breaks_sum_tree_view(fake_root, tmp_path):
    """Negative control: with pickling=False, pickle copies the priorities view apart."""
    path = str(tmp_path / "pri.pkl")
    off = "patch={'pickling': False}"
    twin = _driver(fake_root, f"checkpoint_run('fake', 'PrioritizedRing', 'pickle', "
                              f"{path!r}, {off})")
    resumed = _driver(fake_root, f"resume_run('fake', 'PrioritizedRing', 'pickle', "
                                 f"{path!r}, {off})")
    assert resumed["resumed"] != twin["twin"]


@pytest.mark.parametrize("kind", ["UniformRing", "FrameRing", "PrioritizedRing",
                                  "PrioritizedFrameRing"])
def test_buffer_resumes_from_save_load(fake_root, tmp_path, kind):
    """namedschema.save/load keeps views, so every buffer kind resumes exactly."""
    path = str(tmp_path / f"{kind}.nsc")
    twin = _driver(fake_root, f"checkpoint_run('fake', {kind!r}, 'save', {path!r})")
    resumed = _driver(fake_root, f"resume_run('fake', {kind!r}, 'save', {path!r})")
    assert len(twin["twin"]) == 10
    assert resumed["resumed"] == twin["twin"]


def test_reading_a_checkpoint_needs_no_patch(fake_root, tmp_path):
    """A fresh interpreter that never patches can load and read a patched checkpoint."""
    path = str(tmp_path / "frame.pkl")
    _driver(fake_root, f"checkpoint_run('fake', 'FrameRing', 'pickle', {path!r})")
    out = _driver(fake_root, f"read_run('pickle', {path!r})")
    assert out["patched"] is False
    assert out["buffer"] == "FrameRing" and out["samples_type"] == "BufferSamples"
    assert out["schema"] == "NamedArrayTupleSchema"
    assert out["fields"] == ["action", "reward", "done"]
    assert out["t"] == (20 * 4) % 32


@pytest.fixture(scope="module")
def patched_fake(fake_root):
    """The stand-in rlpyt imported and patched in this process; all of it removed after."""
    import namedschema
    sys.path.insert(0, fake_root)
    try:
        namedschema.patch_rlpyt()
        yield importlib.import_module("rlpyt.replays.prioritized")
    finally:
        namedschema.unpatch_rlpyt()
        sys.path.remove(fake_root)
        for name in [n for n in sys.modules if n == "rlpyt" or n.startswith("rlpyt.")]:
            del sys.modules[name]


@settings(max_examples=15)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=12),
       seed=st.integers(0, 2**16))
def test_property_patched_buffer_pickle_round_trip(patched_fake, sizes, seed):
    """Property: a patched ring buffer's pickle round trip keeps contents, cursor and schema."""
    from tests.rlpyt import replay_driver as driver
    buf = driver.BACKENDS["fake"]["UniformRing"]["make"]()
    rng = np.random.default_rng(seed)
    for n in sizes:
        s = driver._samples(int(rng.integers(1 << 30)), False, False, leading=(n, driver.B))
        buf.append_samples(s)
    back = pickle.loads(pickle.dumps(buf, protocol=4))
    assert back.t == buf.t and back.full == buf.full
    assert type(back.samples) is type(buf.samples)
    for a, b in zip(back.samples, buf.samples):
        np.testing.assert_array_equal(a, b)


def test_import_swap_buffer_loads_in_fresh_interpreter(tmp_path):
    """rlpyt-style code with only its imports swapped builds buffers that load anywhere."""
    path = str(tmp_path / "swap.pkl")
    run_fresh(f"""
        import pickle
        import numpy as np
        from namedschema import namedarraytuple
        from namedschema.buffer import buffer_from_example, get_leading_dims, torchify_buffer

        def build():
            # A type made inside a function: rlpyt's factory could never pickle it.
            Samples = namedarraytuple("Samples", ["observation", "action", "reward"])
            example = Samples(np.zeros((3, 2), np.uint8), np.int64(0), np.float32(0))
            return buffer_from_example(example, (5, 2))

        buf = build()
        assert get_leading_dims(buf, 2) == (5, 2)
        buf[1] = 3
        assert torchify_buffer(buf).reward.shape == (5, 2)
        pickle.dump(buf, open({path!r}, "wb"), protocol=4)
        """)
    out = _last_json(run_fresh(f"""
        import json, pickle, sys
        buf = pickle.load(open({path!r}, "rb"))
        print(json.dumps(dict(name=type(buf).__name__, fields=list(buf._fields),
                              rlpyt="rlpyt" in sys.modules,
                              obs=buf.observation[1, 0].tolist(), reward=buf.reward[0].tolist())))
        """))
    assert out == dict(name="Samples", fields=["observation", "action", "reward"],
                       rlpyt=False, obs=[[3, 3], [3, 3], [3, 3]], reward=[0.0, 0.0])
