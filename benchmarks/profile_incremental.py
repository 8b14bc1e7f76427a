#!/usr/bin/env python3
"""Where the time of an incremental save goes: phase timings, before/after in one run.

Each round is a fresh process that builds a ``buffer_from_example`` buffer (84x84 uint8
observations, int64 action, float32 reward, bool done; ``--mib``, default 1 GiB), saves it
in full with ``incremental=True``, times a full ``namedschema.save`` of it (the reference),
then ``--saves`` incremental saves after overwriting one row (the floor), as many after
overwriting a contiguous 1% of the rows (a ring segment) and as many after overwriting 1%
of the rows at random (``random 1%``), each timed whole and by phase
(wrappers around the scan, the comparison with the file, the journal's write and its
fsyncs, the CRC updates, the in-place writes, the start of the finishing thread; phases
that run in the finishing thread, as the in-place writes since issue 33, are listed but
are not part of the save's time), the CPU time of the caller's thread (steadier than
the wall clock on a loaded machine), and the finishing thread's remaining time after it.
``--tree NAME=SRC`` (repeatable) runs the rounds with the ``namedschema`` package found
in ``SRC`` (e.g. ``git archive HEAD~1 namedschema | tar -x -C /tmp/old``), alternating
the trees round by round, so that before and after share the machine's moods.
``--cprofile`` prints cProfile's top functions of the last 1% save of each round.

    python benchmarks/profile_incremental.py [--mib N] [--saves N] [--rounds N]
        [--tree before=/tmp/old --tree after=.] [--cprofile] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import sys
sys.path.insert(0, sys.argv[5])      # the tree's package, before the working directory's
import cProfile, functools, io, json, os, pstats, shutil, tempfile, time
import numpy as np
import namedschema
from namedschema import checkpoint
from namedschema.buffer import buffer_from_example
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _incremental as journal
from namedschema.checkpoint import _storage as pages
from namedschema.checkpoint import _tracking as tracking

mib, saves, directory, profile = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
ROW = 84 * 84 + 8 + 4 + 1
rows = mib * 2**20 // ROW
S = namedschema.NamedArrayTupleSchema("Samples", "observation action reward done")
obj = buffer_from_example(S(np.zeros((84, 84), np.uint8), np.int64(0), np.float32(0), False),
                          rows)
obj.observation[:] = np.arange(84 * 84, dtype=np.uint8).reshape(84, 84)
d = tempfile.mkdtemp(dir=directory or None)
path = os.path.join(d, "b.nsb")
checkpoint.save(obj, path, incremental=True)
incremental.wait(path)
obj[0] = S(np.ones((84, 84), np.uint8), 1, 1.0, False)
checkpoint.save(obj, path, incremental=True)      # one-time set-up costs
incremental.wait(path)
t = time.perf_counter()
checkpoint.save(obj, path + ".full")
full = time.perf_counter() - t
os.unlink(path + ".full")

T = {}
def wrap(owner, name, label):
    f = getattr(owner, name)
    @functools.wraps(f)
    def timed(*a, **k):
        began = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            T[label] = T.get(label, 0.0) + time.perf_counter() - began
    setattr(owner, name, timed)

PHASES = [(incremental, "_scan", "scan (all)"), (tracking.Scan, "_compare", "compare with file"),
          (os, "preadv", "  read old bytes"), (tracking, "crc_updates", "CRCs: new bytes, blocks"),
          (journal, "reserve", "reserve blocks"), (journal, "write", "journal (all)"),
          (os, "writev", "  journal writev"), (os, "fsync", "  journal fsync"),
          (journal, "fsync_dir", "  journal dir fsync"),
          (tracking, "write_in_place", "in-place writes"),
          (incremental, "_finish_later", "start finishing thread"),
          (pages, "file_mappings", "parse /proc/self/maps")]
for owner, name, label in PHASES:
    wrap(owner, name, label)
out = {"src": os.path.dirname(namedschema.__file__), "full": full, "rows": rows}
cursor = 0
rng = np.random.default_rng(int(sys.argv[6]))
for case, n in (("floor", 1), ("ring 1%", rows // 100), ("random 1%", rows // 100)):
    out[case] = []
    for r in range(saves):
        if case == "random 1%":
            index = np.sort(rng.choice(rows, n, replace=False))
        else:
            index = (cursor + np.arange(n)) % rows
            cursor = (cursor + n) % rows
        obj[index] = S(np.full((n, 84, 84), r + 3, np.uint8), np.full(n, r, np.int64),
                       np.full(n, r, np.float32), np.zeros(n, bool))
        incremental.wait(path)
        T.clear()
        prof = cProfile.Profile() if profile == "1" and case != "floor" and r == saves - 1 \
            else None
        t, cpu = time.perf_counter(), time.thread_time()
        if prof:
            prof.enable()
        checkpoint.save(obj, path, incremental=True)
        if prof:
            prof.disable()
        took, cpu = time.perf_counter() - t, time.thread_time() - cpu
        incremental.wait(path)          # the finishing thread: in-place writes (new), sync
        finishing = time.perf_counter() - t - took
        record = checkpoint.inspect(path).last_save
        assert record.kind == "incremental", incremental.fallback_reason(path)
        out[case].append({"seconds": took, "cpu": cpu, "finishing": finishing,
                          "phases": dict(T),
                          "written": record.bytes_written,
                          "ranges": record.ranges})
        if prof:
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
            print(s.getvalue(), file=sys.stderr)
incremental.wait(path)
back = checkpoint.load(path, verify=True)
assert all(np.array_equal(a, b) for a, b in zip(back, obj, strict=True))
shutil.rmtree(d)
print(json.dumps(out))
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--saves", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tree", action="append", default=[],
                        help="NAME=SRC: a directory holding the namedschema package")
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--dir", default="")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = dict(t.split("=", 1) for t in args.tree) or {"this": here}
    runs: dict[str, list] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
            proc = subprocess.run([sys.executable, "-c", CHILD, str(args.mib), str(args.saves),
                                   args.dir, "1" if args.cprofile else "0",
                                   os.path.abspath(trees[name]), str(r)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"{name} round failed:\n{proc.stderr}")
            if args.cprofile:
                print(f"--- {name}, round {r}: cProfile of the last 1% save\n{proc.stderr}")
            runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    for name, got in runs.items():
        full = min(g["full"] for g in got)
        print(f"{name} ({got[0]['src']}): full save best {full * 1e3:.0f} ms "
              f"of {got[0]['rows']:,} rows")
        for case in ("floor", "ring 1%", "random 1%"):
            saves = [s for g in got for s in g[case]]
            med = statistics.median(s["seconds"] for s in saves)
            best = min(s["seconds"] for s in saves)
            print(f"  {case:8s} median {med * 1e3:6.1f} ms, best {best * 1e3:6.1f} ms, "
                  f"{saves[0]['written'] / 2**20:.2f} MiB in {saves[0]['ranges']} ranges; "
                  f"median/full {med / full:.3f}x, best/full {best / full:.3f}x; the "
                  f"caller's CPU {statistics.median(s['cpu'] for s in saves) * 1e3:.1f} ms; "
                  "then "
                  f"the finishing thread {statistics.median(s['finishing'] for s in saves) * 1e3:.0f} ms")
            labels = sorted({k for s in saves for k in s["phases"]},
                            key=lambda k: -statistics.median(
                                s["phases"].get(k, 0.0) for s in saves))
            for label in labels:
                values = [s["phases"].get(label, 0.0) * 1e3 for s in saves]
                print(f"      {label:24s} median {statistics.median(values):6.1f} ms  "
                      f"max {max(values):6.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
