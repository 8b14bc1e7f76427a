"""``resumable`` refuses hostile files unread and runs built with other arguments.

From hardening round 3 (issue 22), items 2 and 3, with the real rlpyt (RLPYT_SRC):

2. ``resumable`` never unpickles a file before its header (plain data) says it
   is a resume checkpoint of this version; hostile files at every path it
   reads run no code.
3. A resumed run built with other arguments (optimizer hyperparameters,
   algorithm scalars, env arguments) is refused, naming each difference,
   unless accepted with ``accept_changes``; accepted ones take effect (the
   new learning rate in the optimizer too). A changed ``replay_size`` stays
   refused.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.figures import record
from tests.helpers import run_fresh

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = pytest.mark.rlpyt

PRELUDE = """
import json, os, sys, warnings, pickle
sys.path.append(os.environ["RLPYT_SRC"])
import numpy as np
import torch
torch.set_num_threads(1)
import namedschema
namedschema.patch_rlpyt()
from namedschema.rlpyt import ResumeError, ResumeWarning, resumable
from tests.rlpyt.driver import build
"""


def run(body, tmp_path, head=""):
    code = PRELUDE + head + textwrap.dedent(body)
    proc = run_fresh(f"import os\nos.chdir({str(tmp_path)!r})\n" + code, timeout=300)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


# ---------------------------------------------------------------------------
# 2. No unpickling before the plain-data marker is checked
# ---------------------------------------------------------------------------

HOSTILE = """
class Payload:
    '''Unpickling it creates the file MARKER: proof that code ran.'''
    def __reduce__(self):
        return (open, (os.path.abspath("MARKER"), "w"))

def attempt(path):
    if os.path.exists("MARKER"):
        os.unlink("MARKER")
    try:
        resumable(build("dqn_uniform"), path)
        outcome = "accepted"
    except (ResumeError, namedschema.FormatError, OSError) as exc:
        outcome = type(exc).__name__ + ": " + str(exc)[:300]
    return outcome, os.path.exists("MARKER")
