"""Buffer benchmarks: allocating, filling and handing on an rlpyt-style replay buffer.

An Atari-like buffer (``namedschema.apps.harness.atari_transitions``: uint8 84x84 observations plus
int32 action, float32 reward and bool done, leading dims ``(T, 16)``; 1 GiB, or 16 MiB with
``--quick``) is measured by each contender in a fresh subprocess; contenders
alternate round by round and the best round is kept.

* ``alloc_fill``: allocate the buffer, then write every byte. Contenders:
  ``np.zeros`` of the same total size (the reference), ``buffer_from_example``
  with and without ``share_memory``, and rlpyt's way of sharing
  (``multiprocessing.RawArray`` per field, as ``rlpyt.utils.buffer.np_mp_array``
  does under fork). Metrics: seconds to allocate, to fill, in total, and the
  growth of the process's peak RSS.
* ``handoff``: send the filled buffer through a ``multiprocessing`` queue to a
  running ``forkserver`` worker, which writes one slot and replies. Reference:
  the same buffer without shared memory (pickled by value). Metrics: seconds
  from ``put`` to the reply, and the sender's peak RSS growth.

Lower is better for every metric.

CASES   the case names, in running order
main    run the cases, print the table, optionally write JSON
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from namedschema.apps.harness import (
    ATARI_BYTES_PER_TRANSITION,
    ATARI_FIELDS,
    atari_example,
    peak_rss,
)

from .common import Result, finish, result, run_in_child, topic_parser

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    from namedschema._core.schema import DynamicNamedTuple

__all__ = ["CASES", "main"]

CASES = ("alloc_fill", "handoff")
MIB = 2**20
BATCH = 16
ROW_BYTES = ATARI_BYTES_PER_TRANSITION

ALLOC_CONTENDERS = ("np.zeros", "buffer", "buffer shared", "mp.RawArray (rlpyt)")
ALLOC_TARGETS = {"buffer": "<= 1.1", "buffer shared": "<= 1.5"}
RSS_TARGETS = {"buffer": "<= 1.05", "buffer shared": "<= 1.05"}
HANDOFF_CONTENDERS = ("by value", "shared")


# ---------------------------------------------------------------- child side

def _example() -> DynamicNamedTuple:
    from namedschema import namedtuple
    from namedschema.buffer import buffer_from_example  # noqa: F401 - imported before timing
    return atari_example(namedtuple("Step", ATARI_FIELDS))


def _alloc_fill(contender: str, steps: int) -> dict[str, float]:
    import ctypes
    import multiprocessing as mp
    import time

    import numpy as np

    from namedschema.buffer import buffer_from_example
    example = _example()
    before = peak_rss()
    start = time.perf_counter()
    buf: np.ndarray | DynamicNamedTuple    # one array, or one per field
    if contender == "np.zeros":
        buf = np.zeros(steps * BATCH * ROW_BYTES, np.uint8)
    elif contender in ("buffer", "buffer shared"):
        buf = buffer_from_example(example, (steps, BATCH),
                                  share_memory=contender == "buffer shared")
    elif contender == "mp.RawArray (rlpyt)":
        fields = []
        for value in example:
            a = np.asarray(value)
            shape = (steps, BATCH) + a.shape
            raw = mp.RawArray(ctypes.c_char, int(np.prod(shape)) * a.dtype.itemsize)
            fields.append(np.frombuffer(memoryview(raw).cast("B"), dtype=a.dtype).reshape(shape))
        buf = type(example)(*fields)
    else:
        raise ValueError(contender)
    allocated = time.perf_counter()
    if isinstance(buf, np.ndarray):
        buf[...] = 1
    else:
        for field in buf:
            field[...] = 1
    filled = time.perf_counter()
    return {"alloc": allocated - start, "fill": filled - allocated,
            "total": filled - start, "rss_growth": peak_rss() - before}


def _handoff_worker(inbox: Queue[Any], outbox: Queue[float]) -> None:
    while (buf := inbox.get()) is not None:
        buf.reward[0, 0] = 7.0
        outbox.put(float(buf.observation[-1, -1, -1, -1]))


def _handoff(contender: str, steps: int) -> dict[str, float]:
    import multiprocessing as mp
    import time

    from namedschema.buffer import buffer_from_example
    ctx = mp.get_context("forkserver")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    worker = ctx.Process(target=_handoff_worker, args=(inbox, outbox))
    worker.start()
    shared = contender == "shared"
    # Warm up with a one-step buffer: the worker's imports and the
    # queue's and fd-passing threads' start-up are not part of a hand-off.
    warm = buffer_from_example(_example(), (1, 1), share_memory=shared)
    warm.observation[...] = 1
    inbox.put(warm)
    outbox.get(timeout=600)
    buf = buffer_from_example(_example(), (steps, BATCH), share_memory=shared)
    for field in buf:
        field[...] = 1
    before = peak_rss()
    start = time.perf_counter()
    inbox.put(buf)
    seen = outbox.get(timeout=600)
    elapsed = time.perf_counter() - start
    growth = peak_rss() - before
    inbox.put(None)
    worker.join(60)
    if seen != 1.0 or worker.exitcode != 0:
        raise RuntimeError(f"handoff worker failed: saw {seen}, exit {worker.exitcode}")
    return {"seconds": elapsed, "rss_growth": growth,
            "child_write_seen": bool(buf.reward[0, 0] == 7.0)}


def _child(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    run = _alloc_fill if spec["case"] == "alloc_fill" else _handoff
    print(json.dumps(run(spec["contender"], spec["steps"])))
    return 0


# ---------------------------------------------------------------- parent side

def _run_child(spec: dict[str, Any]) -> dict[str, Any]:
    return run_in_child("buffer", spec, f"{spec['case']} {spec['contender']}")


def _best(case: str, contenders: Iterable[str], steps: int, rounds: int,
          key: str) -> dict[str, dict[str, Any]]:
    """Each contender's best round (lowest ``key``) over alternating rounds.

    The order rotates every round, so no contender always runs right after the
    one that just released a gigabyte (the kernel's reclaim would land on it).
    """
    best: dict[str, dict[str, Any]] = {}
    contenders = list(contenders)
    for r in range(rounds):
        k = r % len(contenders)
        for contender in contenders[k:] + contenders[:k]:
            out = _run_child({"case": case, "contender": contender, "steps": steps})
            if contender not in best or out[key] < best[contender][key]:
                best[contender] = out
    return best


def _rows(case: str, values: dict[str, dict[str, Any]], reference: str,
          metrics: list[tuple[str, str, float]],
          targets: dict[str, dict[str, str]]) -> list[Result]:
    rows: list[Result] = []
    for metric, unit, scale in metrics:
        ref = values[reference][metric] * scale
        for contender, out in values.items():
            is_ref = contender == reference
            rows.append(result(
                case, contender, metric, out[metric] * scale, unit,
                reference=None if is_ref else reference, reference_value=ref,
                target=None if is_ref else targets.get(metric, {}).get(contender)))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the buffer benchmark; see the module docstring.

    Args:
        argv: command-line arguments (``--quick``, ``--json FILE``, ``--cases``,
            ``--rounds N``).

    Returns:
        0 on success.
    """
    parser = topic_parser("buffer", __doc__.split("\n\n")[0], CASES)
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds per contender (best is kept; default 5, quick 2)")
    args = parser.parse_args(argv)
    size = (16 if args.quick else 1024) * MIB
    steps = max(size // (ROW_BYTES * BATCH), 1)
    rounds = args.rounds or (2 if args.quick else 5)
    data = steps * BATCH * ROW_BYTES
    results: list[Result] = []
    notes = [f"buffer: ({steps}, {BATCH}) steps, {data / MIB:.0f} MiB; best of {rounds} "
             "alternating rounds, each contender in a fresh process",
             "rss_growth: growth of the process's peak RSS during the operation "
             "(shared pages count once they are touched)",
             "fill times are dominated by page faults and vary several-fold between runs "
             "on VMs (transparent huge pages may or may not be available): compare the "
             "best of many rounds"]
    if "alloc_fill" in args.cases:
        values = _best("alloc_fill", ALLOC_CONTENDERS, steps, rounds, "total")
        results += _rows("alloc_fill", values, "np.zeros",
                         [("alloc", "s", 1), ("fill", "s", 1), ("total", "s", 1),
                          ("rss_growth", "MiB", 1 / MIB)],
                         {"total": ALLOC_TARGETS, "rss_growth": RSS_TARGETS})
    if "handoff" in args.cases:
        values = _best("handoff", HANDOFF_CONTENDERS, steps, rounds, "seconds")
        results += _rows("handoff", values, "by value",
                         [("seconds", "s", 1), ("rss_growth", "MiB", 1 / MIB)],
                         {"seconds": {"shared": "<= 0.1"}})
        notes.append("handoff: 'shared' sends the segment's file descriptor, not the data; "
                     "the worker's write was seen by the sender: "
                     f"{bool(values['shared'].get('child_write_seen'))}")
    return finish("buffer", args, results, notes)


if __name__ == "__main__":
    sys.exit(main())
