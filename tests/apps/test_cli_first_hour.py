"""What a new user meets on the command line: ``verify``, output paths checked before a
benchmark runs, one list of topics, files that honour the umask, ``load(progress=True)``,
and install hints that fit where namedschema was installed from."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest

import namedschema
from benchmarks.suite import TOPICS, write_json_atomic
from namedschema._core import tree as _extras
from namedschema.apps import cli
from tests.helpers import REPO_ROOT


def _run(*args, cwd=None, code=None):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    command = [sys.executable, "-c", code, *args] if code else \
        [sys.executable, "-m", "namedschema", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env,
                          cwd=cwd)


def _flip_byte(path, offset_from_end=3):
    with open(path, "r+b") as f:
        f.seek(-offset_from_end, os.SEEK_END)
        byte = f.read(1)
        f.seek(-offset_from_end, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))


# ------------------------------------------------------------------------------- verify
def test_verify_accepts_an_intact_file_and_refuses_a_flipped_data_byte(tmp_path, capsys):
    path = tmp_path / "replay.nsb"
    namedschema.save({"obs": np.arange(50_000, dtype=np.int64)}, path)
    assert cli.main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "400,000 bytes" in out
    _flip_byte(path)
    assert cli.main(["inspect", str(path)]) == 0          # the header is intact
    capsys.readouterr()
    assert cli.main(["verify", str(path)]) == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and "'obs'" in err and "corrupt" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_verify_never_unpickles(tmp_path, capsys):
    """A pickled file is verified without allow_pickle: nothing in it runs."""
    path = tmp_path / "obj.nsb"
    namedschema.save({"f": argparse.Namespace(a=np.ones(3))}, path, allow_pickle=True)
    assert cli.main(["verify", str(path)]) == 0


@pytest.mark.parametrize("make", ["not-a-checkpoint", "truncated"])
def test_verify_bad_files_exit_1_with_one_line(tmp_path, make, capsys):
    path = tmp_path / "f.nsb"
    if make == "not-a-checkpoint":
        path.write_bytes(b"just some text\n" * 10)
    elif make == "truncated":
        namedschema.save({"x": np.arange(10_000)}, path)
        path.write_bytes(path.read_bytes()[:-100])
    assert cli.main(["verify", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("namedschema verify: FAILED:") and err.count("\n") == 1


def test_load_progress_and_verify_progress_go_to_stderr(tmp_path, capsys):
    path = tmp_path / "p.nsb"
    namedschema.save({"x": np.zeros(2**20, np.uint8)}, path)
    capsys.readouterr()
    out = namedschema.load(path, progress=True)
    assert out["x"].nbytes == 2**20
    err = capsys.readouterr().err
    assert "loading [" in err and "100%" in err
    namedschema.load(path, mmap_mode="r", verify=True, progress=True)
    assert "verifying [" in capsys.readouterr().err
    namedschema.load(path)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------- bench outputs
@pytest.mark.subprocess
@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_bench_refuses_an_unwritable_output_before_running(tmp_path, option):
    """The path is checked first: one line, status 2, and no topic ran."""
    proc = _run("bench", "--quick", "--topics", "core", option,
                str(tmp_path / "missing" / "out.file"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "does not exist" in proc.stderr and "[bench]" not in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.subprocess
def test_bench_plot_without_matplotlib_fails_before_running(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from namedschema.apps.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = _run("bench", "--quick", "--topics", "core", "--plot", str(tmp_path / "b.png"),
                code=code)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "matplotlib" in proc.stderr and "pip install" in proc.stderr
    assert "[bench]" not in proc.stderr and "Traceback" not in proc.stderr


def test_bench_json_honours_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "r.json"
        write_json_atomic(str(path), {"a": 1})
    finally:
        os.umask(old)
    assert json.loads(path.read_text()) == {"a": 1}
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_every_topic_is_in_the_help(capsys):
    assert cli.main(["bench", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"({', '.join(TOPICS)};" in out


def test_verify_is_listed_with_the_other_commands(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(command in out for command in ("demo", "inspect", "verify", "bench"))


# ------------------------------------------------------------------------ extra hints
class _FakeDist(metadata.Distribution):
    def __init__(self, files):
        self.files_ = files

    def read_text(self, filename):
        return self.files_.get(filename)

    def locate_file(self, path):
        return os.path.join("/nowhere", str(path))


def _fake(monkeypatch, direct_url):
    files = {"METADATA": "Name: namedschema\nVersion: 0.1.0\n"
                         "Requires-Dist: numpy>=1.24\n"
                         "Requires-Dist: torch>=2.0; extra == \"torch\"\n"}
    if direct_url is not None:
        files["direct_url.json"] = json.dumps(direct_url)
    monkeypatch.setattr(_extras.metadata, "distribution", lambda name: _FakeDist(files))


def test_hint_for_an_editable_install_names_the_folder(monkeypatch):
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(_extras.__file__))))
    _fake(monkeypatch, {"url": f"file://{here}", "dir_info": {"editable": True}})
    hint = _extras.extra_hint("torch")
    assert f"pip install -e '{here}[torch]'" in hint and "'torch>=2.0'" in hint


def test_hint_for_a_package_index_install(monkeypatch):
    monkeypatch.setattr(_extras, "_HERE", "/nowhere")
    _fake(monkeypatch, None)
    assert _extras.extra_hint("torch") == ("install the torch extra: pip install "
                                           "'namedschema[torch]' (or pip install 'torch>=2.0')")


def test_hint_when_another_copy_is_installed(monkeypatch):
    """Running from a source tree while another clone is installed: the requirement."""
    _fake(monkeypatch, {"url": "file:///some/other/clone", "dir_info": {"editable": True}})
    hint = _extras.extra_hint("torch")
    assert "/some/other/clone" not in hint and "pip install 'torch>=2.0'" in hint