"""


def test_foreign_pickled_checkpoint_is_refused_without_running_its_payload(tmp_path):
    """2: a pickled namedschema file that is not a resume checkpoint runs nothing.

    Before, ``load(allow_pickle=True)`` came first: the payload ran, then
    ResumeError. A file whose pickled data even claims the resume format
    (``{"format": CHECKPOINT_KIND}``) but whose header does not is refused too,
    as is a resume checkpoint of another version.
    """
    out = run("""
        from namedschema.rlpyt.resume import CHECKPOINT_KIND
        results = {}
        namedschema.save({"payload": Payload()}, "foreign.nsc", allow_pickle=True)
        results["foreign"] = attempt("foreign.nsc")
        namedschema.save({"format": CHECKPOINT_KIND, "version": 1, "payload": Payload()},
                         "claims.nsc", allow_pickle=True)
        results["claims"] = attempt("claims.nsc")
        namedschema.save({"payload": Payload()}, "version.nsc", allow_pickle=True,
                         metadata={"kind": CHECKPOINT_KIND, "version": "99"})
        results["version"] = attempt("version.nsc")
        # Positive control: the same payload does run when loaded with allow_pickle.
        namedschema.load("foreign.nsc", allow_pickle=True)
        results["control"] = os.path.exists("MARKER")
        print(json.dumps(results))
        """, tmp_path, HOSTILE)
    for name in ("foreign", "claims", "version"):
        outcome, ran = out[name]
        assert outcome.startswith("ResumeError"), (name, outcome)
        assert not ran, f"{name}: the payload ran"
    assert "not one written by namedschema.rlpyt.resumable" in out["foreign"][0]
    assert "nothing in it was loaded" in out["foreign"][0]
    assert "version '99'" in out["version"][0]
    assert out["control"] is True


def test_hostile_files_at_every_path_resumable_reads(tmp_path):
    """Generalized: every kind of hostile file at the checkpoint path and its journal path.

    ``resumable`` reads the checkpoint and, through ``load``, the journal an
    interrupted incremental save may leave (``.<name>.journal``). Each file
    must be refused (ResumeError or FormatError) or ignored, never run code,
    and never be overwritten by the refusal.
    """
    out = run("""
        import io, zipfile, struct
        from namedschema.rlpyt.resume import CHECKPOINT_KIND
        payload = pickle.dumps(Payload())
        npy = io.BytesIO(); np.save(npy, np.arange(5)); npy = npy.getvalue()
        pickled_npy = io.BytesIO(); np.save(pickled_npy, np.array([Payload()], object),
                                            allow_pickle=True)
        tz = io.BytesIO(); torch.save({"p": Payload()}, tz); tz = tz.getvalue()
        files = {
            "raw pickle": payload,
            "pickle protocol 0": pickle.dumps(Payload(), protocol=0),
            "npy": npy,
            "npy with pickled objects": pickled_npy.getvalue(),
            "torch zip with payload": tz,
            "hdf5 magic": b"\\x89HDF\\r\\n\\x1a\\n" + bytes(200),
            "text": b"lr: 0.001\\ndiscount: 0.99\\n" * 20,
            "empty": b"",
            "short": b"\\x80",
            "random": os.urandom(4096),
            "safetensors-like": struct.pack("<Q", 2) + b"{}",
            "length prefix only": struct.pack("<Q", 10**12),
        }
        # namedschema files of every wrong kind, all carrying the payload.
        for meta_name, meta in {"no metadata": None,
                                "other kind": {"kind": "somebody.else"},
                                "right kind, other version": {"kind": CHECKPOINT_KIND,
                                                              "version": "0"}}.items():
            namedschema.save({"p": Payload()}, "tmp.nsc", allow_pickle=True, metadata=meta)
            files["namedschema, " + meta_name] = open("tmp.nsc", "rb").read()
        results = {}
        for name, data in files.items():
            with open("ck.nsc", "wb") as f:
                f.write(data)
            outcome, ran = attempt("ck.nsc")
            kept = open("ck.nsc", "rb").read() == data
            results["path: " + name] = [outcome, ran, kept]
        os.unlink("ck.nsc")
        # Non-regular files at the path.
        os.mkfifo("ck.nsc")
        results["path: fifo"] = [*attempt("ck.nsc"), True]
        os.unlink("ck.nsc")
        os.mkdir("ck.nsc")
        results["path: directory"] = [*attempt("ck.nsc"), os.path.isdir("ck.nsc")]
        os.rmdir("ck.nsc")
        os.symlink("ck.nsc", "ck.nsc")  # a link loop
        results["path: symlink loop"] = [*attempt("ck.nsc"), os.path.islink("ck.nsc")]
        os.unlink("ck.nsc")
        # Hostile journals next to a valid foreign (pickled) file and a real checkpoint.
        runner = resumable(build("dqn_uniform"), "real.nsc", every_itrs=5)
        runner.n_steps = 48
        runner.train()
        for target in ("foreign.nsc", "real.nsc"):
            if target == "foreign.nsc":
                namedschema.save({"p": Payload()}, target, allow_pickle=True)
            good = open(target, "rb").read()
            for name, data in files.items():
                with open(target, "wb") as f:
                    f.write(good)
                with open(f".{target}.journal", "wb") as f:
                    f.write(data)
                outcome, ran = attempt(target)
                results[f"journal of {target}: {name}"] = [outcome, ran, True]
                if os.path.lexists(f".{target}.journal"):
                    os.unlink(f".{target}.journal")
        print(json.dumps(results))
        """, tmp_path, HOSTILE)
    cases = 0
    for name, (outcome, ran, kept) in out.items():
        assert not ran, f"{name}: code ran ({outcome})"
        assert kept, f"{name}: the file was changed"
        if name.startswith("path:"):
            refused = ("ResumeError", "FormatError", "UnexpectedKindError",
                       "OSError" if "loop" in name else "ResumeError")
            assert outcome.startswith(refused), (name, outcome)
        elif "foreign" in name:
            assert outcome.startswith("ResumeError"), (name, outcome)
        else:  # a real checkpoint with a junk journal: the journal is discarded
            assert outcome == "accepted", (name, outcome)
        cases += 1
    assert cases >= 45
    record("round3.hostile_resume_files", cases)


# ---------------------------------------------------------------------------
# 3. Changed arguments: refused, or accepted deliberately and then in effect
# ---------------------------------------------------------------------------

CHANGED = """
def make(lr=1e-3, discount=0.99, lives=3, replay_size=200, **accept):
    runner = build("dqn_uniform")
    runner.algo.learning_rate = lr
    runner.algo.discount = discount
    runner.algo.replay_size = replay_size
    runner.sampler.env_kwargs = dict(runner.sampler.env_kwargs, lives=lives)
    runner.n_steps = 64
    return resumable(runner, "run.nsc", every_itrs=4, **accept)

