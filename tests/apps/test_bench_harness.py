"""The benchmark harness: rows, ratios, targets, tables, JSON, plots and the runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import suite as bench
from benchmarks.suite import core, pickling
from tests.helpers import REPO_ROOT, examples

RESULT_KEYS = {"case", "contender", "metric", "value", "unit", "reference", "ratio", "target"}


def _check_document(doc, topic, quick):
    assert doc["topic"] == topic
    assert doc["quick"] is quick
    for key in ("python", "numpy", "platform"):
        assert isinstance(doc["environment"][key], str)
    assert doc["results"], "no result rows"
    for row in doc["results"]:
        assert RESULT_KEYS <= set(row)
        assert isinstance(row["value"], float)
        if row["reference"] is None:
            assert row["ratio"] is None
        else:
            assert row["ratio"] is not None and row["ratio"] > 0


def test_result_ratio_is_value_over_reference():
    """A row's ratio is its value divided by the reference value."""
    row = bench.result("c", "mine", "time", 30.0, "ns", reference="ref", reference_value=20.0)
    assert row["ratio"] == pytest.approx(1.5)
    assert set(row) == RESULT_KEYS


def test_compare_puts_reference_first_without_ratio():
    """compare() emits the reference row first (no ratio) and scales every value."""
    rows = bench.compare("c", "time", "ns", {"a": 2e-9, "ref": 1e-9}, "ref",
                         {"a": "<= 1.5"}, scale=1e9)
    assert [r["contender"] for r in rows] == ["ref", "a"]
    assert rows[0]["ratio"] is None and rows[0]["value"] == pytest.approx(1.0)
    assert rows[1]["ratio"] == pytest.approx(2.0) and rows[1]["target"] == "<= 1.5"


@pytest.mark.parametrize("ratio,target,expected", [
    (1.0, "<= 1.0", True), (1.01, "<= 1.0", False), (2.0, ">= 1.4", True),
    (1.0, ">= 1.4", False), (None, "<= 1", None), (1.0, None, None)])
def test_target_met(ratio, target, expected):
    """target_met() understands '<= N' and '>= N' and returns None without a target."""
    assert bench.target_met(ratio, target) is expected


@pytest.mark.parametrize("target", ["< 1", "1.2", "<= fast"])
def test_target_met_rejects_malformed_targets(target):
    """A malformed target string raises ValueError naming the target."""
    with pytest.raises(ValueError, match="benchmark target"):
        bench.target_met(1.0, target)


def test_format_table_marks_missed_targets():
    """The table shows 'NO' for a missed target and 'yes' for a met one."""
    rows = bench.compare("c", "time", "ns", {"ref": 1.0, "good": 0.5, "bad": 3.0}, "ref",
                         {"good": "<= 1", "bad": "<= 1"})
    lines = bench.format_table(rows, title="t").splitlines()
    assert lines[0] == "t"
    assert any("good" in ln and ln.endswith("yes") for ln in lines)
    assert any("bad" in ln and ln.endswith("NO") for ln in lines)


def test_best_times_reports_each_contender():
    """best_times() gives a positive per-call time for every contender, slower for more work."""
    # 30x the work: far apart enough that a loaded machine cannot swap them.
    times = bench.best_times({"small": "sum(r)", "large": "sum(r * 30)"},
                             repeat=2, min_time=0.001, globals_={"r": list(range(300))})
    assert set(times) == {"small", "large"}
    assert 0 < times["small"] < times["large"]


rows_strategy = st.lists(st.builds(
    bench.result, st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8),
    st.sampled_from(["time", "size"]), st.floats(0.001, 1e9), st.sampled_from(["ns", "B"]),
    reference=st.none() | st.just("ref"), reference_value=st.floats(0.001, 1e9),
    target=st.none() | st.sampled_from(["<= 1.1", ">= 2"])), min_size=1, max_size=5)


@pytest.mark.subprocess
@settings(max_examples=examples(25))
@given(rows=rows_strategy, quick=st.booleans())
def test_write_json_round_trip(tmp_path_factory, rows, quick):
    """Rows written by write_json() read back equal, in the shared shape, with no temp file left."""
    directory = tmp_path_factory.mktemp("json")
    path = directory / "out.json"
    bench.write_json(str(path), "topic", quick, rows)
    doc = json.loads(path.read_text())
    assert doc["results"] == rows
    _check_document(doc, "topic", quick)
    assert os.listdir(directory) == ["out.json"]


