"""The incremental benchmark topic runs, measures every change, and reports ratios."""

from __future__ import annotations

import json

import pytest

from benchmarks.suite import TOPICS, incremental
from namedschema.checkpoint import _storage as pages

pytestmark = pytest.mark.subprocess


@pytest.mark.skipif(not pages.available(), reason="needs Linux pagemap")
def test_quick_incremental_benchmark_reports_every_change(tmp_path):
    """Two cases at a tiny size: a row per change, each an incremental save, with ratios."""
    pytest.importorskip("matplotlib")  # the plot is part of what is checked
    out = tmp_path / "incr.json"
    assert incremental.main(["--quick", "--size-mib", "4", "--rounds", "1", "--cases",
                             "buffer_from_example,mmap_resume", "--json", str(out),
                             "--dir", str(tmp_path), "--plot", str(tmp_path / "p.png")]) == 0
    doc = json.loads(out.read_text())
    times = [r for r in doc["results"] if r["metric"] == "time" and r["reference"]]
    assert {(r["case"], r["contender"]) for r in times} == {
        (case, f"{p} {f:.1%}") for case in ("buffer_from_example", "mmap_resume")
        for p in ("ring", "random") for f in incremental.FRACTIONS}
    assert all(r["ratio"] > 0 for r in times)
    # up to 1% changed every save is incremental (10% at random rows may not be: scattered
    # ranges cost more than their bytes, and a full save is chosen when it is cheaper)
    assert not any("note" in r for r in times if not r["contender"].endswith("10.0%"))
    written = {(r["case"], r["contender"]): r["value"] for r in doc["results"]
               if r["metric"] == "written"}
    assert all(0 < w < 4 for (_c, name), w in written.items() if not name.endswith("10.0%"))
    assert "incremental" in TOPICS
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
