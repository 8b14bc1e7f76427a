#!/usr/bin/env python3
"""Compressed checkpoints against uncompressed ones of the same data, in one run.

Two buffers of ``--mib`` MiB of uint8 84x84 frames:

* ``frames``: Atari frames. Real Pong frames when ale-py (and opencv) are
  installed: ``--pong-frames`` consecutive frames of a random-action Pong game
  (ALE, frameskip 4, grayscale resized to 84x84 as DQN pipelines store them),
  repeated to the size asked for; else synthetic frames (a flat background,
  two paddles and a ball). Chunks are compressed independently (4 MiB, about
  600 frames each), so repeating the frames does not raise the ratio.
* ``random``: uniformly random bytes, which do not compress.

For each buffer and round (``--rounds``, turns interleaved) it saves the
buffer uncompressed and with ``compression=("zstd", level)`` for each level
of ``--levels`` (every save writes a temporary file, fsyncs it, renames it),
then loads each file (from the page cache: it was just written). It keeps the
best time of each and prints the ratios of compressed to uncompressed: file
size, save time, load time (**lower is better**), plus the throughputs.

With ``--incremental`` (the default; ``--no-incremental`` skips it) it then measures
on the frames, at zstd level 1, in the same run:

* ``incremental``: a full compressed save against incremental compressed saves
  (``incremental=True``) after 1% of the rows changed, as a ring buffer writes them
  (one contiguous segment at a moving cursor) and at random rows; ratios are the
  incremental save's time over the best plain full compressed save
  (``save(..., compression="zstd")``) of the same run (target: at most 1/10);
* ``background``: the stall of ``save(..., incremental=True, background=True,
  compression="zstd")`` (the time until it returns): the first, full save (target
  250 ms) and the 1% saves after it (target 50 ms), each waited for before the next.

    python benchmarks/bench_compression.py [--mib 256] [--rounds 3] [--levels 1 3]
        [--source auto|pong|synthetic] [--dir DIR] [--json FILE] [--no-incremental]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time

import numpy as np

FRAME = (84, 84)


def pong_frames(n: int, seed: int = 0) -> np.ndarray:
    """``n`` consecutive 84x84 grayscale frames of Pong played with random actions."""
    import cv2
    from ale_py import ALEInterface, LoggerMode, roms
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setInt("random_seed", seed)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(roms.get_rom_path("pong"))
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(seed)
    screen = np.empty((210, 160), np.uint8)
    out = np.empty((n, *FRAME), np.uint8)
    for i in range(n):
        action = actions[rng.integers(len(actions))]
        for _ in range(4):
            ale.act(action)
        if ale.game_over():
            ale.reset_game()
        ale.getScreenGrayscale(screen)
        out[i] = cv2.resize(screen, FRAME[::-1], interpolation=cv2.INTER_AREA)
    return out


def synthetic_frames(n: int, seed: int = 0) -> np.ndarray:
    """Pong-like frames: background, two paddles and a ball that move."""
    rng = np.random.default_rng(seed)
    out = np.full((n, *FRAME), 87, np.uint8)
    out[:, :6, :] = 236                                   # the score bar
    left = right = 40
    bx, by, vx, vy = 40.0, 40.0, 1.7, 1.1
    for i in range(n):
        left = int(np.clip(left + rng.integers(-3, 4), 0, 74))
        right = int(np.clip(by - 4, 0, 74))
        bx, by = bx + vx, by + vy
        if not 2 < bx < 80:
            vx = -vx
        if not 8 < by < 82:
            vy = -vy
        out[i, left:left + 8, 4:6] = 147
        out[i, right:right + 8, 78:80] = 92
        out[i, int(by):int(by) + 2, int(bx):int(bx) + 2] = 236
    return out


def frames(rows: int, source: str, pong_rows: int, cache: str) -> tuple[np.ndarray, str]:
    """``rows`` frames of the chosen source, and what they are."""
    base = None
    what = "synthetic Pong-like frames"
    if source in ("auto", "pong"):
        path = os.path.join(cache, f"pong-{pong_rows}.npy")
        try:
            base = np.load(path)
        except OSError:
            try:
                base = pong_frames(pong_rows)
                np.save(path, base)
            except ImportError as exc:
                if source == "pong":
                    raise SystemExit(f"--source pong needs ale-py and opencv: {exc}") from exc
        if base is not None:
            what = f"real Pong frames (ALE, {pong_rows} frames repeated)"
    if base is None:
        base = synthetic_frames(min(rows, pong_rows))
    reps = -(-rows // len(base))
    return np.concatenate([base] * reps)[:rows], what


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def measure(name: str, data: np.ndarray, levels: list[int], rounds: int,
            directory: str) -> dict:
    import namedschema
    variants: list[tuple[str, object]] = [("raw", None)] + [
        (f"zstd-{level}", ("zstd", level)) for level in levels]
    paths = {v: os.path.join(directory, f"{name}-{v}.nsb") for v, _c in variants}
    save_times: dict[str, list[float]] = {v: [] for v, _c in variants}
    load_times: dict[str, list[float]] = {v: [] for v, _c in variants}
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for variant, compression in order:
            began = time.perf_counter()
            namedschema.save({"obs": data}, paths[variant], compression=compression)
            save_times[variant].append(time.perf_counter() - began)
        for variant, _compression in order:
            began = time.perf_counter()
            back = namedschema.load(paths[variant])
            load_times[variant].append(time.perf_counter() - began)
            del back
    if not np.array_equal(namedschema.load(paths[variants[-1][0]], verify=True)["obs"], data):
        raise SystemExit("round trip failed")
    raw_size = os.path.getsize(paths["raw"])
    raw_save, raw_load = min(save_times["raw"]), min(load_times["raw"])
    rows = {}
    for variant, _c in variants:
        size = os.path.getsize(paths[variant])
        save, load = min(save_times[variant]), min(load_times[variant])
        rows[variant] = {"file_bytes": size, "size_ratio": size / raw_size,
                         "save_s": save, "save_ratio": save / raw_save,
                         "load_s": load, "load_ratio": load / raw_load,
                         "save_gbps": data.nbytes / save / 1e9,
                         "load_gbps": data.nbytes / load / 1e9}
    for path in paths.values():
        os.unlink(path)
    return rows


def _change(data: np.ndarray, rows: np.ndarray, step: int) -> None:
    """Write other frames (of the same kind) into ``rows``: a step of the game later."""
    data[rows] = data[(rows + 1000 + step) % len(data)]


def incremental(data: np.ndarray, rounds: int, directory: str) -> dict:
    """Full against incremental compressed saves, and background stalls (module docstring)."""
    import namedschema
    from namedschema.checkpoint import _incremental as inc
    data = data.copy()
    n = len(data)
    k = max(1, n // 100)
    rng = np.random.default_rng(0)
    path = os.path.join(directory, "inc.nsb")
    plain = os.path.join(directory, "plain.nsb")
    full, ring, rand, kinds = [], [], [], []
    cursor = 0
    for r in range(rounds):
        began = time.perf_counter()
        namedschema.save({"obs": data}, plain, compression="zstd")
        full.append(time.perf_counter() - began)
        if r == 0:
            namedschema.save({"obs": data}, path, incremental=True, compression="zstd")
            inc.wait(path)
        for case, times in (("ring", ring), ("random", rand)):
            rows = (np.arange(cursor, cursor + k) % n if case == "ring"
                    else rng.choice(n, k, replace=False))
            cursor += k
            _change(data, rows, r)
            began = time.perf_counter()
            namedschema.save({"obs": data}, path, incremental=True, compression="zstd")
            times.append(time.perf_counter() - began)
            inc.wait(path)
            kinds.append((case, namedschema.inspect(path).last_save.kind,
                          inc.fallback_reason(path)))
    if not np.array_equal(namedschema.load(path, verify=True)["obs"], data):
        raise SystemExit("incremental round trip failed")
    # background stalls, on a path of their own
    bpath = os.path.join(directory, "bg.nsb")
    stalls = {"first": [], "ring": [], "random": []}
    handle = namedschema.save({"obs": data}, bpath, incremental=True, background=True,
                              compression="zstd")
    stalls["first"].append(handle.stall)
    handle.wait()
    for r in range(rounds):
        for case in ("ring", "random"):
            rows = (np.arange(cursor, cursor + k) % n if case == "ring"
                    else rng.choice(n, k, replace=False))
            cursor += k
            _change(data, rows, r)
            handle = namedschema.save({"obs": data}, bpath, incremental=True,
                                      background=True, compression="zstd")
            stalls[case].append(handle.stall)
            handle.wait()
            kinds.append((f"background {case}", namedschema.inspect(bpath).last_save.kind,
                          inc.fallback_reason(bpath)))
    if not np.array_equal(namedschema.load(bpath, verify=True)["obs"], data):
        raise SystemExit("background round trip failed")
    for p in (path, plain, bpath):
        os.unlink(p)
    best_full = min(full)
    return {"rows_changed": k, "full_s": best_full,
            "ring_s": min(ring), "ring_ratio": min(ring) / best_full,
            "random_s": min(rand), "random_ratio": min(rand) / best_full,
            "stall_first_ms": 1000 * max(stalls["first"]),
            "stall_ring_ms": 1000 * max(stalls["ring"]),
            "stall_random_ms": 1000 * max(stalls["random"]), "kinds": kinds}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--source", choices=["auto", "pong", "synthetic"], default="auto")
    parser.add_argument("--pong-frames", type=int, default=6000)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--no-incremental", dest="incremental", action="store_false")
    args = parser.parse_args(argv)
    directory = args.dir or tempfile.mkdtemp(prefix="namedschema-bench-compression-")
    os.makedirs(directory, exist_ok=True)
    rows = args.mib * 2**20 // (FRAME[0] * FRAME[1])
    obs, what = frames(rows, args.source, args.pong_frames, directory)
    noise = np.random.default_rng(0).integers(0, 256, obs.shape, dtype=np.uint8)
    from namedschema.checkpoint import _compression as compression
    result = {"mib": obs.nbytes / 2**20, "rows": rows, "frames": what,
              "rounds": args.rounds, "workers": compression.workers(),
              "chunk": compression.CHUNK, "python": platform.python_version(),
              "numpy": np.__version__, "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d"), "results": {}}
    print(f"{obs.nbytes / 2**20:.0f} MiB each: frames = {what}; random = uniform bytes; "
          f"best of {args.rounds}, {compression.workers()} compression threads")
    print(f"{'data':<8}{'variant':<9}{'file':>12}{'size':>9}{'save':>9}{'ratio':>8}"
          f"{'load':>9}{'ratio':>8}{'save GB/s':>11}{'load GB/s':>11}")
    for name, data in (("frames", obs), ("random", noise)):
        rows_out = measure(name, data, args.levels, args.rounds, directory)
        result["results"][name] = rows_out
        for variant, r in rows_out.items():
            print(f"{name:<8}{variant:<9}{r['file_bytes'] / 2**20:>9.1f} MiB"
                  f"{r['size_ratio']:>8.4f}x{r['save_s']:>8.3f}s{r['save_ratio']:>7.2f}x"
                  f"{r['load_s']:>8.3f}s{r['load_ratio']:>7.2f}x{r['save_gbps']:>11.2f}"
                  f"{r['load_gbps']:>11.2f}")
        sys.stdout.flush()
    if args.incremental:
        inc = incremental(obs, args.rounds, directory)
        result["incremental"] = inc
        print(f"incremental (frames, zstd 1, {inc['rows_changed']} rows = 1%): full "
              f"compressed save {inc['full_s']:.3f}s; 1% ring {inc['ring_s']:.3f}s "
              f"({inc['ring_ratio']:.3f}x, target <= 0.1x); 1% random rows "
              f"{inc['random_s']:.3f}s ({inc['random_ratio']:.3f}x)")
        print(f"background stall: first (full) {inc['stall_first_ms']:.1f} ms (target 250), "
              f"1% ring {inc['stall_ring_ms']:.1f} ms, 1% random "
              f"{inc['stall_random_ms']:.1f} ms (target 50; worst of {args.rounds})")
        print("kinds: " + "; ".join(f"{c} {k}" + (f" ({why})" if why else "")
                                    for c, k, why in inc["kinds"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.dir is None:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
