"""The ``namedschema`` command: parsing, help, version, inspect and user-mistake handling."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import namedschema
from namedschema.apps import cli
from tests.helpers import REPO_ROOT


def _run(*args, cwd=None):
    """Run ``python -m namedschema ARGS`` in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    return subprocess.run([sys.executable, "-m", "namedschema", *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=cwd)


def test_version_flag(capsys):
    """--version prints the package version and exits 0."""
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"namedschema {namedschema.__version__}"


def test_no_command_prints_help_and_fails(capsys):
    """Without a subcommand the help goes to stderr and the status is 2."""
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert "demo" in err and "inspect" in err and "bench" in err


@pytest.mark.parametrize("command", ["demo", "inspect", "bench"])
def test_every_subcommand_help_has_examples(command, capsys):
    """Each subcommand's --help exits 0 and shows usage examples with its own name."""
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "examples:" in out and f"namedschema {command}" in out


@pytest.mark.parametrize("args,text", [
    (["demo", "--size", "12XB"], "invalid size"),
    (["demo", "--size", "0"], "must be positive"),
    (["bench", "--topics", "nope"], "unknown topic"),
    (["frobnicate"], "invalid choice"),
])
def test_usage_errors_exit_2_on_stderr(args, text, capsys):
    """Bad options give status 2 and a message on stderr, nothing on stdout."""
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert text in captured.err and captured.out == ""


@pytest.mark.parametrize("text,expected", [
    ("64MB", 64 * 10**6), ("1GB", 10**9), ("16GB", 16 * 10**9), ("1GiB", 2**30),
    ("2 mib", 2 * 2**20), ("1.5KB", 1500), ("512", 512), ("3K", 3072)])
def test_parse_size_examples(text, expected):
    """parse_size understands decimal and binary units, case-insensitively."""
    assert cli.parse_size(text) == expected


@given(n=st.integers(1, 10**6), unit=st.sampled_from(sorted(cli._UNITS)))
def test_parse_size_round_trips_number_and_unit(n, unit):
    """Formatting n with any accepted unit parses back to n times that unit's size."""
    assert cli.parse_size(f"{n}{unit.upper()}") == n * cli._UNITS[unit]


@pytest.mark.parametrize("text", ["", "MB", "-5MB", "1e3", "64 M B"])
def test_parse_size_rejects_garbage(text):
    """Malformed sizes raise ArgumentTypeError quoting the input."""
    with pytest.raises(argparse.ArgumentTypeError, match="invalid size"):
        cli.parse_size(text)


def test_inspect_prints_tree_of_saved_file(tmp_path, capsys):
    """inspect shows schema names, fields, dtypes and shapes, and the allow_pickle answer."""
    Step = namedschema.NamedArrayTupleSchema("Step", "obs reward")
    path = tmp_path / "buf.nsb"
    namedschema.save(Step(np.zeros((5, 3), np.uint8), np.arange(5.0)), path)
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Step" in out and "obs" in out and "uint8" in out and "(5, 3)" in out
    lines = out.splitlines()
    assert lines[-1] == "loading needs allow_pickle=True: no"
    assert sum("allow_pickle" in line for line in lines) == 1


def test_inspect_says_pickled_file_needs_allow_pickle(tmp_path, capsys):
    """For a pickled file, inspect says allow_pickle is needed, and why; never 'no'."""
    path = tmp_path / "obj.nsb"
    namedschema.save({"tags": {"a", "b"}, "x": np.arange(3)}, path, allow_pickle=True)
    assert cli.main(["inspect", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "needs allow_pickle=True: tags: builtins.set" in lines
    assert not any(line.endswith("allow_pickle=True: no") for line in lines)
    assert sum("allow_pickle" in line for line in lines) == 1


@pytest.mark.subprocess
def test_inspect_missing_file_is_one_line_no_traceback():
    """A missing path gives one stderr line naming it, status 2, no traceback."""
    proc = _run("inspect", "does-not-exist.nsb")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "does-not-exist.nsb" in proc.stderr


@pytest.mark.subprocess
@pytest.mark.parametrize("content", [b"", b"just some text\n", b"\x80\x04K\x01." * 50])
def test_inspect_non_namedschema_file_is_one_line(tmp_path, content):
    """Files that are not checkpoints (empty, text, a pickle) fail with one line and status 2."""
    path = tmp_path / "not-a-checkpoint"
    path.write_bytes(content)
    proc = _run("inspect", str(path))
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("namedschema inspect: error:")


@pytest.mark.subprocess
def test_inspect_truncated_checkpoint_is_one_line(tmp_path):
    """A checkpoint cut short is reported in one line, not a traceback."""
    path = tmp_path / "cut.nsb"
    namedschema.save({"x": np.arange(1000.0)}, path)
    path.write_bytes(path.read_bytes()[:40])
    proc = _run("inspect", str(path))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


@pytest.mark.subprocess
def test_inspect_directory_is_one_line():
    """Passing a directory is a user mistake: one line, status 2."""
    proc = _run("inspect", REPO_ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.subprocess
def test_demo_unwritable_workdir_is_one_line(tmp_path):
    """A --workdir that cannot be created fails with one line and status 2."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = _run("demo", "--size", "1MB", "--no-progress", "--workdir", str(blocker / "sub"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.subprocess
def test_python_m_namedschema_matches_console_entry_point():
    """`python -m namedschema` and the console script share one main."""
    from namedschema import __main__ as entry
    assert entry.main is cli.main
    proc = _run("--version")
    assert proc.returncode == 0 and namedschema.__version__ in proc.stdout


@pytest.mark.subprocess
def test_cli_import_stays_light():
    """Importing namedschema.apps.cli (and the benchmark runner) loads neither matplotlib
    nor torch."""
    code = ("import sys, namedschema.apps.cli, benchmarks.suite.runner\n"
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr


# ------------------------------------------------ bench: a thin entry point (issue 29)
def test_bench_runs_the_benchmarks_of_the_checkout_it_sits_in():
    """In a source checkout, ``bench`` finds ``benchmarks/suite`` next to the package."""
    assert cli._benchmarks_parent() == REPO_ROOT
    assert os.path.isfile(os.path.join(REPO_ROOT, "benchmarks", "suite", "runner.py"))


@pytest.mark.parametrize("args", [["--quick"], ["--help"], []])
def test_bench_without_the_benchmarks_says_in_one_line_what_to_do(args, capsys, monkeypatch):
    """An installed package has no benchmarks: one line on stderr, status 2."""
    monkeypatch.setattr(cli, "_benchmarks_parent", lambda: None)
    assert cli.main(["bench", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err == f"namedschema bench: error: {cli.NO_BENCHMARKS}\n"
    assert "clone" in captured.err and "python -m namedschema bench" in captured.err


@pytest.mark.subprocess
def test_bench_of_a_package_installed_without_its_source_tree(tmp_path):
    """A copy of the package with no ``benchmarks`` beside it (what pip installs): the
    command says to run it from a clone, and exits 2; the other commands still work."""
    import shutil
    site = tmp_path / "site-packages"
    shutil.copytree(os.path.dirname(namedschema.__file__), site / "namedschema",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(site))
    run = [sys.executable, "-B", "-m", "namedschema"]
    proc = subprocess.run([*run, "bench", "--quick"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr == f"namedschema bench: error: {cli.NO_BENCHMARKS}\n"
    proc = subprocess.run([*run, "--version"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and namedschema.__version__ in proc.stdout
