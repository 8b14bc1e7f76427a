"""``namedschema bench`` in a new user's first hour (issue 35, item 5).

* ``--plot`` with a format matplotlib cannot write is refused before anything runs;
* without torch, the cases and topics that need it are skipped with one note each;
* a topic's progress shows as it runs (its own lines, and a line after each silence);
* a ``--quick`` run says its missed targets are indicative, and why.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import time

import pytest

from benchmarks.suite import runner
from tests.helpers import REPO_ROOT


def _run(*args, pythonpath=REPO_ROOT, timeout=300):
    env = dict(os.environ, PYTHONPATH=pythonpath)
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO_ROOT)


# --------------------------------------------------------------------------------- --plot
@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["out.txt", "out", "out.png.bak"])
def test_a_plot_format_matplotlib_cannot_write_is_refused_before_running(tmp_path, name):
    pytest.importorskip("matplotlib")
    path = tmp_path / name
    proc = _run("namedschema", "bench", "--quick", "--topics", "core", "--plot", str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"namedschema bench: error: --plot {path}: ")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert ".png" in proc.stderr and ".svg" in proc.stderr     # what it can write instead
    assert "[bench]" not in proc.stderr and proc.stdout == ""   # no topic ran
    assert os.listdir(tmp_path) == []


def _args(**kwargs):
    values = {"json": None, "plot": None, "quick": True, "topics": ["core"], "verbose": False}
    return argparse.Namespace(**{**values, **kwargs})


def test_plot_extensions_are_matplotlibs_own(tmp_path):
    """Upper case is a format too (savefig lowercases it); every format is tried once."""
    pytest.importorskip("matplotlib")
    assert {"png", "svg", "pdf"} <= set(runner.plot_formats())
    runner.check_outputs(_args(plot=str(tmp_path / "b.PNG")))
    runner.check_outputs(_args(plot=str(tmp_path / "b.svg")))
    assert os.listdir(tmp_path) == []


def test_a_format_whose_writer_fails_here_is_refused_with_its_reason(tmp_path, monkeypatch):
    """A format matplotlib knows but cannot write here (.pgf without LaTeX, say)."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def savefig(self, fname, **kwargs):
        raise RuntimeError("'xelatex' not found; install it")
    monkeypatch.setattr(Figure, "savefig", savefig)
    path = tmp_path / "b.pgf"
    with pytest.raises(ValueError) as info:
        runner.check_outputs(_args(plot=str(path)))
    text = str(info.value)
    assert text.startswith(f"--plot {path}: matplotlib cannot write .pgf files here")
    assert "xelatex" in text and "use .png" in text


# --------------------------------------------------------------------------- without torch
def _without_torch(tmp_path):
    """A PYTHONPATH whose sitecustomize makes ``import torch`` fail, in every child too."""
    shim = tmp_path / "no_torch"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    return f"{shim}{os.pathsep}{REPO_ROOT}"


