#!/usr/bin/env python3
"""Compressed checkpoints at the seed's scale: a 1e6-row buffer of Pong frames.

``benchmarks/bench_compression.py`` measures every target of issue 32 on a buffer that
fits beside two copies of itself (256 MiB to 1 GiB). This script measures them once at
the scale the issue names: ``--rows`` (default 1,000,000) 84x84 ``uint8`` frames, 6.6 GiB,
as the observation field of rlpyt's, SB3's and CleanRL's DQN replay buffers holds them.
The frames are real Pong frames (ALE) when ale-py and OpenCV are installed, repeated to
fill the rows; chunks are compressed independently, so repeating does not raise the ratio.

Measured in one run, each ratio against its reference from the same run:

* file size of ``compression="zstd"`` against the data's bytes (target: at most 1/20);
* full compressed save against a raw save with fsync (``compression=None``; target 1.0x);
* load of the compressed file against ``np.load`` of the same frames from the page cache
  (target 2.0x), with every compressed chunk's checksum checked (as every load does) and
  with ``verify=True`` (the decompressed bytes' checksums too), and the load's peak anonymous memory beyond the array it returns
  (target 64 MiB);
* an incremental compressed save after 1% of the rows changed as a ring buffer writes
  them, against the full compressed save (target 1/10);
* the stall of a background incremental compressed save: the first, full one (250 ms) and
  one after a 1% ring segment (50 ms).

It needs the buffer once in memory, once more while a load's result is alive, plus the
page cache of one raw file: about 14 GiB of memory and 7 GiB of disk at the default size.

    python benchmarks/bench_compression_seed.py [--rows 1000000] [--dir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FRAME = (84, 84)


def _anon() -> int:
    """This process's anonymous resident memory, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def _peak_while(fn):
    """``fn()``'s result, its time and the peak anonymous memory it added (sampled)."""
    base, peak, stop = _anon(), [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _anon())
            stop.wait(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    began = time.perf_counter()
    try:
        out = fn()
    finally:
        took = time.perf_counter() - began
        stop.set()
        watcher.join()
    return out, took, max(peak[0], _anon()) - base


def _fill(rows: int, directory: str) -> tuple[np.ndarray, str]:
    """``rows`` frames: real Pong frames repeated when ale-py is there, else synthetic."""
    from bench_compression import pong_frames, synthetic_frames
    try:
        base, what = pong_frames(6000), "real Pong frames (ALE, 6000 repeated)"
    except ImportError:
        base, what = synthetic_frames(6000), "synthetic Pong-like frames"
    out = np.empty((rows, *FRAME), np.uint8)
    for start in range(0, rows, len(base)):
        stop = min(rows, start + len(base))
        out[start:stop] = base[:stop - start]
    return out, what


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays are equal, compared in slices (``np.array_equal`` would make a
    boolean array as large as the buffer: 6.6 GiB more at the default size)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    step = max(1, (64 << 20) // max(1, a[:1].nbytes))
    return all(np.array_equal(a[i:i + step], b[i:i + step]) for i in range(0, len(a), step))


def _timed_save(obj, path: str, **kw) -> float:
    import namedschema
    began = time.perf_counter()
    namedschema.save(obj, path, **kw)
    return time.perf_counter() - began


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import namedschema
    from namedschema.checkpoint import _incremental as inc

    directory = args.dir or tempfile.mkdtemp(prefix="namedschema-bench-seed-")
    os.makedirs(directory, exist_ok=True)
    obs, what = _fill(args.rows, directory)
    gib = obs.nbytes / 2**30
    print(f"{args.rows} rows of 84x84 uint8 = {gib:.2f} GiB of {what}", flush=True)
    raw, npy, zst = (os.path.join(directory, n) for n in ("raw.nsb", "raw.npy", "zstd.nsb"))
    out: dict = {"rows": args.rows, "gib": gib, "frames": what}

    # A raw save and a compressed save, turns alternated, best of two each.
    raw_s, zst_s = [], []
    for _ in range(2):
        raw_s.append(_timed_save({"obs": obs}, raw))
        zst_s.append(_timed_save({"obs": obs}, zst, compression="zstd"))
    os.unlink(raw)
    out["raw_save_s"], out["zstd_save_s"] = min(raw_s), min(zst_s)
    out["file_ratio"] = os.path.getsize(zst) / obs.nbytes
    print(f"file: {os.path.getsize(zst) / 2**20:.1f} MiB = {out['file_ratio']:.4f}x the data "
          f"(target <= 0.05x)")
    print(f"full save: zstd {out['zstd_save_s']:.2f} s, raw + fsync {out['raw_save_s']:.2f} s: "
          f"{out['zstd_save_s'] / out['raw_save_s']:.2f}x (target <= 1.0x)", flush=True)

    # Loads: np.load of the frames from the page cache against the compressed file.
    np.save(npy, obs)
    np.load(npy)                                          # warm the cache once
    npy_s = min(_peak_while(lambda: np.load(npy))[1] for _ in range(2))
    # ``load`` checks every compressed chunk's stored checksum; verify=True also takes the
    # checksum of every decompressed byte (np.load checks nothing). Best of two each.
    timed: dict[bool, float] = {}
    extra = 0
    for _ in range(2):
        for verify in (False, True):
            loaded, seconds, peak = _peak_while(lambda v=verify: namedschema.load(zst, verify=v))
            same = _same(loaded["obs"], obs)
            del loaded
            if not same:
                raise SystemExit("compressed load differs from the data")
            timed[verify] = min(seconds, timed.get(verify, seconds))
            extra = max(extra, peak)
    os.unlink(npy)
    out.update(npy_load_s=npy_s, zstd_load_s=timed[False], zstd_load_verify_s=timed[True],
               load_extra_mib=(extra - obs.nbytes) / 2**20)
    print(f"load: zstd {timed[False]:.2f} s (verify=True {timed[True]:.2f} s), np.load from "
          f"cache {npy_s:.2f} s: {timed[False] / npy_s:.2f}x ({timed[True] / npy_s:.2f}x) "
          f"(target <= 2.0x); memory beyond the array {out['load_extra_mib']:.1f} MiB "
          "(target <= 64)", flush=True)

    # Incremental compressed saves after a 1% ring segment, and background stalls.
    k, cursor = args.rows // 100, 0
    namedschema.save({"obs": obs}, zst, incremental=True, compression="zstd")
    inc.wait(zst)
    ring = []
    for step in range(2):
        rows = np.arange(cursor, cursor + k) % args.rows
        cursor += k
        obs[rows] = obs[(rows + 1000 + step) % args.rows]
        ring.append(_timed_save({"obs": obs}, zst, incremental=True, compression="zstd"))
        inc.wait(zst)
        kind = namedschema.inspect(zst).last_save.kind
    if not _same(namedschema.load(zst, verify=True)["obs"], obs):
        raise SystemExit("incremental round trip failed")
    out["ring_s"], out["ring_kind"] = min(ring), kind
    out["ring_ratio"] = out["ring_s"] / out["zstd_save_s"]
    print(f"incremental, 1% ring: {out['ring_s']:.3f} s ({kind}) = {out['ring_ratio']:.3f}x "
          f"the full compressed save (target <= 0.1x)", flush=True)
    bg = os.path.join(directory, "bg.nsb")
    handle = namedschema.save({"obs": obs}, bg, incremental=True, background=True,
                              compression="zstd")
    out["stall_first_ms"] = 1000 * handle.stall
    handle.wait()
    stalls = []
    for step in range(2):
        rows = np.arange(cursor, cursor + k) % args.rows
        cursor += k
        obs[rows] = obs[(rows + 2000 + step) % args.rows]
        handle = namedschema.save({"obs": obs}, bg, incremental=True, background=True,
                                  compression="zstd")
        stalls.append(1000 * handle.stall)
        handle.wait()
    out["stall_ring_ms"] = max(stalls)
    if not _same(namedschema.load(bg, verify=True)["obs"], obs):
        raise SystemExit("background round trip failed")
    print(f"background stall: first {out['stall_first_ms']:.0f} ms (target 250), 1% ring "
          f"{out['stall_ring_ms']:.0f} ms (target 50; worst of 2)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.dir is None:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