first = make()
first.train()

def resume(**kwargs):
    runner = make(**kwargs.pop("build", {}), **kwargs)
    seen = {}
    optimize = runner.algo.optimize_agent
    def spy(*a, **k):
        algo = runner.algo
        seen.setdefault("lr", [g["lr"] for g in algo.optimizer.param_groups])
        seen.setdefault("discount", algo.discount)
        seen.setdefault("lives", [e.n_lives for e in runner.sampler.collector.envs])
        return optimize(*a, **k)
    runner.algo.optimize_agent = spy
    runner.n_steps = 96
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            runner.train()
            error = None
        except ResumeError as exc:
            error = str(exc)
    notes = [str(w.message) for w in caught if issubclass(w.category, ResumeWarning)]
    return {"error": error, "seen": seen, "notes": notes}
"""


def test_changed_hyperparameters_are_refused_with_the_list_of_differences(tmp_path):
    """3: lr, discount and env lives changed: ResumeError naming all three, before training."""
    out = run("""
        out = resume(build=dict(lr=0.5, discount=0.5, lives=7))
        print(json.dumps(out))
        """, tmp_path, CHANGED)
    error = out["error"]
    assert error is not None, "a run with other arguments resumed silently"
    assert "algo.learning_rate: 0.001 -> 0.5" in error
    assert "algo.discount: 0.99 -> 0.5" in error
    assert "sampler.env_kwargs.lives: 3 -> 7" in error
    assert "accept_changes=" in error
    assert out["seen"] == {}, "training ran before the refusal"


def test_accepted_changes_take_effect_in_the_optimizer_and_the_envs(tmp_path):
    """3: accept_changes makes the new lr reach the optimizer state; discount and lives too."""
    out = run("""
        from tests.rlpyt.envs import AtariLike
        out = resume(build=dict(lr=0.5, discount=0.5, lives=7),
                     accept_changes=["algo.learning_rate", "algo.discount",
                                     "sampler.env_kwargs"])
        import namedschema as ns
        state = ns.load("run.nsc", allow_pickle=True)
        def groups(x, depth=0):
            if isinstance(x, dict):
                if "param_groups" in x:
                    return [g["lr"] for g in x["param_groups"]]
                for v in x.values():
                    found = groups(v, depth + 1) if depth < 8 else None
                    if found:
                        return found
            return None
        out["saved_lr"] = groups(state["state"]["algo"])
        out["saved_discount"] = state["config"]["arguments"]["algo.discount"]
        print(json.dumps(out))
        """, tmp_path, CHANGED)
    assert out["error"] is None, out["error"]
    assert out["seen"]["lr"] == [0.5]
    assert out["seen"]["discount"] == 0.5
    assert out["seen"]["lives"] == [7, 7]
    assert any("accepted" in n and "algo.learning_rate: 0.001 -> 0.5" in n
               for n in out["notes"]), out["notes"]
    assert any("new episodes" in n for n in out["notes"]), out["notes"]
    assert out["saved_lr"] == [0.5] and out["saved_discount"] == 0.5


def test_accept_all_and_replay_size_stays_refused(tmp_path):
    """3: accept_changes=True accepts every change but replay_size, which shapes the state."""
    out = run("""
        out = {}
        out["all"] = resume(build=dict(lr=0.25), accept_changes=True)
        out["replay"] = resume(build=dict(replay_size=400), accept_changes=True)
        out["partial"] = resume(build=dict(lr=0.5, discount=0.5),
                                accept_changes=["algo.learning_rate"])
        try:
            resumable(build("dqn_uniform"), "other.nsc", accept_changes=3)
        except ResumeError as exc:
            out["bad"] = str(exc)
        print(json.dumps(out))
        """, tmp_path, CHANGED)
    assert out["all"]["error"] is None and out["all"]["seen"]["lr"] == [0.25]
    assert "algo.replay_size: 200 -> 400" in out["replay"]["error"]
    assert "cannot change" in out["replay"]["error"]
    assert "algo.discount" in out["partial"]["error"]
    assert "algo.learning_rate" not in out["partial"]["error"]
    assert "accept_changes must be" in out["bad"]
