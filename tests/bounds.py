"""Per-example bounds for the tiny-file fuzzers: memory allocated and CPU time spent.

Each fuzz example reads one small hostile file; a reader that sizes an allocation or
a loop by what the file says, rather than by the bytes it holds, shows up here as a
peak (``tracemalloc``) or a CPU time (``time.process_time``: this process's own CPU,
so a busy machine does not make it flake as a wall-clock deadline would) far above
what reading a small file costs. The bounds are generous: an example of the
tiny-file fuzz took at most 6 ms of CPU and 210 KiB on a busy 2-core machine
(issue 34); the CPU bound is 2 s.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

TIME_BOUND_S = 2.0        # CPU seconds one example may take, reading included


@dataclass
class Cost:
    peak: int = 0          # bytes, tracemalloc's peak
    cpu_s: float = 0.0     # seconds of this process's CPU


@contextmanager
def bounded(memory: int, seconds: float = TIME_BOUND_S) -> Iterator[Cost]:
    """Measure the block; on a normal exit, assert it stayed under ``memory`` and ``seconds``."""
    cost = Cost()
    tracemalloc.start()
    start = time.process_time()
    try:
        yield cost
    finally:
        cost.cpu_s = time.process_time() - start
        cost.peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert cost.peak < memory, f"allocated {cost.peak:,} bytes (bound {memory:,})"
    assert cost.cpu_s < seconds, f"took {cost.cpu_s:.2f} s of CPU (bound {seconds} s)"
