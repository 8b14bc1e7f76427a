#!/usr/bin/env python3
"""The change-tracking routes that write protection leaves to others, measured (issue 29).

Two questions, each answered by routes timed alternately in one run (the
machine is shared: read the ratios of neighbouring saves, not the seconds):

* ``fallback``: memory write protection cannot see (a buffer in shared
  memory, which other processes may write) is tracked by page CRC-32
  checksums. Would comparing it with the file do as well? A shared buffer of
  ``--mib`` MiB, 1% of it rewritten (a ring segment) before each incremental
  save, saved under page checksums and under comparison, with the file warm
  in the page cache and evicted from it (``POSIX_FADV_DONTNEED``).
* ``resume``: the first incremental save after ``load(path, mmap_mode='c')``
  (a resume) with 1% of the buffer written: with the pages the process
  owns a copy of read from ``/proc/self/pagemap`` (the own-copies route), and
  without it (every page compared), each in a fresh process; time and peak
  growth of the resident memory.

Usage:

    python benchmarks/bench_tracking_routes.py [fallback|resume|both] [--mib 1024]
        [--reps 4] [--dir DIR]

The routes are forced through ``tracking._forced`` (private: for tests and
benchmarks; nothing selects a route in a program).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time

# This checkout (its root is above this folder): its namedschema.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import namedschema  # noqa: E402
from benchmarks.suite.incremental import resident_bytes as _rss  # noqa: E402
from namedschema.checkpoint import _incremental as incremental  # noqa: E402
from namedschema.checkpoint import _tracking as tracking  # noqa: E402

MIB = 2**20


def _evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _save(obj: object, path: str) -> None:
    namedschema.save(obj, path, incremental=True)
    incremental.wait(path)


def fallback(directory: str, mib: int, reps: int) -> dict[str, list[float]]:
    """Seconds of each incremental save of a shared buffer, per ``cache/route``."""
    n = mib * MIB
    obs = np.frombuffer(mmap.mmap(-1, n, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS),
                        np.uint8)
    obs[:] = np.arange(n, dtype=np.uint64).astype(np.uint8)
    obj = {"obs": obs}
    routes = ("checksums", "compare")
    for cache in ("warm", "cold"):
        for route in routes:
            tracking._forced = route
            path = os.path.join(directory, f"fallback-{cache}-{route}.nsb")
            _save(obj, path)
            _save(obj, path)        # the baseline of this route
    out: dict[str, list[float]] = {}
    cursor, k = 0, n // 100
    for rep in range(reps):
        for cache in ("warm", "cold"):
            for route in routes if rep % 2 == 0 else routes[::-1]:
                tracking._forced = route
                path = os.path.join(directory, f"fallback-{cache}-{route}.nsb")
                obs[cursor:cursor + k] = (rep + 7) % 256
                cursor = (cursor + k) % (n - k)
                if cache == "cold":
                    _evict(path)
                start = time.perf_counter()
                _save(obj, path)
                out.setdefault(f"{cache}/{route}", []).append(time.perf_counter() - start)
                if namedschema.inspect(path).last_save.kind != "incremental":
                    raise SystemExit(f"{path}: not an incremental save")
    tracking._forced = None
    return out


def _resume_child(path: str, route: str, own: bool) -> None:
    if route != "auto":
        tracking._forced = route
    if not own:   # every page a candidate: as if pagemap said nothing
        tracking.Scan._mapped_pages = lambda self, index, lo, nbytes: []
    obj = namedschema.load(path, mmap_mode="c")
    obj["obs"][: obj["obs"].size // 100] = 3
    before, start = _rss(), time.perf_counter()
    _save(obj, path)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "extra_mib": (_rss() - before) / MIB,
                      "kind": namedschema.inspect(path).last_save.kind,
                      "mode": tracking.mode()}))


def resume(directory: str, mib: int, reps: int) -> dict[str, list[dict]]:
    """The first incremental save after an mmap_mode='c' load, per ``route/own copies``."""
    obs = np.arange(mib * MIB, dtype=np.uint64).astype(np.uint8)
    out: dict[str, list[dict]] = {}
    for rep in range(reps):
        for own in (True, False) if rep % 2 == 0 else (False, True):
            for route in ("auto", "checksums"):
                path = os.path.join(directory, "resume.nsb")
                _save({"obs": obs}, path)
                proc = subprocess.run(
                    [sys.executable, __file__, "_child", path, route, str(int(own))],
                    capture_output=True, text=True, check=True)
                found = json.loads(proc.stdout.strip().splitlines()[-1])
                out.setdefault(f"{route}/{'own copies' if own else 'every page'}",
                               []).append(found)
    return out


def main() -> None:
    if sys.argv[1:2] == ["_child"]:
        _resume_child(sys.argv[2], sys.argv[3], sys.argv[4] == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="?", default="both",
                        choices=("fallback", "resume", "both"))
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="namedschema-routes-", dir=args.dir) as tmp:
        if args.which in ("fallback", "both"):
            print(f"fallback: shared {args.mib} MiB, 1% ring rewritten before each save")
            for key, seconds in fallback(tmp, args.mib, args.reps).items():
                print(f"  {key:16} median {statistics.median(seconds):.3f} s  "
                      f"({', '.join(f'{s:.3f}' for s in seconds)})")
        if args.which in ("resume", "both"):
            print(f"resume: first incremental save after load(mmap_mode='c') of "
                  f"{args.mib} MiB, 1% written")
            for key, found in resume(tmp, args.mib, max(args.reps // 2, 1)).items():
                times = ", ".join(f"{f_['seconds']:.3f} s" for f_ in found)
                extra = ", ".join(f"{f_['extra_mib']:.0f}" for f_ in found)
                print(f"  {key:22} {times}; extra RSS {extra} MiB "
                      f"({found[0]['kind']}, {found[0]['mode']})")


if __name__ == "__main__":
    main()
