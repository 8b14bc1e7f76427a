"""check_resume on real commands: exact resumes pass, the usual user bugs are named.

Each test runs a training command several times (uninterrupted, then SIGKILLed
and restarted) in fresh copies of a temporary directory, as users do with
``namedschema check-resume``. The loops: tests/testing/loop_script.py (numpy
only, starts fast), examples/train_loop.py (torch; its ``--bug`` flags are the
two usual mistakes), examples/dqn_pong.py and examples/sb3_dqn_cartpole.py (small)
and the README's rlpyt example.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from namedschema.testing import check_resume
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = [sys.executable, os.path.join(HERE, "loop_script.py")]
TRAIN_LOOP = [sys.executable, os.path.join(REPO_ROOT, "examples", "train_loop.py")]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def check(tmp_path, command, **kwargs):
    kwargs.setdefault("timeout", 300)
    return check_resume(command, cwd=tmp_path, env=_env(**kwargs.pop("extra_env", {})),
                        **kwargs)


def test_a_correct_loop_resumes_exactly(tmp_path):
    """Kills at random moments, during checkpoint writes and twice: every resume is exact."""
    report = check(tmp_path, LOOP, kills=3, seed=0)
    assert report.status == "exact", report.message
    assert report.exit_code == 0 and report.exact and report.divergence is None
    assert report.message.startswith("exact: 3 of 3 killed runs resumed bit-exact")
    kills = report.kills
    assert len(kills) == 4 and sum(k.second for k in kills) == 1   # one run killed twice
    assert all(k.step is not None for k in kills)
    assert all(r.compared >= 1 for r in report.runs)
    plans = [r.plan for r in report.runs]
    assert plans[:2] == ["moment", "write"] and plans[2].startswith("moment then ")


@pytest.mark.parametrize("bug, first, equal", [
    ("untracked-rng", "net", "rng"),          # exploration drawn from an untracked generator
    ("outside-counter", "net", "counters"),   # the lr schedule's counter in a local variable
])
def test_the_usual_bugs_diverge_naming_the_step_and_object(tmp_path, bug, first, equal):
    """The first difference is after the resume, in the network's first tensor."""
    pytest.importorskip("torch")
    report = check(tmp_path, [*TRAIN_LOOP, "--steps", "300", "--bug", bug], kills=1, seed=7)
    assert report.status == "diverged", report.message
    assert report.exit_code == 1 and not report.exact
    diff = report.divergence
    kill = report.runs[0].kills[-1]
    assert diff is not None and diff.life >= 1
    assert diff.record == "end" or diff.step > kill.resumed_from
    assert diff.objects[0] == first and diff.leaf == "0.weight" and diff.leaf_kind == "tensor"
    assert equal in diff.equal
    assert report.message.startswith(f"DIVERGED after the kill at step {kill.step:,}")
    assert "in `net` (tensor `0.weight`)" in report.message and "hint:" in report.message


def test_the_same_loop_without_the_bug_is_exact(tmp_path):
    """The twin of the test above: the unchanged example passes the same check."""
    pytest.importorskip("torch")
    report = check(tmp_path, [*TRAIN_LOOP, "--steps", "300"], kills=1, seed=1)
    assert report.status == "exact", report.message


def test_progress_lines_name_the_step_while_a_run_goes_on(tmp_path):
    """Every progress_every seconds a line says which run is at which step (a short period:
    on a busy machine the killed run's slow start leaves little time before its kill)."""
    import re
    lines: list[str] = []
    report = check(tmp_path, [*LOOP, "--steps", "60000"], kills=1, seed=0,
                   progress=lines.append, progress_every=0.05)
    assert report.status == "exact", report.message
    during = [line for line in lines if re.fullmatch(
        r"check-resume: (the uninterrupted run|run 1/1): (no step yet|step [\d,]+"
        r"( of 59,999)?) \(\d+ s(, start \d)?\)", line)]
    assert any(line.startswith("check-resume: the uninterrupted run: step") for line in during)
    assert any(" of 59,999 " in line for line in during), lines
    assert lines[-1].startswith("check-resume: run 1/1: killed at step")
    with pytest.raises(ValueError, match="progress_every"):
        check(tmp_path, LOOP, kills=1, progress_every=0)


def test_a_crash_is_reported_with_its_output(tmp_path):
    report = check(tmp_path, [*LOOP, "--mode", "crash"], kills=1)
    assert report.status == "crashed" and report.exit_code == 2
    assert "the uninterrupted run exited with status 3" in report.message
    assert "something went wrong" in report.output


def test_a_crash_after_the_resume_is_reported(tmp_path):
    report = check(tmp_path, [*LOOP, "--mode", "crash-after-resume"], kills=1, seed=0)
    assert report.status == "crashed" and report.exit_code == 2, report.message
    assert "after the kill at step" in report.message and "status 4" in report.message


