"""Plain pickle of every real rlpyt replay buffer after patch_rlpyt(): exact, views kept.

Every buffer class (uniform, prioritized, frame, sequence, time-limit, and the
async variant of each) is trained, checkpointed after its cursor has wrapped,
and trained on (the twin); a fresh interpreter loads the checkpoint and
trains on: every replay batch must be the twin's, and the loaded buffer must
have the same arrays sharing memory, the same number of bytes, and the same
arrays in shared memory. Pickle protocols 0-5 and ``namedschema.save`` are
all checked, a child process writing into a loaded async buffer is seen by
its parent, and the negative controls show what happens without the fix.

Skipped unless ``RLPYT_SRC`` points at an rlpyt source tree.
"""

from __future__ import annotations

import json
import pickle
import textwrap

import pytest

from tests.helpers import run_fresh

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = [pytest.mark.rlpyt, pytest.mark.subprocess]

SYNC = ["UniformReplayBuffer", "PrioritizedReplayBuffer", "UniformReplayFrameBuffer",
        "PrioritizedReplayFrameBuffer", "UniformSequenceReplayBuffer",
        "PrioritizedSequenceReplayBuffer", "UniformSequenceReplayFrameBuffer",
        "PrioritizedSequenceReplayFrameBuffer", "TlUniformReplayBuffer"]
ASYNC = ["Async" + kind for kind in SYNC]
KINDS = SYNC + ASYNC
WITH_VIEWS = [k for k in KINDS if "Prioritized" in k or "Frame" in k]
METHODS = [f"pickle{p}" for p in range(pickle.HIGHEST_PROTOCOL + 1)] + ["save"]


def _run(body, check=True):
    # Appended, not prepended: an rlpyt checkout has its own top-level `tests`.
    code = "import os, sys\nsys.path.append(os.environ['RLPYT_SRC'])\n" + textwrap.dedent(body)
    return run_fresh(code, check=check, timeout=600)


def _last_json(proc):
    # rlpyt's logger prints to stdout too; the driver's JSON is the last line.
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def _driver(call):
    return _last_json(_run("from tests.rlpyt.replay_driver import *\n" + call))


