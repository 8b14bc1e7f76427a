"""A process that saves state A, then starts a background save of state B that stops at a phase.

    python -m tests.checkpoint.background_kill_child PATH MODE HOOK NTH WHEN MARKER

MODE is ``full``, ``incremental`` (written by a thread from the changes
copied aside), ``incremental_fork`` (page-checksum tracking: written by a
snapshot child) or ``compressed_full`` (``compression="zstd"``, not incremental: a
full compressed file, written by a snapshot child whose threads compress; incremental
compressed saves: tests/checkpoint/test_compressed_incremental_crash.py). In the background writer only (the child process, or the
thread), the NTH call
of ``os.HOOK`` (``write``, ``fsync``, ``replace``...) writes its name, its pid and its
parent's to MARKER and blocks the writer there for good, ``before`` or ``after`` the
real call (WHEN). The test then SIGKILLs this process (the writer dies with it)
and loads PATH. This process prints ``waiting`` and sleeps once B's save started.

The writer blocks itself (a wait that never ends) rather than sending its process
a SIGSTOP: a SIGSTOP that a thread sends to its own process is acted on by whichever
thread the kernel picks (the main one), so the writer thread goes on until that
thread is scheduled: on a busy machine it wrote and committed the whole journal
before the stop, and a kill "before the journal's open" found the new state (issue 34).
"""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

import namedschema
from namedschema.checkpoint import _tracking as tracking

ROWS = 64 * 1024          # a 32 MiB float64 buffer: several write chunks
WIDTH = 64


def state(which: str) -> dict:
    """State A, or B (A with 1% of rows, contiguous, changed and a new step count)."""
    buf = np.arange(ROWS * WIDTH, dtype=np.float64).reshape(ROWS, WIDTH)
    step = 1
    if which == "B":
        buf[ROWS // 3:ROWS // 3 + ROWS // 100] = -1.0
        step = 2
    return {"buffer": buf, "step": step}


def main() -> None:
    path, mode, hook, nth, when, marker = sys.argv[1:7]
    nth_call = int(nth)
    main_pid = os.getpid()
    incremental = mode.startswith("incremental")
    extra = {"compression": "zstd"} if mode == "compressed_full" else {}
    if mode == "incremental_fork":
        tracking._forced = "checksums"   # incremental saves by a snapshot child
    obj = state("A")
    namedschema.save(obj, path, incremental=incremental, **extra)
    namedschema.save(obj, path, incremental=incremental, **extra)   # layout settled
    real = getattr(os, hook)
    calls = 0

    def stopping(*args, **kwargs):
        nonlocal calls
        if os.getpid() == main_pid and \
                threading.current_thread().name != "namedschema-background-save":
            return real(*args, **kwargs)
        calls += 1
        if calls == nth_call and when == "after":
            result = real(*args, **kwargs)
            _stop(marker, hook)
            return result
        if calls == nth_call:
            _stop(marker, hook)
        return real(*args, **kwargs)

    setattr(os, hook, stopping)
    obj["buffer"][ROWS // 3:ROWS // 3 + ROWS // 100] = -1.0   # what state("B") is
    obj["step"] = 2
    namedschema.save(obj, path, incremental=incremental, background=True, **extra)
    obj["buffer"][:] = 12345.0        # after the snapshot: never reaches the file
    print("waiting", flush=True)
    time.sleep(120)


def _stop(marker: str, hook: str) -> None:
    """Say where the writer is, then never return: the writer stays at this call."""
    with open(marker + ".tmp", "w") as f:
        f.write(f"{hook} {os.getpid()} {os.getppid()}")
    os.replace(marker + ".tmp", marker)
    threading.Event().wait()


if __name__ == "__main__":
    main()
