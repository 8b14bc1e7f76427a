"""``namedschema bench --topics compression``: its rows, targets and notes, in one run."""

from __future__ import annotations

import json

import pytest

from benchmarks.suite import TOPICS, compression


def _rows(doc):
    return {(r["case"], r["contender"]): r for r in doc["results"]}


def test_quick_compression_topic_reports_ratios_against_raw_io(tmp_path):
    pytest.importorskip("zstandard")
    out = tmp_path / "c.json"
    assert compression.main(["--quick", "--size-mib", "2", "--rounds", "1", "--cases",
                             "frames,random", "--json", str(out), "--dir", str(tmp_path)]) == 0
    doc = json.loads(out.read_text())
    rows = _rows(doc)
    assert "compression" in TOPICS
    expected = {("frames_size", "zstd_file"): ("data", "<= 0.05"),
                ("frames_save", "zstd_save"): ("raw_write_fsync", "<= 1.0"),
                ("frames_load", "zstd_load"): ("np_load", "<= 2.0"),
                ("random_size", "zstd"): ("uncompressed", "<= 1.01"),
                ("random_save", "zstd"): ("uncompressed", "<= 1.25")}
    for key, (reference, target) in expected.items():
        assert rows[key]["reference"] == reference and rows[key]["target"] == target, key
        assert rows[key]["ratio"] > 0
    assert rows[("frames_size", "zstd_file")]["ratio"] < 0.05     # frames compress
    assert 0.99 < rows[("random_size", "zstd")]["ratio"] <= 1.01   # noise does not
    assert any("compression threads; load average" in n for n in doc["notes"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]   # files removed


@pytest.mark.slow
def test_policy_case_compares_auto_and_zstd_with_none(tmp_path):
    pytest.importorskip("zstandard")
    pytest.importorskip("torch")
    out = tmp_path / "p.json"
    assert compression.main(["--quick", "--size-mib", "2", "--rounds", "1", "--cases",
                             "policy", "--json", str(out), "--dir", str(tmp_path)]) == 0
    rows = _rows(json.loads(out.read_text()))
    for state in ("mlp_adam", "dqn"):
        for case in ("save", "size", "load"):
            assert rows[(f"{state}_{case}", "auto")]["reference"] == "none"
            assert rows[(f"{state}_{case}", "zstd")]["ratio"] > 0
    assert rows[("mlp_adam_size", "auto")]["ratio"] == 1.0         # floats stay raw
    assert rows[("dqn_size", "auto")]["ratio"] < 0.95   # 2 MiB of frames of 22 compressed
    assert rows[("dqn_resave_1pct", "auto")]["reference"] == "none"


def test_without_zstandard_the_topic_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(compression.importlib.util, "find_spec",
                        lambda name: None if name == "zstandard" else object())
    out = tmp_path / "n.json"
    assert compression.main(["--quick", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["results"] == []
    assert "pip install 'namedschema[zstd]'" in doc["notes"][0]