def test_a_hang_is_killed_at_the_timeout(tmp_path):
    report = check(tmp_path, [*LOOP, "--mode", "hang"], kills=1, timeout=8)
    assert report.status == "timeout" and report.exit_code == 2
    assert "did not finish within 8 s" in report.message


def test_a_command_that_never_checkpoints_is_reported(tmp_path):
    report = check(tmp_path, [*LOOP, "--mode", "no-checkpoint"], kills=1)
    assert report.status == "no-checkpoints" and report.exit_code == 2
    assert report.message.startswith("NO CHECKPOINTS")


def test_checkpoints_shared_between_runs_are_refused(tmp_path):
    """A checkpoint at an absolute path: the next fresh run resumes from it, and is caught."""
    (tmp_path / "cwd").mkdir()
    report = check(tmp_path / "cwd", [*LOOP, "--mode", "shared"], kills=1,
                   extra_env={"SHARED_CHECKPOINT": str(tmp_path / "elsewhere.nsc")})
    assert report.status == "leaked" and report.exit_code == 2, report.message
    assert "$NAMEDSCHEMA_CHECK_DIR" in report.message


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] != b"Z"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_worker_processes_are_reaped(tmp_path):
    """Workers the command starts (its process group) die with each kill and each end."""
    pids = tmp_path / "pids"
    (tmp_path / "cwd").mkdir()
    report = check(tmp_path / "cwd", [*LOOP, "--mode", "orphan"], kills=2, seed=0,
                   extra_env={"ORPHAN_PIDS": str(pids)})
    assert report.status == "exact", report.message
    started = [int(line) for line in pids.read_text().split()]
    assert len(started) >= 4            # the reference, and each start of each killed run
    assert [pid for pid in started if _alive(pid)] == []


def test_the_command_line_prints_json_and_exits_with_the_verdict(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "namedschema", "check-resume", "--kills", "1", "--json",
         "--", *LOOP], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["status"] == "exact" and report["exact"] is True
    assert len(report["runs"]) == 1 and report["runs"][0]["kills"]
    assert "check-resume: run 1/1:" in proc.stderr      # the progress lines


def test_the_command_line_reports_a_divergence_with_status_1(tmp_path):
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-m", "namedschema", "check-resume", "--kills", "1", "-q", "--",
         *TRAIN_LOOP, "--steps", "300", "--bug", "untracked-rng"], cwd=tmp_path,
        env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("DIVERGED after the kill at step")
    assert proc.stderr == ""


def test_dqn_pong_resumes_exactly(tmp_path):
    """examples/dqn_pong.py at a small size (real ALE Pong), checkpointing every 20 steps.

    Its wrappers' observation spaces are seeded (else their entropy-drawn generators,
    kept by the checkpoint, make two runs differ at step 0), and RecordEpisodeStatistics'
    wall-clock start time is left out of the audit's digests."""
    pytest.importorskip("torch")
    pytest.importorskip("ale_py")
    small = ["--total-timesteps", "160", "--num-envs", "2", "--buffer-size", "128",
             "--learning-starts", "32", "--batch-size", "8", "--target-network-frequency",
             "50", "--exploration-fraction", "0.5", "--save-every", "20",
             "--checkpoint", "pong.nsc"]
    report = check(tmp_path, [sys.executable, os.path.join(REPO_ROOT, "examples",
                                                           "dqn_pong.py"), *small],
                   kills=2, seed=0)
    assert report.status == "exact", report.message + report.output


def test_a_wall_clock_value_is_not_reproducible_with_a_hint(tmp_path):
    """The time kept in a tracked dict: the runs differ before any kill, and the hint
    names clocks, space generators and --ignore."""
    report = check(tmp_path, [*LOOP, "--mode", "clock"], kills=1, seed=0)
    assert report.status == "nondeterministic" and report.exit_code == 1, report.message
    diff = report.divergence
    assert diff is not None and diff.life == 0 and diff.objects == ["counters"]
    assert diff.leaf == "started" and diff.leaf_kind == "scalar"
    assert report.message.startswith("NOT REPRODUCIBLE")
    assert "space's np_random" in report.message and "time.perf_counter()" in report.message
    assert "--ignore PATTERN" in report.message and "docs/check_resume.rst" in report.message


