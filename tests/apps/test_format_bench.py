"""Tests for the checkpoint benchmark's handling of optional contenders."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks.suite import checkpoint


@pytest.mark.subprocess
def test_quick_benchmark_runs_without_joblib(tmp_path, monkeypatch, capsys):
    """With joblib unimportable the benchmark skips its rows with a note and still reports."""
    monkeypatch.setitem(sys.modules, "joblib", None)  # import joblib now fails
    out = tmp_path / "ckpt.json"
    assert checkpoint.main(["--quick", "--size-mib", "1", "--rounds", "1",
                            "--json", str(out), "--dir", str(tmp_path)]) == 0
    doc = json.loads(out.read_text())
    contenders = {(r["case"], r["contender"]) for r in doc["results"]}
    assert not any(c == "joblib" for _, c in contenders)
    assert {("save", "namedschema"), ("save", "raw"), ("load", "namedschema"),
            ("load", "np.load")} <= contenders
    assert "joblib rows skipped: joblib is not installed" in doc["notes"]
    assert "joblib rows skipped" in capsys.readouterr().out
    ratio = next(r["ratio"] for r in doc["results"]
                 if (r["case"], r["contender"], r["metric"]) == ("save", "namedschema", "time"))
    assert ratio > 0


def test_installed_skips_only_contenders_whose_package_is_missing(monkeypatch):
    """A contender is skipped, with one note, only when its optional package is missing."""
    monkeypatch.setattr(checkpoint, "OPTIONAL", {"np.save": "namedschema_no_such_module",
                                                 "pickle4": "json"})
    notes = []
    kept = checkpoint._installed(("raw", "np.save", "pickle4"), notes)
    checkpoint._installed(("np.save",), notes)
    assert kept == ("raw", "pickle4")
    assert notes == ["np.save rows skipped: namedschema_no_such_module is not installed"]
