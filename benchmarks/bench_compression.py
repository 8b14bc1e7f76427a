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

    python benchmarks/bench_compression.py [--mib 256] [--rounds 3] [--levels 1 3]
        [--source auto|pong|synthetic] [--dir DIR] [--json FILE]
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--source", choices=["auto", "pong", "synthetic"], default="auto")
    parser.add_argument("--pong-frames", type=int, default=6000)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    directory = args.dir or tempfile.mkdtemp(prefix="namedschema-bench-compression-")
    os.makedirs(directory, exist_ok=True)
    rows = args.mib * 2**20 // (FRAME[0] * FRAME[1])
    obs, what = frames(rows, args.source, args.pong_frames, directory)
    noise = np.random.default_rng(0).integers(0, 256, obs.shape, dtype=np.uint8)
    from namedschema.checkpoint import compression
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.dir is None:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
