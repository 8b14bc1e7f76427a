"""Background checkpoint benchmarks: how long ``save(..., background=True)`` stops the caller.

Cases, each in a fresh process:

* ``stall``: an Atari-like buffer (uint8 84x84 frames plus action, reward,
  done; 8 GiB, or 256 MiB with ``--quick``) made by ``buffer_from_example``
  and filled. The first, full, background checkpoint: the time ``save``
  held the caller (the stall) against the time its writer took (same run).
  Then 1% of the rows overwritten, as a ring segment and at random rows,
  each followed by a background incremental save (three of each): the
  stall against the 50 ms budget and against the writer's time.
* ``dqn_loop``: a DQN-like learner (Nature-DQN convolutional network, batch
  32, Adam, one torch thread) on a 1e6-row frame buffer (20,000 with
  ``--quick``) appending 4 frames per step. After a first, full checkpoint
  (its writer done), intervals of ``--every`` seconds (60; 5 with
  ``--quick``) in pairs, one without a checkpoint and one starting with a
  checkpoint through the writer ``namedschema.rlpyt.resumable`` uses
  (incremental, in the background; the interval lasts until that writer is
  done), in alternating order so that drift cancels, ``--window`` seconds of
  each. Throughput ratio (target at least 0.99: one checkpoint a minute) and
  the stall of every checkpoint, optionally plotted over the run
  (``--plot FILE``).

Run it under ``flock /tmp/namedschema-bigmem.lock`` at full size.

CASES   the case names, in running order
main    run the cases, print the table, optionally write JSON
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import time
from typing import Any

from .common import (
    Result,
    finish,
    missing_extra_note,
    progress,
    result,
    run_in_child,
    topic_parser,
)

__all__ = ["CASES", "main"]

CASES = ("stall", "dqn_loop")
MIB = 2**20
ROW_BYTES = 84 * 84 + 8 + 4 + 1
STALL_BUDGET_MS = 50.0
FIRST_BUDGET_MS = 250.0


def _buffer(rows: int) -> Any:
    import numpy as np

    from namedschema import NamedArrayTupleSchema
    from namedschema.buffer import buffer_from_example
    Samples = NamedArrayTupleSchema("Samples", "observation action reward done")
    example = Samples(np.zeros((84, 84), np.uint8), np.int64(0), np.float32(0), False)
    buf = buffer_from_example(example, rows)
    step = max(1, 2**28 // (84 * 84))
    frame = np.arange(84 * 84, dtype=np.uint8).reshape(84, 84)
    for start in range(0, rows, step):     # every page touched, as a full buffer is
        buf.observation[start:start + step] = frame
    buf.action[:] = np.arange(rows)
    return buf


def _stall_child(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from namedschema import checkpoint
    rows, path = spec["rows"], os.path.join(spec["dir"], "stall.nsb")
    buf = _buffer(rows)
    obj = {"buffer": buf, "cursor": 0}
    handle = checkpoint.save(obj, path, incremental=True, background=True)
    handle.wait()
    out: dict[str, Any] = {"first": [handle.stall, (handle.ended or 0.0) - handle.started]}
    rng = np.random.default_rng(0)
    n = max(1, rows // 100)
    cursor = 0
    for kind in ("ring", "random", "ring", "random", "ring", "random"):
        if kind == "ring":
            where: Any = np.arange(cursor, cursor + n) % rows
            cursor = (cursor + n) % rows
        else:
            where = rng.choice(rows, n, replace=False)
        buf.observation[where] = rng.integers(0, 255, dtype=np.uint8)
        buf.reward[where] += 1.0
        obj["cursor"] = cursor
        handle = checkpoint.save(obj, path, incremental=True, background=True)
        record = handle.wait()
        out.setdefault(kind, []).append([handle.stall, (handle.ended or 0.0) - handle.started,
                                         record.kind if record else None])
    return out


def _dqn_child(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    from namedschema.rlpyt.resume.checkpoint_writer import CheckpointWriter
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows, every, window = spec["rows"], spec["every"], spec["window"]
    buf = _buffer(rows)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(4, 32, 8, 4), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 4, 2),
        torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, 1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(3136, 512), torch.nn.ReLU(), torch.nn.Linear(512, 6))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    rng = np.random.default_rng(0)
    writer = CheckpointWriter(os.path.join(spec["dir"], "dqn.nsc"), {"kind": "bench"},
                              incremental=True, background=True)
    state = {"t": 0}

    def step() -> None:
        t = state["t"]
        at = np.arange(t * 4, t * 4 + 4) % rows
        buf.observation[at] = np.uint8(t % 251)
        buf.reward[at] = 1.0
        idx = rng.integers(0, rows - 4, 32)
        frames = np.stack([buf.observation[idx + k] for k in range(4)], axis=1)
        x = torch.from_numpy(frames).float().div_(255.0)
        q = model(x)
        loss = (q.max(dim=1).values - torch.from_numpy(buf.reward[idx])).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state["t"] = t + 1

    def save() -> float:
        began = time.perf_counter()
        writer.save({"buffer": buf, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "t": state["t"]})
        return time.perf_counter() - began

    def run(seconds: float) -> int:
        end, steps = time.perf_counter() + seconds, 0
        while time.perf_counter() < end:
            step()
            steps += 1
        return steps

    for _ in range(20):               # warm up (allocations, kernels)
        step()
    origin = time.perf_counter()
    stalls = [[0.0, save()]]          # the first checkpoint: full, by fork
    run(every)                        # its writer runs meanwhile (not counted)
    writer.wait()
    # Then pairs of intervals, one without a checkpoint and one starting with a
    # checkpoint, in alternating order, so that drift over the run cancels.
    totals = {"plain": [0, 0.0], "checkpointed": [0, 0.0]}
    for k in range(max(1, int(window // every))):
        for side in (("plain", "checkpointed") if k % 2 == 0 else ("checkpointed", "plain")):
            began = time.perf_counter()
            if side == "checkpointed":
                stalls.append([began - origin, save()])
            steps = run(every - (time.perf_counter() - began))
            if side == "checkpointed":   # its writer's cost stays in its own interval
                while writer.pending is not None and not writer.pending.done():
                    step()
                    steps += 1
            totals[side][0] += steps
            totals[side][1] += time.perf_counter() - began
    writer.wait()
    return {"plain": totals["plain"], "checkpointed": totals["checkpointed"], "stalls": stalls}


def _child(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    out = _stall_child(spec) if spec["case"] == "stall" else _dqn_child(spec)
    print(json.dumps(out))


def _rows(case: str, args: Any) -> list[Result]:
    out: list[Result] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        if case == "stall":
            rows = int(args.size_mib * MIB // ROW_BYTES)
            spec = {"case": case, "rows": rows, "dir": directory}
            got = run_in_child("background", spec, f"stall ({args.size_mib} MiB)")
            stall, write = got["first"]
            out.append(result("first_full", "writer", "time", write * 1e3, "ms"))
            out.append(result("first_full", "stall", "time", stall * 1e3, "ms",
                              reference="writer", reference_value=write * 1e3))
            out.append(result("first_full", "stall_vs_budget", "time", stall * 1e3, "ms",
                              reference="250 ms", reference_value=FIRST_BUDGET_MS,
                              target="<= 1"))
            for kind in ("ring", "random"):
                stalls = [s for s, _w, _k in got[kind]]
                writes = [w for _s, w, _k in got[kind]]
                kinds = {k for _s, _w, k in got[kind]}
                worst = max(stalls) * 1e3
                case_name = f"{kind}_1pct"
                out.append(result(case_name, "writer", "time", min(writes) * 1e3, "ms",
                                  note=f"{case_name}: save kinds {sorted(map(str, kinds))}"))
                out.append(result(case_name, "stall", "time", worst, "ms",
                                  reference="writer", reference_value=min(writes) * 1e3))
                out.append(result(case_name, "stall_vs_budget", "time", worst, "ms",
                                  reference="50 ms", reference_value=STALL_BUDGET_MS,
                                  target="<= 1"))
        elif importlib.util.find_spec("torch") is None:
            args.skip_notes.append(missing_extra_note(
                "background", [case], "torch", "its learner is a torch network"))
        else:
            rows = args.rows
            spec = {"case": case, "rows": rows, "dir": directory, "every": args.every,
                    "window": args.window}
            got = run_in_child("background", spec, f"dqn_loop ({rows} rows)", timeout=7200)
            plain = got["plain"][0] / got["plain"][1]
            ckpt = got["checkpointed"][0] / got["checkpointed"][1]
            out.append(result("dqn_loop", "no_checkpoints", "throughput", plain, "steps/s"))
            out.append(result("dqn_loop", "resumable_background", "throughput", ckpt,
                              "steps/s", reference="no_checkpoints", reference_value=plain,
                              target=">= 0.99"))
            stalls = got["stalls"]
            if stalls:
                out.append(result("dqn_loop", "first_checkpoint_stall", "time",
                                  stalls[0][1] * 1e3, "ms"))
                if len(stalls) > 1:
                    out.append(result("dqn_loop", "later_checkpoint_stall_max", "time",
                                      max(s for _t, s in stalls[1:]) * 1e3, "ms"))
            if args.plot:
                _plot(stalls, args.plot, rows)
            if args.stalls_json:
                with open(args.stalls_json, "w") as f:
                    json.dump(got, f)
    return out


def _plot(stalls: list[list[float]], path: str, rows: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.2))
    xs = [t for t, _s in stalls]
    ys = [s * 1e3 for _t, s in stalls]
    ax.plot(xs, ys, "o-")
    ax.axhline(STALL_BUDGET_MS, color="grey", linestyle="--", linewidth=1)
    ax.set_ylim(0, max([STALL_BUDGET_MS, *ys]) * 1.15)
    ax.set_xlabel("time in the run (s)")
    ax.set_ylabel("learner stall per checkpoint (ms)")
    ax.set_title(f"background checkpoints of a DQN-like learner ({rows:,} frame rows)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--child":
        _child(argv[1:])
        return 0
    parser = topic_parser("background", __doc__.split("\n\n")[0], CASES)
    parser.add_argument("--size-mib", type=int, default=None,
                        help="stall: buffer size (8192; 256 with --quick)")
    parser.add_argument("--rows", type=int, default=None,
                        help="dqn_loop: frame rows (1,000,000; 20,000 with --quick)")
    parser.add_argument("--every", type=float, default=None,
                        help="dqn_loop: seconds between checkpoints (60; 5 with --quick)")
    parser.add_argument("--window", type=float, default=None,
                        help="dqn_loop: seconds of each window (300; 20 with --quick)")
    parser.add_argument("--plot", help="dqn_loop: write the stall-per-checkpoint plot here")
    parser.add_argument("--stalls-json", help="dqn_loop: write the raw timings here")
    parser.add_argument("--dir", default=None, help="where the checkpoints go")
    args = parser.parse_args(argv)
    quick = args.quick
    args.size_mib = args.size_mib or (256 if quick else 8192)
    args.rows = args.rows or (20_000 if quick else 1_000_000)
    args.every = args.every or (5.0 if quick else 60.0)
    args.window = args.window or (20.0 if quick else 300.0)
    args.skip_notes = []
    results = []
    cases = args.cases or CASES
    for number, case in enumerate(cases, 1):
        progress("background", f"{case} ({number}/{len(cases)}) ...")
        results += _rows(case, args)
    notes = ["stall: how long save(..., background=True) held the caller; writer: the "
             "background writer's time, same run", *args.skip_notes]
    return finish("background", args, results, notes)


if __name__ == "__main__":
    sys.exit(main())
