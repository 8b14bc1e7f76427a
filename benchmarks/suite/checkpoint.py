"""Checkpoint benchmarks: namedschema.save/load of a replay buffer against the usual ways.

An Atari-like buffer (``namedschema.apps.harness.atari_transitions``: uint8 84x84 observations plus
int32 action, float32 reward and bool done; 1 GiB, or 32 MiB with ``--quick``) is saved and loaded
by each contender in a fresh subprocess; contenders alternate round by round,
each round starting one contender later, and the best of the rounds is kept.
Every save has the same durability: a temporary file, ``fsync``, rename.
Loads read a warm page cache.

Save times are compared with raw writes of the same bytes (``raw``: each
array's memory written in 16 MiB pieces, as namedschema writes them); load
times with ``np.load`` of one ``.npy`` file per field (``np.load``). Memory is
the growth of the child's peak RSS during the operation (for full loads, beyond
the size of the data itself). Contenders from packages that are not installed
(joblib) are skipped with a note.

CASES   the case names, in running order
main    run the cases, print the table, optionally write JSON
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from namedschema.apps.harness import (
    ATARI_BYTES_PER_TRANSITION,
    ATARI_DTYPES,
    ATARI_FIELDS,
    ATARI_FRAME,
    atari_transitions,
    peak_rss,
)

from .common import Result, finish, progress, result, rotated, run_in_child, topic_parser

if TYPE_CHECKING:
    from namedschema._core.schema import DynamicNamedArrayTuple

__all__ = ["CASES", "main"]

CASES = ("save", "load")

SAVERS = ("raw", "namedschema", "namedschema incremental", "np.save", "pickle4", "pickle5", "np.savez", "joblib")
LOADERS = ("np.load", "raw", "namedschema", "namedschema mmap", "np.load mmap",
           "pickle4", "pickle5", "np.savez", "joblib")
# Contenders that need a package numpy and the standard library do not provide.
OPTIONAL = {"joblib": "joblib"}
ROW_BYTES = ATARI_BYTES_PER_TRANSITION
RAW_CHUNK = 16 * 2**20
MIB = 2**20

# Goals: saves at 0.9x of raw throughput (time ratio at most 1.11; issue 20),
# loads at 0.8x of np.load's (at most 1.25); namedschema's extra memory under 64 MiB.
SAVE_TARGET = "<= 1.11"
TIME_TARGET = "<= 1.25"
MEMORY_LIMIT_MIB = 64


# ---------------------------------------------------------------- child side

def _buffer(rows: int) -> DynamicNamedArrayTuple:
    from namedschema import NamedArrayTupleSchema
    Samples = NamedArrayTupleSchema("Samples", ATARI_FIELDS)
    return atari_transitions(Samples, rows)  # a fixed pattern that touches every page


def _durable(tmp: str, path: str) -> None:
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _save(contender: str, samples: DynamicNamedArrayTuple, path: str) -> None:
    import pickle

    import numpy as np
    tmp = path + ".tmp"
    fields = samples._asdict()
    if contender == "raw":
        with open(tmp, "wb", buffering=0) as f:
            for arr in samples:
                view = arr.data.cast("B")
                # The same write sizes as namedschema's, so only the work around them differs.
                for start in range(0, view.nbytes, RAW_CHUNK):
                    piece = view[start:start + RAW_CHUNK]
                    while piece.nbytes:
                        piece = piece[f.write(piece):]
    elif contender == "namedschema":
        from namedschema import checkpoint
        checkpoint.save(samples, path)
        return
    elif contender == "namedschema incremental":  # the first, full save of incremental ones
        from namedschema import checkpoint
        from namedschema.checkpoint import _incremental as incremental
        if os.path.exists(path):
            os.unlink(path)  # an earlier round's: this one must be a full save
        checkpoint.save(samples, path, incremental=True)
        incremental.wait(path)
        return
    elif contender == "np.save":
        os.makedirs(path, exist_ok=True)
        for name, arr in fields.items():
            target = os.path.join(path, name + ".npy")
            with open(target + ".tmp", "wb") as f:
                np.save(f, arr)
            _durable(target + ".tmp", target)
        return
    elif contender in ("pickle4", "pickle5"):
        with open(tmp, "wb") as f:
            pickle.dump(fields, f, protocol=int(contender[-1]))
    elif contender == "np.savez":
        with open(tmp, "wb") as f:
            np.savez(f, **fields)
    elif contender == "joblib":
        import joblib
        joblib.dump(fields, tmp)
    _durable(tmp, path)


def _load(contender: str, path: str, rows: int) -> object:
    import pickle

    import numpy as np
    if contender == "np.load":
        return [np.load(os.path.join(path, f + ".npy"))
                for f in ATARI_FIELDS]
    if contender == "np.load mmap":
        return [np.load(os.path.join(path, f + ".npy"), mmap_mode="r")
                for f in ATARI_FIELDS]
    if contender == "raw":
        out = [np.empty((rows, *ATARI_FRAME) if f == "observation" else rows,
                        ATARI_DTYPES[f]) for f in ATARI_FIELDS]
        with open(path, "rb", buffering=0) as raw_file:
            for arr in out:
                view = arr.data.cast("B")
                while view.nbytes:
                    view = view[raw_file.readinto(view):]
        return out
    if contender == "namedschema":
        from namedschema import checkpoint
        return checkpoint.load(path)
    if contender == "namedschema mmap":
        from namedschema import checkpoint
        return checkpoint.load(path, mmap_mode="r")
    if contender in ("pickle4", "pickle5"):
        with open(path, "rb") as f:
            return pickle.load(f)
    if contender == "np.savez":
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    if contender == "joblib":
        import joblib
        return joblib.load(path)
    raise ValueError(contender)


def _child(argv: list[str]) -> int:
    import time

    spec = json.loads(argv[0])
    rows, path, contender = spec["rows"], spec["path"], spec["contender"]
    # Import everything first so imports do not count as the operation's memory.
    import pickle  # noqa: F401

    import numpy as np  # noqa: F401

    import namedschema.checkpoint  # noqa: F401
    if contender in OPTIONAL:
        importlib.import_module(OPTIONAL[contender])
    samples = _buffer(rows) if spec["op"] == "save" else None
    before = peak_rss()
    start = time.perf_counter()
    if spec["op"] == "save":
        _save(contender, cast("DynamicNamedArrayTuple", samples), path)  # made: op is save
    else:
        loaded = _load(contender, path, rows)
    elapsed = time.perf_counter() - start
    after = peak_rss()
    del samples
    if spec["op"] == "save":
        size = (sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
                if os.path.isdir(path) else os.path.getsize(path))
    else:
        size = 0
        del loaded
    print(json.dumps({"seconds": elapsed, "rss_growth": after - before, "size": size}))
    return 0


# ---------------------------------------------------------------- parent side

def _run_child(spec: dict[str, Any]) -> dict[str, Any]:
    return run_in_child("checkpoint", spec, f"{spec['op']} {spec['contender']}")


def _file_for(directory: str, contender: str) -> str:
    name = {"namedschema mmap": "namedschema", "np.load": "np.save",
            "np.load mmap": "np.save"}.get(contender, contender)
    return os.path.join(directory, name.replace(".", "_").replace(" ", "_") + ".bin")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: hidden by sys.modules[name] = None
        return False


def _installed(contenders: Iterable[str], notes: list[str]) -> tuple[str, ...]:
    """The contenders whose optional package is importable; a note for each one skipped."""
    kept: list[str] = []
    for contender in contenders:
        module = OPTIONAL.get(contender)
        if module is not None and not _importable(module):
            note = f"{contender} rows skipped: {module} is not installed"
            if note not in notes:
                notes.append(note)
            continue
        kept.append(contender)
    return tuple(kept)


def main(argv: list[str] | None = None) -> int:
    """Run the checkpoint benchmark; see the module docstring.

    Args:
        argv: command-line arguments (``--quick``, ``--json FILE``, ``--cases``,
            ``--rounds N``, ``--size-mib N``, ``--dir DIR``).

    Returns:
        0 on success.
    """
    parser = topic_parser("checkpoint", __doc__.split("\n\n")[0], CASES)
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds per contender (best is kept; default 3, quick 2)")
    parser.add_argument("--size-mib", type=int, default=None,
                        help="buffer size in MiB (default 1024, quick 32)")
    parser.add_argument("--dir", default=None, help="directory for the files (default: temp)")
    args = parser.parse_args(argv)
    size = (args.size_mib or (32 if args.quick else 1024)) * MIB
    rows = max(size // ROW_BYTES, 1)
    rounds = args.rounds or (2 if args.quick else 3)
    data_bytes = rows * ROW_BYTES
    results: list[Result]
    results, notes = [], [f"buffer: {rows} rows, {data_bytes / MIB:.0f} MiB; "
                          f"best of {rounds} alternating rounds, each in a fresh process"]
    savers, loaders = _installed(SAVERS, notes), _installed(LOADERS, notes)
    with tempfile.TemporaryDirectory(prefix="namedschema-ckpt-", dir=args.dir) as tmp:
        saved: dict[str, dict[str, Any]] = {}
        # Loads need every file, so saves always run (their rows are reported if asked).
        for round_ in range(rounds):
            progress("checkpoint", f"save round {round_ + 1}/{rounds} ({len(savers)} savers) ...")
            for contender in rotated(savers, round_):
                out = _run_child({"op": "save", "contender": contender, "rows": rows,
                                  "path": _file_for(tmp, contender)})
                best = saved.get(contender)
                if best is None or out["seconds"] < best["seconds"]:
                    saved[contender] = out
        if "save" in args.cases:
            ref = saved["raw"]["seconds"]
            for contender, out in saved.items():
                is_ref = contender == "raw"
                results.append(result("save", contender, "time", out["seconds"], "s",
                                      reference=None if is_ref else "raw", reference_value=ref,
                                      target=SAVE_TARGET if contender.startswith("namedschema")
                                      else None))
                results.append(result("save", contender, "peak_extra_rss",
                                      max(out["rss_growth"], 0) / MIB, "MiB",
                                      reference=None if is_ref else "raw",
                                      reference_value=max(saved["raw"]["rss_growth"], 0) / MIB))
                results.append(result("save", contender, "file_size", out["size"] / MIB, "MiB",
                                      reference=None if is_ref else "raw",
                                      reference_value=saved["raw"]["size"] / MIB))
        if "load" in args.cases:
            loaded: dict[str, dict[str, Any]] = {}
            for round_ in range(rounds):
                progress("checkpoint",
                         f"load round {round_ + 1}/{rounds} ({len(loaders)} loaders) ...")
                for contender in rotated(loaders, round_):
                    out = _run_child({"op": "load", "contender": contender, "rows": rows,
                                      "path": _file_for(tmp, contender)})
                    best = loaded.get(contender)
                    if best is None or out["seconds"] < best["seconds"]:
                        loaded[contender] = out
            ref = loaded["np.load"]["seconds"]
            for contender, out in loaded.items():
                is_ref = contender == "np.load"
                mapped = contender.endswith("mmap")
                results.append(result("load", contender, "open_time" if mapped else "time",
                                      out["seconds"], "s",
                                      reference=None if is_ref else "np.load",
                                      reference_value=ref,
                                      target=TIME_TARGET if contender == "namedschema" else None))
                extra = out["rss_growth"] - (0 if mapped else data_bytes)
                ref_extra = loaded["np.load"]["rss_growth"] - data_bytes
                results.append(result("load", contender, "peak_extra_rss",
                                      max(extra, 0) / MIB, "MiB",
                                      reference=None if is_ref else "np.load",
                                      reference_value=max(ref_extra, 0) / MIB))
    ns_mem = [r["value"] for r in results
              if r["contender"].startswith("namedschema") and r["metric"] == "peak_extra_rss"]
    if ns_mem:
        notes.append(f"namedschema peak extra RSS: max {max(ns_mem):.1f} MiB "
                     f"(goal < {MEMORY_LIMIT_MIB} MiB): "
                     f"{'met' if max(ns_mem) < MEMORY_LIMIT_MIB else 'MISSED'}")
    notes.append("time ratios: lower is better; 1.25 = 0.8x the reference's throughput; "
                 "memory ratios are n/a where the reference grew by 0")
    return finish("checkpoint", args, results, notes)


if __name__ == "__main__":
    sys.exit(main())