@pytest.mark.subprocess
def test_without_torch_replay_runs_what_it_can_and_says_what_it_skipped(tmp_path):
    proc = _run("namedschema", "bench", "--quick", "--topics", "replay",
                pythonpath=_without_torch(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    skipped = [line for line in proc.stdout.splitlines() if "skipped" in line]
    assert skipped == [
        "note: replay: skipped sample_32, sample_256, per_sample_update_32, "
        "per_sample_update_256: they hand torch tensors to a loss (every contender's sample "
        "is timed so), and torch is not installed (" + skipped[0].split("not installed (")[1]]
    assert "pip install" in skipped[0]
    assert "extend_8" in proc.stdout and "extend_256" in proc.stdout
    assert "failed" not in proc.stdout and "Traceback" not in proc.stderr


@pytest.mark.subprocess
def test_without_torch_background_skips_its_dqn_loop_with_a_note(tmp_path):
    proc = _run("benchmarks.suite.background", "--quick", "--cases", "dqn_loop",
                pythonpath=_without_torch(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [line for line in proc.stdout.splitlines() if "skipped" in line]
    assert len(notes) == 1 and notes[0].startswith(
        "note: background: skipped dqn_loop: its learner is a torch network, and torch is "
        "not installed (")


# -------------------------------------------------------------------------------- progress
class _TimedLog:
    """A text stream that keeps each line with the time it was written."""

    def __init__(self):
        self.lines: list[tuple[float, str]] = []
        self._part = ""

    def write(self, text):
        self._part += text
        while "\n" in self._part:
            line, self._part = self._part.split("\n", 1)
            self.lines.append((time.monotonic(), line))

    def flush(self):
        pass


_TOPIC = '''
import json, sys, time
from benchmarks.suite.common import progress
out = sys.argv[sys.argv.index("--json") + 1]
progress("slow", "case a (1/2) ...")
print("a warning that is not progress", file=sys.stderr, flush=True)
time.sleep(1.5)                        # silent longer than the heartbeat
progress("slow", "case b (2/2) ...")
time.sleep(0.5)
if "--fail" in sys.argv[0]:
    raise SystemExit("the last words of a failed topic")
with open(out, "w") as f:
    json.dump({"topic": "slow", "quick": True, "results": [], "notes": []}, f)
'''


@pytest.fixture
def fake_topics(tmp_path, monkeypatch):
    package = tmp_path / "fakebench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "slow.py").write_text(textwrap.dedent(_TOPIC))
    (package / "failing.py").write_text(
        textwrap.dedent(_TOPIC).replace('"--fail" in sys.argv[0]', "True"))
    monkeypatch.setattr(runner, "PACKAGE", "fakebench")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))


@pytest.mark.subprocess
def test_a_topics_progress_shows_as_it_runs_and_silences_are_filled(fake_topics):
    log = _TimedLog()
    docs, notes, ok = runner.run_topics(["slow"], quick=True, log=log, heartbeat=0.5)
    assert ok and notes == [] and [d["topic"] for d in docs] == ["slow"]
    text = [line for _, line in log.lines]
    beats = [i for i, line in enumerate(text)
             if line.startswith("[bench] slow: still running (")]
    assert [line for i, line in enumerate(text) if i not in beats][:3] == [
        "[bench] slow: running ...", "[bench] slow: case a (1/2) ...",
        "[bench] slow: case b (2/2) ..."]
    # the 1.5 s without progress between the cases is filled
    assert any(text.index("[bench] slow: case a (1/2) ...") < i
               < text.index("[bench] slow: case b (2/2) ...") for i in beats)
    assert text[-1].startswith("[bench] slow: done (") and len(text) - len(beats) == 4
    assert not any("warning" in line for line in text)          # only progress is shown
    when = {line: t for t, line in log.lines}
    # shown as it came, not when the topic ended
    assert when[text[-1]] - when["[bench] slow: case a (1/2) ..."] > 1.5


@pytest.mark.subprocess
def test_a_failed_topic_reports_its_last_words_not_its_progress(fake_topics):
    log = _TimedLog()
    docs, notes, ok = runner.run_topics(["failing"], quick=True, log=log, heartbeat=5)
    assert not ok and docs == []
    assert notes == ["topic 'failing' failed with exit status 1: "
                     "the last words of a failed topic"]
    assert log.lines[-1][1].startswith("[bench] failing: FAILED (")


@pytest.mark.subprocess
def test_a_topic_that_runs_too_long_is_stopped(fake_topics):
    docs, notes, ok = runner.run_topics(["slow"], quick=True, log=_TimedLog(), timeout=0.5)
    assert not ok and docs == [] and notes == ["topic 'slow' failed: no result after 0 s"]


# ---------------------------------------------------------------------- --quick wording
def _bench_output(monkeypatch, capsys, quick):
    rows = [{"case": "make", "contender": "namedschema", "metric": "time", "value": 1.4,
             "unit": "ns", "reference": "namedtuple", "ratio": 1.4, "target": "<= 1.3"},
            {"case": "copy", "contender": "namedschema", "metric": "time", "value": 0.9,
             "unit": "ns", "reference": "namedtuple", "ratio": 0.9, "target": "<= 1.3"}]
    documents = [{"topic": "core", "quick": quick, "results": rows, "notes": []}]
    monkeypatch.setattr(runner, "run_topics", lambda *a, **k: (documents, [], True))
    assert runner.run_bench(_args(quick=quick)) == 0
    return capsys.readouterr().out


def test_a_quick_run_lists_missed_targets_as_indicative_and_says_why(monkeypatch, capsys):
    out = _bench_output(monkeypatch, capsys, quick=True)
    assert runner.QUICK_NOTE in out.splitlines()
    for word in ("indicative", "tiny sizes", "noise", "busy or shared machine",
                 "changes between runs", "without --quick"):
        assert word in runner.QUICK_NOTE, word
    assert "targets met: 1, missed: 1 (indicative: a quick run)" in out
    assert "  missed (indicative): core make namedschema 1.40x (target <= 1.3)" in out
    assert out.index(runner.QUICK_NOTE) < out.index("targets met")


def test_a_full_run_lists_missed_targets_plainly(monkeypatch, capsys):
    out = _bench_output(monkeypatch, capsys, quick=False)
    assert "indicative" not in out and runner.QUICK_NOTE not in out
    assert "targets met: 1, missed: 1\n  missed: core make namedschema 1.40x (target <= 1.3)" \
        in out


def test_the_progress_marker_is_what_topics_print(capsys):
    from benchmarks.suite.common import PROGRESS_PREFIX, progress
    progress("core", "make (1/3) ...")
    err = capsys.readouterr().err
    assert err == "[bench] core: make (1/3) ...\n" and err.startswith(PROGRESS_PREFIX)
