"""The rlpyt drop-in against a real rlpyt source tree (opt-in).

Skipped unless ``RLPYT_SRC`` points at an rlpyt checkout (the directory that
contains the ``rlpyt`` package); rlpyt needs torch, psutil and pyprind, which the
test extra has. Run with ``RLPYT_SRC=/path/to/rlpyt pytest -m rlpyt``;
``bash .ci/run`` extracts rlpyt and runs them.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.helpers import run_fresh

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = pytest.mark.rlpyt

UNIFORM = ["UniformReplayBuffer", "UniformSequenceReplayBuffer"]
WITH_VIEWS = ["PrioritizedReplayBuffer", "UniformReplayFrameBuffer",
              "PrioritizedReplayFrameBuffer", "PrioritizedSequenceReplayBuffer",
              "UniformSequenceReplayFrameBuffer", "PrioritizedSequenceReplayFrameBuffer"]


def _run(body, check=True):
    # Appended, not prepended: an rlpyt checkout has its own top-level `tests`.
    code = "import os, sys\nsys.path.append(os.environ['RLPYT_SRC'])\n" + textwrap.dedent(body)
    return run_fresh(code, check=check, timeout=300)


def _last_json(proc):
    # rlpyt's logger prints to stdout too; the driver's JSON is the last line.
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def _driver(call, check=True):
    proc = _run("from tests.rlpyt.replay_driver import *\n" + call, check=check)
    return _last_json(proc) if check else proc


def test_patch_reaches_rlpyt_modules_and_unpatch_restores():
    """patch_rlpyt swaps rlpyt's factories, buffer functions and module-level types; unpatch undoes it."""
    out = _last_json(_run("""
        import json
        import rlpyt.replays.non_sequence.prioritized as P
        import rlpyt.utils.buffer as Bu, rlpyt.utils.collections as C
        names = [(P, "namedarraytuple"), (P, "SamplesFromReplayPri"),
                 (P, "torchify_buffer"), (Bu, "namedarraytuple_like"), (C, "namedarraytuple")]
        before = [id(getattr(m, n)) for m, n in names]
        import namedschema
        from namedschema import NamedArrayTupleSchema
        report = namedschema.patch_rlpyt()
        during = dict(
            nat=P.namedarraytuple is namedschema.namedarraytuple,
            pri=isinstance(P.SamplesFromReplayPri, NamedArrayTupleSchema),
            pri_fields=list(P.SamplesFromReplayPri._fields),
            torchify=P.torchify_buffer.__module__,
            n_recreated=len(report.recreated))
        import rlpyt.replays.sequence.prioritized as SP   # through the import hook
        during["seq_pri"] = isinstance(SP.SamplesFromReplayPri, NamedArrayTupleSchema)
        namedschema.unpatch_rlpyt()
        after = [id(getattr(m, n)) for m, n in names]
        print(json.dumps(dict(during=during, restored=before == after,
                              seq_restored=SP.namedarraytuple is C.namedarraytuple)))
        """))
    during = out["during"]
    assert during["nat"] and during["pri"] and during["seq_pri"]
    assert during["pri_fields"][-1] == "is_weights"
    assert during["n_recreated"] >= 3
    assert out["restored"] and out["seq_restored"]


def test_unpatched_frame_buffer_pickle_fails_in_fresh_interpreter(tmp_path):
    """The issue reproduced: rlpyt's frame buffer pickles but cannot load in a new process."""
    path = str(tmp_path / "frame.pkl")
    _driver(f"checkpoint_run('UniformReplayFrameBuffer', 'pickle', {path!r}, "
            "patch=False)")
    proc = _run(f"import pickle; pickle.load(open({path!r}, 'rb'))", check=False)
    assert proc.returncode != 0 and b"NoneType" in proc.stderr


@pytest.mark.parametrize("kind", UNIFORM)
def test_uniform_buffers_resume_from_plain_pickle(tmp_path, kind):
    """Buffers without array views resume exactly after pickle protocol 4 in a fresh process."""
    path = str(tmp_path / f"{kind}.pkl")
    twin = _driver(f"checkpoint_run({kind!r}, 'pickle', {path!r})")
    resumed = _driver(f"resume_run({kind!r}, 'pickle', {path!r})")
    assert len(twin["twin"]) == 10 and resumed["resumed"] == twin["twin"]


@pytest.mark.parametrize("kind", UNIFORM + WITH_VIEWS)
def test_buffers_resume_from_save_load(tmp_path, kind):
    """Every rlpyt replay buffer resumes exactly through namedschema.save/load."""
    path = str(tmp_path / f"{kind}.nsc")
    twin = _driver(f"checkpoint_run({kind!r}, 'save', {path!r})")
    resumed = _driver(f"resume_run({kind!r}, 'save', {path!r})")
    assert len(twin["twin"]) == 10 and resumed["resumed"] == twin["twin"]


@pytest.mark.parametrize("kind", ["PrioritizedReplayBuffer", "UniformReplayFrameBuffer"])
def test_plain_pickle_of_view_holding_buffers_diverges_without_pickling_patch(tmp_path, kind):
    """Negative control: without the patch's pickling, views are copied apart and drift.

    (With it, tests/rlpyt/test_rlpyt_pickling.py shows every buffer resuming exactly.)
    """
    path = str(tmp_path / f"{kind}.pkl")
    off = "patch={'pickling': False}"
    twin = _driver(f"checkpoint_run({kind!r}, 'pickle', {path!r}, {off})")
    resumed = _driver(f"resume_run({kind!r}, 'pickle', {path!r}, {off})")
    assert resumed["resumed"] != twin["twin"]


def test_reading_a_checkpoint_needs_no_patch(tmp_path):
    """A fresh interpreter that never patches loads and reads a frame buffer checkpoint."""
    path = str(tmp_path / "frame.nsc")
    _driver(f"checkpoint_run('UniformReplayFrameBuffer', 'save', {path!r})")
    out = _driver(f"read_run('save', {path!r})")
    assert out["patched"] is False and out["schema"] == "NamedArrayTupleSchema"
    assert out["samples_type"] == "BufferSamples"
    assert out["fields"] == ["action", "reward", "done"]