def test_the_command_line_ignores_what_it_is_told_to(tmp_path):
    """--ignore counters.started: the same command is exact (the checkpoint still keeps it)."""
    proc = subprocess.run(
        [sys.executable, "-m", "namedschema", "check-resume", "--kills", "1", "-q",
         "--ignore", "counters.started", "--", *LOOP, "--mode", "clock"], cwd=tmp_path,
        env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("exact: 1 of 1") and proc.stderr == ""


def test_ignore_patterns_are_checked(tmp_path):
    with pytest.raises(ValueError, match="ignore"):
        check_resume(LOOP, kills=1, ignore=["a\nb"], cwd=tmp_path)
    with pytest.raises(ValueError, match="ignore"):
        check_resume(LOOP, kills=1, ignore=[""], cwd=tmp_path)


def test_the_digests_leave_out_wall_clock_values_and_ignored_parts():
    """RecordEpisodeStatistics' start time and durations are not digested, the rest is;
    ``ignore`` patterns drop a part (with all under it) or a whole object. What the
    checkpoint holds is unchanged."""
    gym = pytest.importorskip("gymnasium")
    import numpy as np

    import namedschema
    from namedschema.training.audit import _run_checkpoint_objects, digest_objects

    env = gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))
    env.reset(seed=0)
    ckpt = namedschema.RunCheckpoint("unused.nsc").track(env=env, world=np.zeros(3))

    def digests(*ignore):
        return digest_objects(_run_checkpoint_objects(ckpt.state(0)), ignore)

    before = digests()
    attributes = "captured.layers.0.attributes."
    assert attributes + "episode_returns.1" in before["env"]["leaves"]
    assert not [p for p in before["env"]["leaves"] if "time" in p]
    env.episode_start_time += 1000.0          # the clock: not compared
    env.time_queue.append(12.5)
    assert digests() == before
    kept = ckpt.state(0)["components"]["env"]["state"]["captured"]["layers"][0]["attributes"]
    assert kept["episode_start_time"][1] == env.episode_start_time   # still checkpointed
    env.episode_returns = env.episode_returns + 1.0       # state a resume must keep
    assert digests()["env"]["digest"] != before["env"]["digest"]
    ignored = digests("env.*.episode_returns")
    assert ignored["env"]["digest"] == digests("env.captured.layers.0.*_returns")["env"]["digest"]
    assert not [p for p in ignored["env"]["leaves"] if "episode_returns" in p]
    env.episode_returns = env.episode_returns - 1.0
    assert digests("env.*.episode_returns")["env"]["digest"] == ignored["env"]["digest"]
    assert digests("env.*.episode_returns")["world"] == before["world"]
    assert "world" not in digests("world") and "env" in digests("world")


def test_the_sb3_example_resumes_exactly(tmp_path):
    """examples/sb3_dqn_cartpole.py (a plain SB3 script wrapped by resumable), small:
    exact, and each kill names the step (num_timesteps) it hit."""
    pytest.importorskip("stable_baselines3")
    report = check(tmp_path, [sys.executable, os.path.join(REPO_ROOT, "examples",
                                                           "sb3_dqn_cartpole.py"),
                              "--total-timesteps", "1200", "--save-every", "200"],
                   kills=2, seed=0)
    assert report.status == "exact", report.message + report.output
    assert report.kills and all(k.step is not None for k in report.kills), report.message
    assert "?" not in report.message


def test_the_rlpyt_readme_example_resumes_exactly(tmp_path, rlpyt_root):
    report = check(tmp_path, [sys.executable, os.path.join(HERE, "rlpyt_flash.py"),
                              "--steps", "400"], kills=2, seed=0,
                   extra_env={"RLPYT_SRC": rlpyt_root})
    assert report.status == "exact", report.message + report.output


def test_the_hints_name_the_docs_page_and_it_documents_the_check():
    """The page the hints cite exists, is in the docs' table of contents, and documents
    every status with its exit code, --ignore and $NAMEDSCHEMA_CHECK_DIR."""
    import re

    from namedschema.testing.check import EXIT_CODES, HINT, NOT_REPRODUCIBLE_HINT
    cited = {m for h in (HINT, NOT_REPRODUCIBLE_HINT) for m in re.findall(r"docs/[\w.]+", h)}
    assert cited == {"docs/check_resume.rst"}
    with open(os.path.join(REPO_ROOT, "docs", "check_resume.rst")) as f:
        page = f.read()
    with open(os.path.join(REPO_ROOT, "docs", "index.rst")) as f:
        assert re.search(r"^   check_resume$", f.read(), re.M)
    for status, code in EXIT_CODES.items():
        assert re.search(rf"^{re.escape(status)} +{code} ", page, re.M), status
    for needed in ("--ignore PATTERN", "$NAMEDSCHEMA_CHECK_DIR", "namedschema.testing",
                   "NOT REPRODUCIBLE", "DIVERGED", "episode_start_time"):
        assert needed in page, needed


def test_the_audit_benchmark_runs_and_audits(tmp_path):
    """benchmarks/bench_audit.py at a tiny size: both routes run, the audited one records."""
    import re
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "benchmarks", "bench_audit.py"),
         "--buffer-mib", "4", "--steps", "40", "--save-every", "10", "--repeats", "1",
         "--dir", str(tmp_path)], env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"\(4 audited saves, 5 records\)", proc.stdout), proc.stdout
    assert re.search(r"ratio \(with/without\): steps/s [\d.]+, median stall [\d.]+",
                     proc.stdout), proc.stdout
