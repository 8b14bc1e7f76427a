"""rlpyt's patterns under the drop-in: on the real rlpyt, or its stand-in where there is none.

With ``RLPYT_SRC`` (always in CI) every scenario runs on the real rlpyt. Without it they
run on tests/rlpyt/fake_rlpyt.py, a stand-in with rlpyt's module paths, class names and
patterns, which tests/rlpyt/test_fake_rlpyt_vs_real.py checks against the real rlpyt.
Every scenario runs in fresh interpreters: patching, un-patching, and the resume
scenario (checkpoint a replay buffer mid-training, restore it in a new process, check it
continues exactly like an uninterrupted twin).
"""

from __future__ import annotations

import importlib
import json
import pickle
import sys
import textwrap
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import rlpyt_src
from tests.helpers import examples, run_fresh
from tests.rlpyt.fake_rlpyt import write_fake_rlpyt

pytestmark = pytest.mark.slow  # real rlpyt or its stand-in, imported in every test


@pytest.fixture(scope="module")
def rlpyt_tree(tmp_path_factory):
    """The real rlpyt source tree when RLPYT_SRC names one, else the stand-in (a temp dir)."""
    return rlpyt_src() or write_fake_rlpyt(tmp_path_factory.mktemp("fake_rlpyt"))


def _run(root, body, check=True):
    """Run ``body`` in a fresh interpreter that can import rlpyt from ``root``."""
    # Appended, not prepended: an rlpyt checkout has its own top-level `tests`.
    return run_fresh(f"import sys\nsys.path.append({root!r})\n" + textwrap.dedent(body),
                     check=check, timeout=300)


def _last_json(proc):
    # rlpyt's logger prints to stdout too; the driver's JSON is the last line.
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def _driver(root, call):
    return _last_json(_run(root, "from tests.rlpyt.replay_driver import *\n" + call))


@pytest.mark.subprocess
def test_patch_without_rlpyt_raises_clear_import_error():
    """patch_rlpyt() raises MissingModuleError (ModuleNotFoundError + NamedSchemaError;
    RlpytImportError is its old name) without rlpyt; it names the module and pickles."""
    proc = run_fresh("""
        import sys, json
        sys.modules["rlpyt"] = None   # make rlpyt unimportable even if installed
        import pickle
        import namedschema
        from namedschema.errors import NamedSchemaError
        try:
            namedschema.patch_rlpyt()
        except ImportError as exc:
            back = pickle.loads(pickle.dumps(exc))
            print(json.dumps({"ns": isinstance(exc, NamedSchemaError),
                              "missing": isinstance(exc, namedschema.MissingModuleError)
                              and isinstance(exc, ModuleNotFoundError),
                              "old_name": isinstance(exc, namedschema.rlpyt.RlpytImportError),
                              "module": [exc.module, exc.name, back.module, back.name],
                              "same": str(back) == str(exc),
                              "msg": str(exc), "patched":
                              namedschema.rlpyt.patch.is_patched()}))
        """)
    out = _last_json(proc)
    assert out["ns"] and out["missing"] and out["old_name"] and not out["patched"]
    assert out["module"] == [out["module"][0]] * 4 and out["same"]
    assert out["module"][0].split(".")[0] == "rlpyt"
    assert "rlpyt is not importable" in out["msg"]


@pytest.mark.subprocess
def test_patch_rebinds_loaded_modules_and_unpatch_restores(rlpyt_tree):
    """Globals of already imported rlpyt modules point at namedschema; unpatch restores them."""
    out = _last_json(_run(rlpyt_tree, """
        import json, collections
        import rlpyt.utils.collections as C, rlpyt.utils.buffer as Bu
        import rlpyt.replays.non_sequence.n_step as N, rlpyt.envs.base as E
        names = [(C, "namedarraytuple"), (Bu, "namedarraytuple_like"), (N, "namedarraytuple"),
                 (N, "SamplesFromReplay"), (E, "namedtuple"), (C, "DocExampleNat")]
        before = {n: id(getattr(m, n)) for m, n in names}
        import namedschema
        from namedschema import NamedArrayTupleSchema
        report = namedschema.patch_rlpyt()
        during = dict(
            c_nat=C.namedarraytuple is namedschema.namedarraytuple,
            n_nat=N.namedarraytuple is namedschema.namedarraytuple,
            b_like=Bu.namedarraytuple_like is namedschema.namedarraytuple_like,
            env_nt=E.namedtuple is namedschema.namedtuple,
            stdlib_untouched=collections.namedtuple.__module__ == "collections",
            sfr_schema=isinstance(N.SamplesFromReplay, NamedArrayTupleSchema),
            sfr_fields=list(N.SamplesFromReplay._fields),
            recreated=sorted(report.recreated))
        undone = namedschema.unpatch_rlpyt()
        after = {n: id(getattr(m, n)) for m, n in names}
        print(json.dumps(dict(during=during, undone=undone, same=before == after,
                              again=namedschema.unpatch_rlpyt())))
        """))
    during = out["during"]
    assert all(during[k] for k in ("c_nat", "n_nat", "b_like", "env_nt",
                                   "stdlib_untouched", "sfr_schema"))
    assert during["sfr_fields"] == ["agent_inputs", "action", "return_", "done", "done_n",
                                    "target_inputs"]
    assert {"rlpyt.replays.non_sequence.n_step.SamplesFromReplay",
            "rlpyt.utils.collections.DocExampleNat"} <= set(during["recreated"])
    assert out["undone"] is True and out["same"] is True and out["again"] is False


