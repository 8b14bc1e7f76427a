"""``resumable``'s CheckpointWriter: a debug line per checkpoint, a warning on repeated full saves.

Issue 33: every checkpoint's kind and bytes must be visible, and when incremental
checkpoints keep falling back to full saves a ``ResumeWarning`` must say why (which
array changed shape). Driven directly, with saves forced to be full: the state's big
array changes length at every checkpoint, so no save can update the file in place.
"""

from __future__ import annotations

import logging
import re
import warnings

import numpy as np
import pytest

from namedschema.errors import ResumeWarning
from namedschema.rlpyt.resume.checkpoint_writer import FULL_STREAK, CheckpointWriter

BIG = 1 << 18     # float64 elements: 2 MiB


def run(path, states, background):
    """Save each state as a checkpoint; the writer, its ResumeWarnings and its debug lines."""
    writer = CheckpointWriter(str(path), {"run": "test"}, background=background)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for itr, state in enumerate(states):
            writer.save({"itr": itr, "state": state})
        writer.wait()
    notes = [str(w.message) for w in caught if issubclass(w.category, ResumeWarning)]
    return writer, notes


def debug_lines(caplog, path):
    return [r.getMessage() for r in caplog.records
            if r.name == "namedschema.rlpyt" and r.levelno == logging.DEBUG
            and str(path) in r.getMessage()]


@pytest.mark.parametrize("background", [False, True])
def test_repeated_full_saves_warn_naming_the_array_that_changed_shape(tmp_path, caplog,
                                                                       background):
    path = tmp_path / "run.nsc"
    states = [{"big": np.arange(BIG + k, dtype=np.float64), "small": np.ones(10)}
              for k in range(FULL_STREAK + 2)]
    caplog.set_level(logging.DEBUG, logger="namedschema.rlpyt")
    writer, notes = run(path, states, background)

    kinds = [s.kind for s in writer.history]
    assert kinds == ["full"] * len(states)
    assert writer.history[0].reason == "the first checkpoint of the file"
    for stat in writer.history[1:]:
        assert "'state.big' changed from F64[" in stat.reason, stat.reason

    # No warning until FULL_STREAK full saves in a row after the first checkpoint.
    assert notes, "repeated full saves gave no ResumeWarning"
    first = notes[0]
    assert f"the last {FULL_STREAK} checkpoints" in first
    assert "were full saves, not incremental ones" in first
    assert str(path) in first
    assert "array 'state.big' changed from F64[" in first       # says why: which array
    assert f"{writer.history[FULL_STREAK].bytes_written:,} bytes" in first

    # One debug line per checkpoint: its number, kind, bytes, share of the file, why full.
    lines = debug_lines(caplog, path)
    assert len(lines) == len(states), lines
    for n, (line, stat) in enumerate(zip(lines, writer.history, strict=True), 1):
        assert line.startswith(f"checkpoint {n} to {path}: full, "), line
        assert f"{stat.bytes_written} of {stat.file_bytes} bytes written" in line
        assert re.search(r"\(\d+\.\d% of the file\)", line), line
        assert line.endswith(f"; full because {stat.reason}"), line


@pytest.mark.parametrize("background", [False, True])
def test_incremental_checkpoints_neither_warn_nor_say_full(tmp_path, caplog, background):
    """The same run with shapes kept: after the first, every checkpoint is incremental,
    its debug line says so with its (small) bytes, and nothing is warned."""
    path = tmp_path / "run.nsc"
    big = np.arange(BIG, dtype=np.float64)
    caplog.set_level(logging.DEBUG, logger="namedschema.rlpyt")
    writer = CheckpointWriter(str(path), {"run": "test"}, background=background)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for itr in range(FULL_STREAK + 2):
            big[itr * 100:(itr + 1) * 100] = -itr
            writer.save({"itr": itr, "state": {"big": big, "small": np.ones(10)}})
        writer.wait()
    assert not [w for w in caught if issubclass(w.category, ResumeWarning)]
    assert [s.kind for s in writer.history] == ["full"] + ["incremental"] * (FULL_STREAK + 1)
    lines = debug_lines(caplog, path)
    assert len(lines) == FULL_STREAK + 2
    for line, stat in zip(lines[1:], writer.history[1:], strict=True):
        assert ": incremental, " in line and "full because" not in line, line
        assert stat.fraction < 0.05


def test_full_saves_because_most_changed_do_not_warn(tmp_path):
    """A full save because most of the state changed is the cheaper save, not a miss."""
    path = tmp_path / "run.nsc"
    big = np.arange(BIG, dtype=np.float64)
    writer = CheckpointWriter(str(path), {"run": "test"}, background=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for itr in range(FULL_STREAK + 2):
            big += 1.0                           # every byte changes, shapes kept
            writer.save({"itr": itr, "state": {"big": big}})
    assert [s.kind for s in writer.history] == ["full"] * (FULL_STREAK + 2)
    assert not [w for w in caught if issubclass(w.category, ResumeWarning)]
