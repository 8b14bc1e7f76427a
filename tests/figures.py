"""Figures recorded by the hardening tests, and the script that gathers them.

Tests call :func:`record` with a name and a number (cases run, kills survived,
files damaged and detected). Outside of a figures run it does nothing; when
``NAMEDSCHEMA_FIGURES`` names a file, each call appends one JSON line to it,
so figures from subprocess-free and pytest-xdist runs alike end up in one
place. Running this module reruns the hardening suite (``HARDENING``: the files
that try to break the package, kept in the area folders they test) with that
variable set,
sums the figures per name and prints them as JSON and as the reStructuredText
table pasted into ``docs/reliability.rst``::

    .venv/bin/python -m tests.figures [--json OUT] [pytest args...]

record   add a figure (no-op unless NAMEDSCHEMA_FIGURES is set)
collect  sum the figures of a JSON-lines file per name
main     run the hardening tests and report their figures
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ENV = "NAMEDSCHEMA_FIGURES"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)

# The hardening suite: hostile input, crashes, limits (paths relative to tests/).
HARDENING = (
    "core/test_bad_input.py", "core/test_concurrency.py", "core/test_extreme_schemas.py",
    "core/test_schema_identity.py", "core/test_write_casting.py",
    "checkpoint/test_crash_consistency.py", "checkpoint/test_disk_full.py",
    "checkpoint/test_file_safety.py", "checkpoint/test_fuzz_amplification.py",
    "checkpoint/test_fuzz_files.py", "checkpoint/test_helpful_errors.py",
    "checkpoint/test_incremental_crash.py", "checkpoint/test_incremental_isolation.py",
    "checkpoint/test_save_targets.py", "evolution/test_cast_limits.py",
    # round 4 (issue 34): journals, RunCheckpoint, the newer readers
    "checkpoint/test_journal_hostile.py", "checkpoint/test_tiny_file_fuzz.py",
    "training/test_run_checkpoint_hardening.py", "training/test_run_checkpoint_property.py",
    "ray/test_shard_files.py",
)

# name -> description shown in the table; order is the table's order.
DESCRIPTIONS = {
    "fuzz.cases": "damaged or random files given to load/inspect",
    "fuzz.format_errors": "... each refused with FormatError",
    "fuzz.loaded": "... loaded (damage only in data read without verify, or in padding)",
    "fuzz.known_bug_hits": "... hit an open bug (xfail test) instead of FormatError",
    "fuzz.rlimit_cases": "files loaded under a 1 GiB address-space limit",
    "fuzz.amplification_files": "... among them, headers built to amplify time or memory",
    "fuzz.torch_cases": "torch loads of every dtype, offset and stride class, ops run",
    "collision.files": "files and pickles forging a module-level schema id",
    "fuzz.pickle_payloads_refused": "crafted pickle payloads refused (no code run)",
    "crash.kills": "savers killed with SIGKILL mid-overwrite",
    "crash.previous_intact": "... previous checkpoint still loaded and verified",
    "crash.stray_temp_files": "stray temporary files after the last kill",
    "disk_full.saves": "saves into a full filesystem (real tmpfs and simulated ENOSPC)",
    "disk_full.old_file_intact": "... old file intact afterwards",
    "concurrency.threads": "threads unpickling or creating schemas at once",
    "concurrency.processes": "processes reading one memory-mapped checkpoint",
    "extreme.schemas": "extreme schemas exercised",
    "bad_input.calls": "calls with wrong types or mismatched structures",
    "round3.nonregular_targets": "saves to FIFOs, sockets, devices, directories (behind 0-2 links)",
    "round3.dtype_pair_cases": "evolution casts: dtype pairs x casting rules, random values",
    "round3.write_value_cases": "buffer writes: values of every dtype into every dtype",
    "round3.foreign_files_named": "non-checkpoint files (pickle, npy, zip, HDF5, text...) named",
    "round3.hostile_resume_files": "hostile files at every path resumable reads (no code run)",
    "round4.journal_fuzz": "tiny journals next to a checkpoint (file never grown)",
    "round4.journal_growth_refused": "journals naming a larger size, inconsistent: refused",
    "round4.run_damaged": "RunCheckpoint files with bytes flipped or cut, restored",
    "round4.run_mutated": "RunCheckpoint state trees with a node changed, restored",
    "round4.run_refused": "... refused with one StateMismatchError, run unchanged",
    "round4.tiny_run": "tiny hostile RunCheckpoint files (time and memory bounded)",
    "round4.tiny_evolution": "tiny hostile files loaded into another schema (bounded)",
    "round4.manifest_fuzz": "tiny hostile Ray manifests and shard files (bounded)",
}


def record(name: str, value: float = 1) -> None:
    """Add ``value`` to the figure ``name`` when a figures run is recording."""
    target = os.environ.get(ENV)
    if not target:
        return
    line = json.dumps({"name": name, "value": value}) + "\n"
    # One short O_APPEND write per figure, so concurrent writers never interleave.
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def collect(path: str) -> dict:
    """Sum the figures in the JSON-lines file ``path`` per name."""
    totals: dict = {}
    if not os.path.exists(path):
        return totals
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                item = json.loads(line)
                totals[item["name"]] = totals.get(item["name"], 0) + item["value"]
    return totals


def _rst_table(totals: dict) -> str:
    rows = [(DESCRIPTIONS.get(k, k), f"{totals[k]:,.0f}") for k in
            list(DESCRIPTIONS) + sorted(set(totals) - set(DESCRIPTIONS)) if k in totals]
    width = max(len(r[0]) for r in rows) if rows else 10
    rule = "=" * width + "  " + "=" * 10
    lines = [rule, f"{'figure':<{width}}  {'count':>10}", rule]
    lines += [f"{a:<{width}}  {b:>10}" for a, b in rows]
    lines.append(rule)
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run the hardening suite recording figures; print them; return pytest's code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args, pytest_args = parser.parse_known_args(argv)
    workdir = tempfile.mkdtemp(prefix="namedschema-figures-")
    lines_file = os.path.join(workdir, "figures.jsonl")
    env = dict(os.environ, **{ENV: lines_file})
    start = time.monotonic()
    paths = [os.path.join(HERE, path) for path in HARDENING]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *paths, *pytest_args], cwd=REPO_ROOT, env=env)
    totals = collect(lines_file)
    import numpy
    report = {
        "topic": "hardening",
        "pytest_exit_code": proc.returncode,
        "seconds": round(time.monotonic() - start, 1),
        "hypothesis_profile": os.environ.get("HYPOTHESIS_PROFILE", "dev"),
        "environment": {"python": platform.python_version(), "numpy": numpy.__version__,
                        "platform": platform.platform()},
        "figures": totals,
    }
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    print(_rst_table(totals))
    out = args.json or os.path.join(workdir, "figures.json")
    with open(out, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(f"figures written to {out}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