def _twin_and_resumed(directory, kinds, methods, patch="True"):
    twin = _driver(f"many_checkpoint_run({kinds!r}, {methods!r}, {str(directory)!r}, "
                   f"patch={patch})")
    resumed = _driver(f"many_resume_run({kinds!r}, {methods!r}, {str(directory)!r}, "
                      f"patch={patch})")
    return twin, resumed


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Twin and resumed results of every kind with every method (two processes)."""
    directory = tmp_path_factory.mktemp("buffers")
    return (*_twin_and_resumed(directory, KINDS, METHODS), directory)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", KINDS)
def test_buffer_trains_identically_after_fresh_load(runs, kind, method):
    """Every replay batch after the load equals the uninterrupted twin's."""
    twin, resumed = (r[f"{kind}/{method}"] for r in runs[:2])
    assert "error" not in twin, twin
    assert "error" not in resumed, resumed
    assert resumed["type"] == kind
    assert len(twin["twin"]) == 10 and resumed["resumed"] == twin["twin"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", KINDS)
def test_views_restored_as_views_and_memory_not_doubled(runs, kind, method):
    """Same arrays sharing memory, same bytes in total, same arrays in shared memory."""
    twin, resumed = (r[f"{kind}/{method}"] for r in runs[:2])
    assert resumed["memory"] == twin["memory"]
    if kind in WITH_VIEWS:
        assert twin["memory"]["groups"], "the buffer should hold views"
    if kind.startswith("Async"):
        assert "samples.observation" in resumed["memory"]["shared"] or \
            "samples_frames" in resumed["memory"]["shared"]


@pytest.fixture(scope="module")
def unfixed(tmp_path_factory):
    """The same runs with patch_rlpyt(pickling=False): what plain pickle did before."""
    kinds = ["UniformReplayBuffer", "PrioritizedReplayFrameBuffer",
             "PrioritizedSequenceReplayFrameBuffer", "AsyncUniformReplayBuffer"]
    return _twin_and_resumed(tmp_path_factory.mktemp("unfixed"), kinds, ["pickle4"],
                             patch="{'pickling': False}")


def test_negative_views_copied_apart_without_the_fix(unfixed):
    """Negative control: frame and prioritized buffers diverge, views lost, memory grows."""
    twin, resumed = unfixed
    for kind in ("PrioritizedReplayFrameBuffer", "PrioritizedSequenceReplayFrameBuffer"):
        t, r = twin[f"{kind}/pickle4"], resumed[f"{kind}/pickle4"]
        assert r["resumed"] != t["twin"]
        assert t["memory"]["groups"] and not r["memory"]["groups"]
        assert r["memory"]["bytes"] > t["memory"]["bytes"]
    # A buffer without views was fine even then (so the comparison itself is sound).
    assert resumed["UniformReplayBuffer/pickle4"]["resumed"] == \
        twin["UniformReplayBuffer/pickle4"]["twin"]


def test_negative_async_buffer_unpicklable_without_the_fix(unfixed):
    """Negative control: an async buffer fails with rlpyt's bare mmap error, no field path."""
    error = unfixed[0]["AsyncUniformReplayBuffer/pickle4"]["error"]
    assert error == "TypeError: cannot pickle 'mmap.mmap' object"


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_loaded_async_buffer_shares_with_a_child_process(runs, start_method):
    """A child appending into a loaded async buffer is seen by the parent, batch for batch."""
    directory = runs[2]
    kinds = ASYNC if start_method == "fork" else ["AsyncPrioritizedReplayFrameBuffer"]
    out = _driver(f"many_async_child_run({kinds!r}, 'pickle4', {str(directory)!r}, "
                  f"{start_method!r})")
    twin = runs[0]
    for kind in kinds:
        got = out[f"{kind}/pickle4"]
        assert "error" not in got, (kind, got)
        assert got["exitcode"] == 0, kind
        assert got["resumed"] == twin[f"{kind}/pickle4"]["twin"], kind


def test_unpicklable_attribute_is_named():
    """Anything left that cannot be pickled is reported with its attribute path."""
    out = _last_json(_run("""
        import json, pickle, threading
        import namedschema
        namedschema.patch_rlpyt()
        from tests.rlpyt.replay_driver import BUFFERS
        buf = BUFFERS["AsyncPrioritizedReplayFrameBuffer"]["make"]()
        buf.priority_tree.callback = lambda: None
        try:
            pickle.dumps(buf)
        except namedschema.UnpicklableError as exc:
            first = [exc.path, exc.what, str(exc)]
        buf.priority_tree.callback = None
        buf.log = {"thread": threading.Thread()}
        try:  # fails while pickling, before anything is written
            import tempfile
            namedschema.save({"replay": buf}, tempfile.mkdtemp() + "/never",
                             allow_pickle=True)
        except TypeError as exc:
            second = [exc.path, type(exc).__name__]
        print(json.dumps([first, second]))
        """))
    (path, what, message), (path2, kind2) = out
    assert path == "AsyncPrioritizedReplayFrameBuffer.priority_tree.callback"
    assert what == "builtins.function" and "lambda" in message
    assert path2 == "AsyncPrioritizedReplayFrameBuffer.log.thread"
    assert kind2 == "UnpicklableError"


def test_property_buffer_round_trip():
    """Property: any buffer class, size, batch width and fill level round-trips exactly.

    Runs hypothesis inside one patched child process (rlpyt is never patched
    in the test process itself).
    """
    proc = _run("""
        import os, pickle
        import numpy as np
        from hypothesis import given, settings, strategies as st
        import namedschema
        namedschema.patch_rlpyt()
        from tests.rlpyt import replay_driver as d
        import tests.conftest  # registers and loads the hypothesis profile

        kinds = sorted(d.BUFFERS)

        @given(st.sampled_from(kinds), st.integers(1, 3), st.integers(4, 12),
               st.integers(1, 30), st.integers(0, pickle.HIGHEST_PROTOCOL))
        def check(kind, b, t_blocks, appends, protocol):
            spec = d.BUFFERS[kind]
            d.B = b
            d.SIZE = b * 4 * t_blocks
            buf, twin = spec["make"](), None
            for step in range(appends):
                buf.append_samples(d._samples(step, spec["frames"], spec["seq"],
                                              leading=(4, b), with_timeout=spec["tl"]))
            back = pickle.loads(pickle.dumps(buf, protocol))
            assert d.memory_report(back) == d.memory_report(buf)
            for (p1, a1), (p2, a2) in zip(d._arrays_of(buf, "", []),
                                          d._arrays_of(back, "", [])):
                assert p1 == p2 and np.array_equal(a1, a2), p1
            assert back.t == buf.t and back._buffer_full == buf._buffer_full
            for step in range(appends, appends + 3):
                for x in (buf, back):
                    x.append_samples(d._samples(step, spec["frames"], spec["seq"],
                                                leading=(4, b), with_timeout=spec["tl"]))
            for (p1, a1), (_p2, a2) in zip(d._arrays_of(buf, "", []),
                                           d._arrays_of(back, "", [])):
                assert np.array_equal(a1, a2), p1

        check()
        print("ok")
        """)
    assert proc.stdout.decode().strip().splitlines()[-1] == "ok"


def _traj_run(save_patch, load_patch, methods, directory):
    """Step a TrajInfo 3 times, save it each way; a fresh process loads it and steps 3 more.

    Returns (twin items, {method: loaded items}) after all six steps.
    """
    saver = _last_json(_run(f"""
        import json, pickle
        import namedschema
        if {save_patch}:
            namedschema.patch_rlpyt()
        from rlpyt.samplers.collections import TrajInfo
        t = TrajInfo()
        for r in (1.0, 0.0, 2.5):
            t.step(None, 0, r, False, None, None)
        for method in {methods!r}:
            path = {str(directory)!r} + "/traj." + method
            if method == "save":
                namedschema.save({{"traj": t, "itr": 3}}, path, allow_pickle=True)
            else:
                with open(path, "wb") as f:
                    pickle.dump(t, f, protocol=int(method[6:]))
        for r in (0.5, 0.0, 1.0):
            t.step(None, 0, r, False, None, None)
        print(json.dumps(dict(t)))
        """))
    loader = _last_json(_run(f"""
        import json, pickle
        import namedschema
        if {load_patch}:
            namedschema.patch_rlpyt()
        out = {{}}
        for method in {methods!r}:
            path = {str(directory)!r} + "/traj." + method
            if method == "save":
                t = namedschema.load(path, allow_pickle=True)["traj"]
            else:
                with open(path, "rb") as f:
                    t = pickle.load(f)
            for r in (0.5, 0.0, 1.0):
                t.step(None, 0, r, False, None, None)
            out[method] = dict(t, self_dict=t.__dict__ is t)
        print(json.dumps(out))
        """))
    return saver, loader


@pytest.mark.parametrize("load_patch", [True, False])
def test_trajinfo_keeps_counting_after_round_trip(tmp_path, load_patch):
    """An in-progress TrajInfo pickled under the patch counts on after loading, patched or not."""
    twin, loaded = _traj_run(True, load_patch, METHODS, tmp_path)
    assert twin["Length"] == 6 and twin["Return"] == 5.0
    for method in METHODS:
        got = dict(loaded[method])
        assert got.pop("self_dict") is True, method
        assert got == twin, method


def test_old_trajinfo_pickle_repaired_under_the_patch(tmp_path):
    """A TrajInfo pickled without the patch (rlpyt's own bytes) loads right under it."""
    methods = ["pickle2", "pickle5"]
    twin, loaded = _traj_run(False, True, methods, tmp_path)
    for method in methods:
        got = dict(loaded[method])
        assert got.pop("self_dict") is True and got == twin, method


def test_negative_unpatched_trajinfo_stops_counting(tmp_path):
    """Negative control: rlpyt's AttrDict unpatched on both sides; logged items stop counting."""
    methods = ["pickle2", "pickle4"]
    twin, loaded = _traj_run(False, False, methods, tmp_path)
    for method in methods:
        got = dict(loaded[method])
        assert got.pop("self_dict") is False
        assert got["Length"] == 3 and twin["Length"] == 6  # the item stayed at 3


def test_patch_reports_methods_and_unpatch_removes_them():
    """patch_rlpyt lists the methods it gave rlpyt classes; unpatch_rlpyt takes them away."""
    out = _last_json(_run("""
        import json
        import rlpyt.replays.base, rlpyt.replays.sum_tree, rlpyt.utils.synchronize
        from rlpyt.utils.collections import AttrDict
        import namedschema
        report = namedschema.patch_rlpyt()
        during = "__reduce_ex__" in vars(rlpyt.replays.base.BaseReplayBuffer)
        namedschema.unpatch_rlpyt()
        after = [name for cls in (AttrDict, rlpyt.replays.base.BaseReplayBuffer,
                                  rlpyt.replays.sum_tree.SumTree,
                                  rlpyt.utils.synchronize.RWLock)
                 for name in ("__reduce_ex__", "__setstate__", "__getstate__")
                 if name in vars(cls)]
        print(json.dumps({"methods": sorted(report.methods), "during": during,
                          "after": after}))
        """))
    assert out["methods"] == [
        "rlpyt.replays.base.BaseReplayBuffer.__getstate__",
        "rlpyt.replays.base.BaseReplayBuffer.__reduce_ex__",
        "rlpyt.replays.base.BaseReplayBuffer.__setstate__",
        "rlpyt.replays.sum_tree.SumTree.__reduce_ex__",
        "rlpyt.utils.collections.AttrDict.__reduce_ex__",
        "rlpyt.utils.collections.AttrDict.__setstate__",
        "rlpyt.utils.synchronize.RWLock.__reduce_ex__"]
    assert out["during"] and out["after"] == []


def test_inspect_names_arrays_of_a_real_checkpoint(tmp_path):
    """inspect on {replay buffer, model weights, counters}: every array by path, views once."""
    path = str(tmp_path / "run.nsc")
    out = _last_json(_run(f"""
        import json, torch
        import namedschema
        namedschema.patch_rlpyt()
        from tests.rlpyt.replay_driver import BUFFERS, _train
        spec = BUFFERS["AsyncPrioritizedReplayBuffer"]
        replay = spec["make"]()
        _train(replay, spec, 0, 12)
        frames = BUFFERS["PrioritizedReplayFrameBuffer"]
        frame_replay = frames["make"]()
        _train(frame_replay, frames, 0, 12)

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU())
                self.head = torch.nn.Linear(4, 2)

        state = {{"replay": replay, "frame_replay": frame_replay,
                  "agent": {{"model": Model().state_dict()}}, "itr": 12, "cum_steps": 96}}
        namedschema.save(state, {path!r}, allow_pickle=True)
        info = namedschema.inspect({path!r})
        back = namedschema.load({path!r}, allow_pickle=True)
        print(json.dumps({{"fields": [[f.path, f.view_of] for f in info.fields],
                          "text": str(info),
                          "shared": namedschema.buffer.is_shared_memory(
                              back["replay"].samples.observation)}}))
        """))
    fields = dict(out["fields"])
    for name in ("replay.samples.observation", "replay.samples.reward",
                 "replay.priority_tree.tree", "frame_replay.samples_frames",
                 "agent.model.conv.0.weight", "agent.model.head.bias"):
        assert name in fields, (name, sorted(fields))
    assert not [n for n in fields if n.startswith("pickled[")]
    assert fields["frame_replay.samples_new_frames"] == "frame_replay.samples_frames"
    assert fields["frame_replay.priority_tree.priorities"] == "frame_replay.priority_tree.tree"
    assert "pickled[" not in out["text"]
    assert out["shared"]  # the async buffer's arrays are in shared memory again


def test_loading_without_building_a_buffer_first(tmp_path):
    """A fresh process that only loads (builds no buffer) appends and trains identically.

    The pickle carries rlpyt's lazily assigned BufferSamples / SamplesToBuffer.
    """
    kinds = ["UniformReplayFrameBuffer", "PrioritizedSequenceReplayFrameBuffer",
             "UniformSequenceReplayBuffer", "AsyncPrioritizedReplayFrameBuffer"]
    methods = ["pickle2", "pickle5", "save"]
    twin = _driver(f"many_checkpoint_run({kinds!r}, {methods!r}, {str(tmp_path)!r})")
    resumed = _driver(f"many_resume_run({kinds!r}, {methods!r}, {str(tmp_path)!r}, "
                      "construct_first=False)")
    for key, got in resumed.items():
        assert "error" not in got, (key, got)
        assert got["resumed"] == twin[key]["twin"], key


@pytest.mark.parametrize("kind", ["TlPrioritizedReplayBuffer", "AsyncTlPrioritizedReplayBuffer"])
def test_tl_prioritized_round_trip_without_sampling(tmp_path, kind):
    """The buffer rlpyt cannot sample from still round-trips exactly (contents, tree, views)."""
    path = str(tmp_path / "tl.pkl")
    body = """
        import json, pickle, sys
        import numpy as np
        import namedschema
        namedschema.patch_rlpyt()
        from tests.rlpyt import replay_driver as d
        spec = d._buffer("rlpyt.replays.non_sequence.time_limit.KIND", tl=True,
                         prioritized=True)
        def feed(buf, steps):
            for step in steps:
                buf.append_samples(d._samples(step, False, False, with_timeout=True))
        def digest(buf):
            return [[p, np.asarray(a).tobytes().hex()[:64], a.shape]
                    for p, a in d._arrays_of(buf, "", [])]
        if MODE == "save":
            buf = spec["make"]()
            feed(buf, range(20))
            pickle.dump(buf, open(PATH, "wb"))
        else:
            buf = pickle.load(open(PATH, "rb"))
        memory = d.memory_report(buf)
        feed(buf, range(20, 30))
        print(json.dumps({"memory": memory, "arrays": digest(buf)}))
        """.replace("KIND", kind)
    saved = _last_json(_run(f"MODE, PATH = 'save', {path!r}\n" + textwrap.dedent(body)))
    loaded = _last_json(_run(f"MODE, PATH = 'load', {path!r}\n" + textwrap.dedent(body)))
    assert loaded["memory"] == saved["memory"] and loaded["arrays"] == saved["arrays"]
    assert saved["memory"]["groups"]  # the sum tree's view is there, and kept
