"""Timing: interleaved repeated timing of fast statements, best-of for slow operations.

best_times   several statements timed in interleaved rounds, the best time per call of each
best_of      the best wall time of a slow call over a few repeats
"""

from __future__ import annotations

import gc
import math
import time
import timeit

__all__ = ["best_times", "best_of"]


def _calibrate(timer: timeit.Timer, min_time: float) -> int:
    """Loop count that makes one ``timer.timeit`` call last at least ``min_time``."""
    number = 1
    while True:
        if timer.timeit(number) >= min_time or number >= 10**7:
            return number
        number *= 4


def best_times(contenders: dict, *, repeat: int = 7, min_time: float = 0.02,
               setup: str = "pass", globals_: dict | None = None) -> dict:
    """Time several statements, interleaved, and keep the best time per call of each.

    Rounds alternate between contenders (A B C A B C ...), so slow drifts of
    the machine (other processes, CPU frequency) hit every contender alike;
    the minimum over rounds is the least disturbed measurement.

    Args:
        contenders: name -> statement (source text or a zero-argument callable).
        repeat: rounds per contender.
        min_time: seconds each timed batch should last at least.
        setup: setup statement shared by all timers.
        globals_: namespace the statements run in.

    Returns:
        name -> best seconds per execution of the statement.
    """
    timers = {name: timeit.Timer(stmt, setup=setup, globals=globals_)
              for name, stmt in contenders.items()}
    numbers = {name: _calibrate(t, min_time) for name, t in timers.items()}
    best = {name: math.inf for name in timers}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            for name, t in timers.items():
                best[name] = min(best[name], t.timeit(numbers[name]) / numbers[name])
    finally:
        if gc_was_enabled:
            gc.enable()
    return best


def best_of(func, *, repeat: int = 5) -> float:
    """Best wall time in seconds of ``func()`` over ``repeat`` calls (for slow operations)."""
    best = math.inf
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()  # as timeit does: a collection would land on one contender by chance
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            func()
            best = min(best, time.perf_counter() - start)
    finally:
        if gc_was_enabled:
            gc.enable()
    return best