@pytest.mark.subprocess
def test_patch_is_idempotent(rlpyt_tree):
    """A second patch_rlpyt() changes nothing already patched; one unpatch undoes all."""
    out = _last_json(_run(rlpyt_tree, """
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


@pytest.mark.subprocess
def test_modules_imported_after_patch_use_schemas_and_are_restored(rlpyt_tree):
    """Import hook: later imports get schemas; unpatch puts the originals back there too."""
    out = _last_json(_run(rlpyt_tree, """
        import inspect, json, namedschema
        namedschema.patch_rlpyt()
        import rlpyt.replays.non_sequence.prioritized as P, rlpyt.envs.base as E
        import rlpyt.utils.collections as C
        during = dict(
            pri=type(P.SamplesFromReplayPri).__name__,
            env_nt=E.namedtuple is namedschema.namedtuple,
            run_time=type(E.namedtuple("EnvInfo", ["x"])).__name__,
            source=bool(inspect.getsource(P)))
        namedschema.unpatch_rlpyt()
        print(json.dumps(dict(during=during,
                              nat_back=P.namedarraytuple is C.namedarraytuple
                                       and C.namedarraytuple is not namedschema.namedarraytuple,
                              env_back=E.namedtuple.__module__ == "collections")))
        """))
    assert out["during"] == dict(pri="NamedArrayTupleSchema", env_nt=True,
                                 run_time="NamedTupleSchema", source=True)
    assert out["nat_back"] and out["env_back"]


@pytest.mark.subprocess
def test_stdlib_namedtuple_flag_leaves_stdlib_references(rlpyt_tree):
    """patch_rlpyt(stdlib_namedtuple=False) leaves modules' own collections.namedtuple alone."""
    out = _last_json(_run(rlpyt_tree, """
        import json, collections, namedschema
        import rlpyt.envs.base as E, rlpyt.utils.collections as C
        namedschema.patch_rlpyt(stdlib_namedtuple=False, recreate_types=False)
        print(json.dumps(dict(env=E.namedtuple is collections.namedtuple,
                              coll=C.namedtuple is namedschema.namedtuple,
                              example=type(C.DocExampleNat).__name__)))
        """))
    assert out == dict(env=True, coll=True, example="type")


@pytest.mark.subprocess
def test_unpatched_frame_buffer_pickle_fails_in_fresh_interpreter(rlpyt_tree, tmp_path):
    """Without the patch the issue reproduces: the lazily assigned global is None on load."""
    path = str(tmp_path / "frame.pkl")
    _driver(rlpyt_tree, f"checkpoint_run('PrioritizedReplayFrameBuffer', 'pickle', {path!r}, "
                        "patch=False)")
    proc = _run(rlpyt_tree, f"""
        import pickle
        pickle.load(open({path!r}, "rb"))
        """, check=False)
    assert proc.returncode != 0
    assert b"NoneType" in proc.stderr


@pytest.mark.subprocess
@pytest.mark.parametrize("construct_first", [True, False])
def test_uniform_buffer_resumes_from_plain_pickle(rlpyt_tree, tmp_path, construct_first):
    """A patched uniform buffer pickled mid-training resumes exactly in a fresh process."""
    path = str(tmp_path / "uniform.pkl")
    twin = _driver(rlpyt_tree, f"checkpoint_run('UniformReplayBuffer', 'pickle', {path!r})")
    resumed = _driver(rlpyt_tree, f"resume_run('UniformReplayBuffer', 'pickle', {path!r}, "
                                  f"construct_first={construct_first})")
    assert len(twin["twin"]) == 10
    assert resumed["resumed"] == twin["twin"]


@pytest.mark.subprocess
def test_frame_buffer_resumes_without_being_built_first(rlpyt_tree, tmp_path):
    """A patched frame buffer's pickle carries its lazy global: no buffer need be built first."""
    path = str(tmp_path / "frame.pkl")
    twin = _driver(rlpyt_tree, f"checkpoint_run('UniformReplayFrameBuffer', 'pickle', "
                               f"{path!r})")
    resumed = _driver(rlpyt_tree, f"resume_run('UniformReplayFrameBuffer', 'pickle', "
                                  f"{path!r}, construct_first=False)")
    assert len(twin["twin"]) == 10 and resumed["resumed"] == twin["twin"]


@pytest.mark.subprocess
def test_plain_pickle_keeps_sum_tree_view_and_resumes_exactly(rlpyt_tree, tmp_path):
    """The patch gives SumTree a view-keeping reduction: plain pickle resumes exactly."""
    path = str(tmp_path / "pri.pkl")
    twin = _driver(rlpyt_tree, f"checkpoint_run('PrioritizedReplayBuffer', 'pickle', {path!r})")
    resumed = _driver(rlpyt_tree, f"resume_run('PrioritizedReplayBuffer', 'pickle', {path!r})")
    assert len(twin["twin"]) > 5 and resumed["resumed"] == twin["twin"]


@pytest.mark.subprocess
def test_plain_pickle_without_view_pickling_breaks_sum_tree_view(rlpyt_tree, tmp_path):
    """Negative control: with pickling=False, pickle copies the priorities view apart."""
    path = str(tmp_path / "pri.pkl")
    off = "patch={'pickling': False}"
    twin = _driver(rlpyt_tree, f"checkpoint_run('PrioritizedReplayFrameBuffer', 'pickle', "
                               f"{path!r}, {off})")
    resumed = _driver(rlpyt_tree, f"resume_run('PrioritizedReplayFrameBuffer', 'pickle', "
                                  f"{path!r}, {off})")
    assert resumed["resumed"] != twin["twin"]


@pytest.mark.subprocess
@pytest.mark.parametrize("kind", ["UniformReplayBuffer", "UniformReplayFrameBuffer",
                                  "PrioritizedReplayBuffer", "PrioritizedReplayFrameBuffer"])
def test_buffer_resumes_from_save_load(rlpyt_tree, tmp_path, kind):
    """namedschema.save/load keeps views, so every buffer kind resumes exactly."""
    path = str(tmp_path / f"{kind}.nsc")
    twin = _driver(rlpyt_tree, f"checkpoint_run({kind!r}, 'save', {path!r})")
    resumed = _driver(rlpyt_tree, f"resume_run({kind!r}, 'save', {path!r})")
    assert len(twin["twin"]) == 10
    assert resumed["resumed"] == twin["twin"]


@pytest.mark.subprocess
def test_reading_a_checkpoint_needs_no_patch(rlpyt_tree, tmp_path):
    """A fresh interpreter that never patches can load and read a patched pickle."""
    path = str(tmp_path / "frame.pkl")
    _driver(rlpyt_tree, f"checkpoint_run('UniformReplayFrameBuffer', 'pickle', {path!r})")
    out = _driver(rlpyt_tree, f"read_run('pickle', {path!r})")
    assert out["patched"] is False
    assert out["buffer"] == "UniformReplayFrameBuffer" and out["samples_type"] == "BufferSamples"
    assert out["schema"] == "NamedArrayTupleSchema"
    assert out["fields"] == ["action", "reward", "done"]
    assert out["t"] == (20 * 4) % 32


@pytest.fixture(scope="module")
def patched_rlpyt(rlpyt_tree):
    """rlpyt (real or stand-in) imported and patched in this process; all of it removed after."""
    import namedschema
    sys.path.append(rlpyt_tree)
    try:
        with warnings.catch_warnings():  # rlpyt's own source: invalid escape sequences
            warnings.simplefilter("ignore", DeprecationWarning)
            namedschema.patch_rlpyt()
            module = importlib.import_module("rlpyt.replays.non_sequence.uniform")
        yield module
    finally:
        namedschema.unpatch_rlpyt()
        sys.path.remove(rlpyt_tree)
        for name in [n for n in sys.modules if n == "rlpyt" or n.startswith("rlpyt.")]:
            del sys.modules[name]


@settings(max_examples=examples(15))
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=12),
       seed=st.integers(0, 2**16))
def test_property_patched_buffer_pickle_round_trip(patched_rlpyt, sizes, seed):
    """Property: a patched replay buffer's pickle round trip keeps contents, cursor and schema."""
    from tests.rlpyt import replay_driver as driver
    buf = driver.BUFFERS["UniformReplayBuffer"]["make"]()
    rng = np.random.default_rng(seed)
    for n in sizes:
        s = driver._samples(int(rng.integers(1 << 30)), False, False, leading=(n, driver.B))
        buf.append_samples(s)
    back = pickle.loads(pickle.dumps(buf, protocol=4))
    assert back.t == buf.t and back._buffer_full == buf._buffer_full
    assert type(back.samples) is type(buf.samples)
    for a, b in zip(back.samples, buf.samples, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.subprocess
def test_import_swap_buffer_loads_in_fresh_interpreter(tmp_path):
    """rlpyt-style code with only its imports swapped builds buffers that load anywhere."""
    pytest.importorskip("torch")
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
