"""A user's first hour, round 2 (issue 35): the command line and save's messages.

8. ``verify`` and ``inspect`` treat a missing file and a directory alike (status 2, one
   line); no message mentions a "safetensors header"; ``save`` into a missing folder
   names the folder, before anything is written, and no message ends in "-> None".
9. ``inspect`` of a run checkpoint folds its generator states and long tuples into one
   line each; ``--full`` prints them.
2. A background save that fails before any checkpoint exists does not claim "the file
   holds the last complete checkpoint".
"""

from __future__ import annotations

import errno
import os
import random

import numpy as np
import pytest

import namedschema
from namedschema.apps import cli
from namedschema.checkpoint import _write as writer
from namedschema.checkpoint._graph import fold

torch = pytest.importorskip("torch")


# ------------------------------------------------------------------- 8: verify and inspect
@pytest.mark.parametrize("command", ["verify", "inspect"])
@pytest.mark.parametrize("make", ["missing", "directory"])
def test_a_path_that_names_no_file_is_a_usage_error_for_both(tmp_path, capsys, command, make):
    path = tmp_path / "f.nsb"
    if make == "directory":
        path.mkdir()
    assert cli.main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"namedschema {command}: error: {path}: ") and err.count("\n") == 1
    assert ("No such file or directory" if make == "missing" else "is a directory") in err


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_short_text_file_is_named_without_format_internals(tmp_path, capsys, command):
    path = tmp_path / "notes.nsb"
    path.write_text("hello\n")
    assert cli.main([command, str(path)]) == (1 if command == "verify" else 2)
    err = capsys.readouterr().err
    assert "is not a namedschema file" in err and "text file" in err
    assert "safetensors" not in err


@pytest.mark.parametrize("mode", [{}, {"incremental": True}, {"background": True}])
def test_save_into_a_missing_folder_names_the_folder_first(tmp_path, monkeypatch, mode):
    encoded = []
    monkeypatch.setattr(writer, "write_blocks", lambda *a: encoded.append(a))
    target = tmp_path / "runs" / "x.nsb"
    with pytest.raises(FileNotFoundError) as info:
        namedschema.save({"x": np.zeros(10)}, target, **mode)
    text = str(info.value)
    assert info.value.errno == errno.ENOENT and info.value.filename == str(target)
    assert f"its folder {str(tmp_path / 'runs')!r} does not exist (create it first)" in text
    assert "-> None" not in text and ".tmp-" not in text
    assert encoded == [] and os.listdir(tmp_path) == []


def test_save_where_a_file_stands_for_the_folder(tmp_path):
    (tmp_path / "runs").write_text("x")
    with pytest.raises(NotADirectoryError) as info:
        namedschema.save({"x": np.zeros(10)}, tmp_path / "runs" / "x.nsb")
    assert "is a regular file, not a folder" in str(info.value)
    assert "-> None" not in str(info.value)


# ---------------------------------------------------------------------- 9: inspect folds
def _run_checkpoint(tmp_path):
    path = tmp_path / "loop.nsc"
    step = namedschema.NamedArrayTupleSchema("Step", "obs action reward")
    replay = namedschema.PrioritizedReplayBuffer(step(np.zeros(4, np.float32), 0, 0.0), 1000,
                                                 seed=1)
    net = torch.nn.Linear(4, 2)
    ckpt = namedschema.RunCheckpoint(path, every_steps=100)
    ckpt.track(replay=replay, q_network=net, optimizer=torch.optim.Adam(net.parameters()),
               rng=np.random.default_rng(0), pyrng=random.Random(1))
    ckpt.save(100)
    ckpt.wait()
    return path


@pytest.mark.slow  # a RunCheckpoint with torch; seconds
def test_inspect_of_a_run_checkpoint_folds_generator_states(tmp_path, capsys):
    path = _run_checkpoint(tmp_path)
    assert cli.main(["inspect", str(path)]) == 0
    folded = capsys.readouterr().out
    assert cli.main(["inspect", "--full", str(path)]) == 0
    full = capsys.readouterr().out
    assert len(full.splitlines()) > 600                      # Python's MT19937: 625 words
    assert len(folded.splitlines()) < 100
    assert "'python': Python random state (MT19937, 625 words)" in folded
    assert "'state': numpy PCG64 generator state" in folded
    assert "'state': Python random state (MT19937)" in folded
    assert "lines of generator states and long tuples folded; namedschema inspect --full " \
           "shows them" in folded
    assert "folded" not in full
    # Every array is still on its own line, folded or not.
    for line in ("sum_tree: float64", "weight': torch.float32 (2, 4)"):
        assert line.split(":")[0] in folded and line.split(":")[0] in full
    assert str(namedschema.inspect(path)).count("\n") < 100   # print(inspect(...)) too


def test_fold_leaves_short_tuples_and_dicts_as_they_are():
    text = ("dict of 2\n  'betas': tuple of 2\n    [0]: 0.9\n    [1]: 0.999\n"
            "  'sizes': list of 9\n" + "".join(f"    [{i}]: {i}\n" for i in range(9)))
    folded, left_out = fold(text)
    assert "'betas': tuple of 2\n    [0]: 0.9" in folded
    assert "'sizes': list of 9: 0, 1, 2, ..." in folded and left_out == 9
    nested = "list of 10\n" + "".join(f"  [{i}]: tuple of 1\n    [0]: 1\n" for i in range(10))
    assert fold(nested) == (nested.rstrip("\n"), 0)      # not plain values: kept


# ---------------------------------------------- 2: a failed first background save says so
def test_a_failed_first_background_save_says_there_is_no_checkpoint(tmp_path, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(writer, "write_blocks", disk_full)   # (the fork child inherits it)
    path = tmp_path / "run.nsb"
    handle = namedschema.save({"x": np.arange(10)}, path, background=True)
    with pytest.raises(OSError) as info:
        handle.wait()
    said = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "no checkpoint was written" in said and "last complete checkpoint" not in said
    monkeypatch.undo()
    namedschema.save({"x": np.arange(10)}, path)
    monkeypatch.setattr(writer, "write_blocks", disk_full)
    handle = namedschema.save({"x": np.arange(20)}, path, background=True)
    with pytest.raises(OSError) as info:
        handle.wait()
    said = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "the file holds the last complete checkpoint" in said
    assert len(namedschema.load(path)["x"]) == 10
