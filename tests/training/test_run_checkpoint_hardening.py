"""RunCheckpoint against damaged, forged and mismatched files (issue 34 items 8-12, 35.1-2).

A restore checks the whole file before it changes anything: a file that does not
fit raises one RunCheckpointError and every tracked object is as it was.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import namedschema
from namedschema.errors import RunCheckpointError, RunCheckpointWarning

torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

from tests.training.run_checkpoint_fixtures import advance, build, fingerprint  # noqa: E402

pytestmark = pytest.mark.slow

META = {"kind": "namedschema.RunCheckpoint", "version": "1"}


@pytest.fixture
def saved(tmp_path):
    """A checkpoint at step 4,000 of a run that trained a little; its path."""
    path = tmp_path / "run.nsc"
    ckpt, run = build(path)
    advance(run)
    ckpt.save(4000, obs=np.arange(4.0))
    return path


def _fresh(path, **kwargs):
    ckpt, run = build(path, **kwargs)
    advance(run, 1)            # not the saved state: a restore must change it, or not at all
    return ckpt, run


# -- item 8: checksums -------------------------------------------------------------------

def test_corrupted_weights_are_refused_by_default_and_verify_false_opts_out(tmp_path):
    path = tmp_path / "run.nsc"
    ckpt, run = build(path)
    with torch.no_grad():
        run["net"].weight.fill_(1234.5)
    ckpt.save(1)
    raw = bytearray(path.read_bytes())
    at = raw.find(np.full(6, 1234.5, np.float32).tobytes())
    assert at > 0
    raw[at + 1] ^= 0xFF                         # one weight damaged on disk
    path.write_bytes(bytes(raw))
    ckpt, run = _fresh(path)
    before = fingerprint(run)
    with pytest.raises(RunCheckpointError, match="cannot be restored.*checksum|CRC"):
        ckpt.restore()
    assert fingerprint(run) == before
    unchecked, run = _fresh(path, verify=False)
    assert unchecked.restore()                  # the documented opt-out: no CRC pass
    assert (run["net"].weight != 1234.5).sum() == 1


# -- item 9: malformed files -------------------------------------------------------------

def _set(tree, keys, value):
    for key in keys[:-1]:
        tree = tree[key]
    if value is _DELETE:
        del tree[keys[-1]]
    else:
        tree[keys[-1]] = value


_DELETE = object()
_OPT_STATE = ("components", "opt", "state", "state", "namedschema.keyed", 0, 1)
_ENV = ("components", "env", "state", "captured", "layers")

MALFORMED = {
    "step a str": (("step",), "x"),
    "step negative": (("step",), -1),
    "components a list": (("components",), [1, 2]),
    "a component without state": (("components", "rb", "state"), _DELETE),
    "a module's weight of another dtype": (("components", "net", "state", "weight"),
                                           torch.zeros(2, 3, dtype=torch.float64)),
    "a module's weight of another shape": (("components", "net", "state", "weight"),
                                           torch.zeros(3, 3)),
    "a module with an extra key": (("components", "net", "state", "extra"), torch.zeros(1)),
    "an optimizer without groups": (("components", "opt", "state", "param_groups"), []),
    "an optimizer group without params": (("components", "opt", "state", "param_groups", 0,
                                           "params"), _DELETE),
    "an optimizer lr that is a str": (("components", "opt", "state", "param_groups", 0,
                                       "lr"), "fast"),
    "an optimizer state of another size": (_OPT_STATE + ("exp_avg",), torch.zeros(5)),
    "an optimizer state of an unknown parameter": (_OPT_STATE[:-2] + (0, 0), 7),
    "a keyed dict that is not pairs": (_OPT_STATE[:-2], [1, 2, 3]),
    "a scheduler without last_epoch": (("components", "sched", "state", "last_epoch"),
                                       _DELETE),
    "a scheduler's gamma a list": (("components", "sched", "state", "gamma"), [1]),
    "a replay cursor beyond capacity": (("components", "rb", "state", "cursor"), 10 ** 6),
    "a replay tree with NaN": (("components", "rb", "state", "sum_tree"), np.full(16, np.nan)),
    "a replay rng of 5 words": (("components", "rb", "state", "rng"),
                                np.zeros(5, np.uint64)),
    "an env layer of another class": (_ENV + (0, "class"), "Other"),
    "an env array of another shape": (_ENV + (3, "attributes", "state", 1), np.zeros(5)),
    "an env value that is an array": (_ENV + (0, "attributes", "_elapsed_steps"),
                                      ["value", np.zeros(3)]),
    "an env generator named test": (_ENV + (3, "attributes", "_np_random", 1,
                                            "bit_generator"), "test"),
    "an env without layers": (("components", "env", "state", "captured", "layers"), 5),
    "a generator of another bit generator": (("components", "rng", "state",
                                              "bit_generator"), "MT19937"),
    "a torch generator of 3 bytes": (("components", "gen", "state"),
                                     torch.zeros(3, dtype=torch.uint8)),
    "counters that are a number": (("components", "counters", "state"), 5),
    "an array of another shape": (("components", "arr", "state"), np.zeros(4)),
    "an unknown kind": (("components", "counters", "kind"), "nope"),
    "python's generator of 3 words": (("rng", "python"), (3, (1, 2, 3), None)),
    "python's generator of wide words": (("rng", "python", 1),
                                         tuple([2 ** 40] * 624 + [624])),
    "numpy's generator position out of range": (("rng", "numpy", "pos"), 10 ** 6),
    "torch's generator of 3 bytes": (("rng", "torch"), torch.zeros(3, dtype=torch.uint8)),
    "the loop a list": (("loop",), [1, 2]),
    "settings that are not data": (("components", "opt", "settings"), "junk"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_file_raises_one_typed_error_with_the_run_unchanged(saved, tmp_path,
                                                                        case):
    tree = namedschema.load(saved)
    keys, value = MALFORMED[case]
    if keys[:2] == ("rng", "python") and len(keys) == 3:
        tree["rng"]["python"] = (3, value, None)
    else:
        _set(tree, list(keys), value)
    forged = tmp_path / "forged.nsc"
    namedschema.save(tree, forged, metadata=META)
    ckpt, run = _fresh(forged)
    before = fingerprint(run)
    with pytest.raises(RunCheckpointError) as info:
        ckpt.restore()
    assert type(info.value) is RunCheckpointError
    assert fingerprint(run) == before, "the run changed before the error"
    assert ckpt.step is None and ckpt.loop == {}


# -- item 10: settings chosen in code ----------------------------------------------------

def test_changed_hyperparameters_are_refused_naming_each_unless_accepted(saved):
    ckpt, run = _fresh(saved, lr=0.5, max_episode_steps=20, alpha=0.9)
    before = fingerprint(run)
    with pytest.raises(RunCheckpointError) as info:
        ckpt.restore()
    message = str(info.value)
    for said in ("opt.lr: 0.001 in the checkpoint, 0.5 in this run",
                 "env.TimeLimit._max_episode_steps: 500 in the checkpoint, 20 in this run",
                 "rb.alpha: 0.6 in the checkpoint, 0.9 in this run", "accept_changes="):
        assert said in message
    assert fingerprint(run) == before
    partly, run = _fresh(saved, lr=0.5, max_episode_steps=20, alpha=0.9,
                         accept_changes=["opt.lr", "env"])
    with pytest.raises(RunCheckpointError, match="rb.alpha") as info:
        partly.restore()
    assert "opt.lr" not in str(info.value)
    accepted, run = _fresh(saved, lr=0.5, max_episode_steps=20, alpha=0.9,
                           accept_changes=True)
    with pytest.warns(RunCheckpointWarning, match=r"opt\.lr: 0\.001 in the checkpoint, 0\.5"):
        assert accepted.restore()
    assert run["opt"].param_groups[0]["lr"] == 0.5
    assert run["opt"].param_groups[0]["initial_lr"] == 0.5
    assert run["env"]._max_episode_steps == 20 and run["rb"].alpha == 0.9
    assert run["sched"].base_lrs == [0.5]
    assert run["counters"] == {"n": 3}          # the rest is the checkpoint's


def test_the_same_settings_resume_without_a_word(saved, recwarn):
    ckpt, run = _fresh(saved)
    assert ckpt.restore() and ckpt.step == 4000
    assert not [w for w in recwarn if issubclass(w.category, RunCheckpointWarning)]


def test_accept_changes_must_be_true_or_names(tmp_path):
    with pytest.raises(ValueError, match="accept_changes must be True or names"):
        namedschema.RunCheckpoint(tmp_path / "r.nsc", accept_changes=3)


# -- item 11: another optimizer class -----------------------------------------------------

def test_an_optimizer_of_another_class_is_refused(saved):
    ckpt, run = _fresh(saved, optimizer=torch.optim.SGD)
    before = fingerprint(run)
    with pytest.raises(RunCheckpointError,
                       match=r"'opt' was saved from a torch\.optim\.adam\.Adam, this run's "
                             r"is a torch\.optim\.sgd\.SGD"):
        ckpt.restore()
    assert fingerprint(run) == before
    with pytest.raises(RunCheckpointError, match="class it was saved from"):
        _fresh(saved, optimizer=torch.optim.SGD, accept_changes=True)[0].restore()


def test_a_file_saved_before_settings_were_stored_restores_as_before(saved, tmp_path):
    tree = namedschema.load(saved)
    for component in tree["components"].values():
        component.pop("settings", None)
    old = tmp_path / "old.nsc"
    namedschema.save(tree, old, metadata=META)
    ckpt, run = _fresh(old, lr=0.5)             # no settings in the file: nothing to compare
    assert ckpt.restore() and run["opt"].param_groups[0]["lr"] != 0.5


# -- item 12: a file never names code to run ---------------------------------------------

def test_an_env_state_naming_a_numpy_random_function_runs_nothing(saved, tmp_path,
                                                                  monkeypatch):
    called = []
    monkeypatch.setattr(np.random, "test", lambda *a, **k: called.append(a), raising=False)
    tree = namedschema.load(saved)
    _set(tree, list(_ENV + (3, "attributes", "_np_random", 1, "bit_generator")), "test")
    forged = tmp_path / "forged.nsc"
    namedschema.save(tree, forged, metadata=META)
    ckpt, run = _fresh(forged)
    with pytest.raises(RunCheckpointError, match="bit generator 'test'"):
        ckpt.restore()
    assert called == []
    from namedschema.state.env import EnvStateError, restore_env
    state = tree["components"]["env"]["state"]["captured"]
    with pytest.raises(EnvStateError, match="only .*PCG64"):
        restore_env(run["env"], state, "env")
    assert called == []


# -- 35.1: a resume says so ----------------------------------------------------------------

def test_a_resume_says_so_once_on_stderr_and_in_the_log(saved, capsys, caplog):
    ckpt, _ = _fresh(saved)
    with caplog.at_level(logging.INFO, logger="namedschema"):
        assert ckpt.restore()
    line = f"namedschema: resumed from {saved} at step 4,000 (delete it to start fresh)"
    assert capsys.readouterr().err.count(line) == 1
    assert [r.getMessage() for r in caplog.records if r.name == "namedschema"] == [line]
    quiet, _ = _fresh(saved, quiet=True)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="namedschema"):
        assert quiet.restore()
    assert capsys.readouterr().err == ""
    assert [r.getMessage() for r in caplog.records] == [line]


def test_a_fresh_start_says_nothing(tmp_path, capsys):
    ckpt, _ = build(tmp_path / "new.nsc")
    assert not ckpt.restore()
    assert capsys.readouterr().err == ""


# -- 35.2: the target is checked when the checkpoint is made ---------------------------------

def test_a_checkpoint_in_a_missing_folder_is_refused_when_made(tmp_path):
    missing = tmp_path / "no" / "such"
    with pytest.raises(RunCheckpointError, match=f"the folder '{missing}' .* does not exist"):
        namedschema.RunCheckpoint(missing / "run.nsc")
    with pytest.raises(RunCheckpointError, match="is a directory"):
        namedschema.RunCheckpoint(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_checkpoint_in_a_read_only_folder_is_refused_when_made(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(RunCheckpointError, match="is not writable"):
            namedschema.RunCheckpoint(folder / "run.nsc")
    finally:
        folder.chmod(0o700)


@pytest.mark.parametrize("background", [True, False])
def test_a_first_save_that_fails_is_not_reported_done(tmp_path, background):
    folder = tmp_path / "gone"
    folder.mkdir()
    ckpt = namedschema.RunCheckpoint(folder / "run.nsc", every_steps=10, global_rngs=False,
                                     background=background).track(counters={"n": 1})
    folder.rmdir()                     # removed after the checkpoint was made
    with pytest.raises(RunCheckpointError, match="first checkpoint could not be written"):
        ckpt.maybe_save(0)
    assert ckpt.step is None and ckpt.next_step == 0


@pytest.mark.parametrize("background", [True, False])
def test_a_first_save_that_cannot_fit_is_refused_before_writing(tmp_path, monkeypatch,
                                                                background):
    """35.2: the first save checks the free space (as resumable does at startup): the
    error names the path, the bytes needed and the bytes free, and nothing is written."""
    from namedschema.training import run_checkpoint
    path = tmp_path / "run.nsc"
    # compression=None: the raw bytes are what is counted (with the default "auto" these
    # frames would be compressed and count nothing; tests/checkpoint/test_compressed_space.py)
    ckpt = namedschema.RunCheckpoint(path, every_steps=10, global_rngs=False,
                                     background=background, compression=None).track(
        buffer={"obs": np.zeros((1000, 100), np.uint8)})
    monkeypatch.setattr(run_checkpoint, "free_bytes", lambda p: 50_000)
    with pytest.raises(RunCheckpointError) as info:
        ckpt.maybe_save(0)
    text = str(info.value)
    assert repr(str(path)) in text and "100,000 bytes" in text and "50,000 bytes" in text
    assert "free" in text
    assert ckpt.step is None and not path.exists() and os.listdir(tmp_path) == []
    monkeypatch.setattr(run_checkpoint, "free_bytes", lambda p: 10**12)
    assert ckpt.maybe_save(0) and ckpt.step == 0
    monkeypatch.setattr(run_checkpoint, "free_bytes", lambda p: 0)
    ckpt.save(10)                      # later saves replace the file; only the first is asked
    ckpt.wait()
    assert ckpt.step == 10