def test_topic_parser_rejects_unknown_cases(capsys):
    """--cases with an unknown name is a usage error that lists the valid cases."""
    parser = bench.topic_parser("core", "d", core.CASES)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--cases", "make,nope"])
    assert info.value.code == 2
    assert "nope" in capsys.readouterr().err


@pytest.mark.slow
def test_core_quick_subset_writes_json(tmp_path, monkeypatch, capsys):
    """core.main --quick --cases writes valid JSON with only those cases; the floor is the reference without rlpyt."""
    monkeypatch.delenv("RLPYT_SRC", raising=False)
    out = tmp_path / "core.json"
    assert core.main(["--quick", "--cases", "make,getitem_int", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    _check_document(doc, "core", True)
    assert {r["case"] for r in doc["results"]} == {"make", "getitem_int"}
    getitem_refs = {r["reference"] for r in doc["results"] if r["case"] == "getitem_int"}
    assert getitem_refs == {None, "plain loop (floor)"}
    assert "RLPYT_SRC is not set" in capsys.readouterr().out


@pytest.mark.slow
def test_pickling_quick_writes_json(tmp_path, monkeypatch):
    """pickling.main --quick compares namedschema with namedtuple on size, dumps and loads."""
    monkeypatch.delenv("RLPYT_SRC", raising=False)
    out = tmp_path / "p.json"
    assert pickling.main(["--quick", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    _check_document(doc, "pickling", True)
    metrics = {(r["metric"], r["contender"]) for r in doc["results"]}
    assert {("size", "namedschema"), ("dumps", "namedschema"), ("loads", "namedschema")} <= metrics


@pytest.mark.slow
@pytest.mark.rlpyt
def test_core_includes_rlpyt_rows_when_rlpyt_src_is_set(tmp_path):
    """With RLPYT_SRC, array cases are measured against rlpyt's namedarraytuple and schema."""
    out = tmp_path / "core.json"
    assert core.main(["--quick", "--cases", "setitem_scalar,attr_access_8",
                      "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    contenders = {r["contender"] for r in rows}
    assert {"rlpyt NAT", "rlpyt schema", "plain loop (floor)"} <= contenders
    assert {r["reference"] for r in rows if r["case"] == "setitem_scalar"} == {None, "rlpyt NAT"}


def test_load_rlpyt_collections_reports_a_bad_tree(tmp_path, monkeypatch):
    """An RLPYT_SRC without rlpyt/utils/collections.py is a clear FileNotFoundError."""
    monkeypatch.setenv("RLPYT_SRC", str(tmp_path))
    monkeypatch.delitem(sys.modules, "rlpyt_collections", raising=False)
    with pytest.raises(FileNotFoundError, match="rlpyt/utils/collections.py"):
        bench.load_rlpyt_collections()


@pytest.mark.subprocess
def test_run_topics_fails_for_a_topic_without_a_module(capsys):
    """Every topic ships with the package, so one without a module is a failure, not a skip."""
    docs, notes, ok = bench.run_topics(["no_such_topic"], quick=True)
    assert docs == [] and ok is False
    assert "no_such_topic" in notes[0] and "failed" in notes[0]


@pytest.mark.slow
def test_plot_results_writes_a_png(tmp_path):
    """plot_results() draws a PNG from topic documents (matplotlib is the plot extra)."""
    pytest.importorskip("matplotlib")
    rows = bench.compare("c", "time", "ns", {"ref": 1.0, "a": 0.5, "b": 3.0}, "ref",
                         {"a": "<= 0.714"})
    path = tmp_path / "plot.png"
    bench.plot_results([{"topic": "core", "results": rows}], str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.subprocess
def test_bench_command_end_to_end(tmp_path):
    """`namedschema bench --quick` runs topics in subprocesses and writes combined JSON and a plot."""
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "all.json", tmp_path / "all.png"
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    env.pop("RLPYT_SRC", None)
    proc = subprocess.run(
        [sys.executable, "-m", "namedschema", "bench", "--quick", "--topics", "pickling",
         "--json", str(out), "--plot", str(png)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "targets met:" in proc.stdout and "pickle_list_10k" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["topic"] == "all" and doc["topics"][0]["topic"] == "pickling"
    assert all(r["topic"] == "pickling" for r in doc["results"])
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.subprocess
@pytest.mark.parametrize("script,case", [("bench_core.py", "make"),
                                         ("bench_pickling.py", "pickle_one")])
def test_wrapper_scripts_run_their_topic(tmp_path, script, case):
    """benchmarks/bench_<topic>.py runs its topic's main and writes the same JSON shape."""
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    proc = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "benchmarks", script),
                           "--quick", "--cases", case, "--json", str(out)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert {r["case"] for r in doc["results"]} == {case}
    assert script.removeprefix("bench_").removesuffix(".py") == doc["topic"]


@pytest.mark.subprocess
def test_harness_child_reports_its_own_peak_rss_not_its_parents():
    """peak_rss() in a child started from a large process is the child's own peak
    (VmHWM); getrusage's ru_maxrss there would still report the parent's."""
    import numpy as np

    from namedschema.apps.harness import peak_rss, run_python
    big = np.ones(256 * 2**20, np.uint8)  # 256 MiB resident in this process
    assert peak_rss() >= big.nbytes
    proc = run_python(["-c", "import resource\n"
                             "from namedschema.apps.harness import peak_rss\n"
                             "print(peak_rss(), resource.getrusage(resource.RUSAGE_SELF)"
                             ".ru_maxrss * 1024)"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    own, inherited = map(int, proc.stdout.split())
    assert own < 128 * 2**20 < big.nbytes <= inherited
    del big


@pytest.mark.subprocess
def test_harness_child_env_imports_this_namedschema(tmp_path):
    """A child started elsewhere imports the namedschema that started it."""
    import namedschema
    from namedschema.apps.harness import child_env, run_python
    assert child_env()["PYTHONPATH"].split(os.pathsep)[0] == os.path.dirname(
        os.path.dirname(namedschema.__file__))
    proc = run_python(["-c", "import namedschema; print(namedschema.__file__)"])
    assert proc.stdout.strip() == namedschema.__file__


def test_suite_children_import_this_namedschema_and_these_benchmarks(monkeypatch):
    """A topic's child imports the namedschema that started it (first on PYTHONPATH) and
    the ``benchmarks`` package of the checkout its topics belong to."""
    import namedschema
    from benchmarks.suite import common
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    parts = common.child_env()["PYTHONPATH"].split(os.pathsep)
    assert parts[0] == os.path.dirname(os.path.dirname(namedschema.__file__))
    assert REPO_ROOT in parts and parts[-1] == "/elsewhere"


def test_harness_atari_data_is_one_definition_for_demo_and_benchmarks():
    """demo, the checkpoint and the buffer benchmarks build the same Atari-like rows."""
    import numpy as np

    from benchmarks.suite import buffer as bench_buffer
    from benchmarks.suite import checkpoint as bench_checkpoint
    from namedschema import NamedArrayTupleSchema
    from namedschema.apps import demo, harness
    T = NamedArrayTupleSchema("T", harness.ATARI_FIELDS)
    one = harness.atari_example(T)
    rows = harness.atari_transitions(T, 5)
    seeded = harness.atari_transitions(T, 5, seed=3)
    for batch in (rows, seeded):
        assert [a.dtype.name for a in batch] == list(harness.ATARI_DTYPES.values())
        assert [a.shape[1:] for a in batch] == [np.shape(v) for v in one]
        assert sum(a[0].nbytes for a in batch) == harness.ATARI_BYTES_PER_TRANSITION
    assert all(np.array_equal(a, b) for a, b in zip(seeded, harness.atari_transitions(
        T, 5, seed=3), strict=True))
    assert demo.BYTES_PER_TRANSITION == bench_buffer.ROW_BYTES == bench_checkpoint.ROW_BYTES \
        == harness.ATARI_BYTES_PER_TRANSITION
    assert demo.synthetic(T, 5, 3).observation.tobytes() == seeded.observation.tobytes()
    assert bench_checkpoint._buffer(5).observation.tobytes() == rows.observation.tobytes()
