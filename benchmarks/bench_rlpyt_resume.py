#!/usr/bin/env python3
"""Cost of a ``namedschema.rlpyt.resumable`` checkpoint of an Atari-sized replay buffer.

Builds rlpyt's ``PrioritizedReplayFrameBuffer`` (4-frame uint8 observations of
``--frame`` pixels, default 104x80 as in the seed's run; 84x84 is the DQN
paper's) of ``--steps`` steps (default 1e6: 8.3 GB of 104x80 frames) over
``--envs`` environments, fills it, and measures, each side in its own process:

save    capturing the buffer's state (what ``resumable`` does at a checkpoint)
        and ``namedschema.save`` of it, against the reference: writing the same
        arrays raw to one file with ``os.write`` and one ``fsync``
resume  a fresh process that built the same empty buffer: ``namedschema.load``
        (memory-mapped, as ``resumable`` loads) of the checkpoint and the
        in-place restore, against the reference: another fresh process's
        ``readinto`` of the raw file straight into the arrays of its freshly
        built buffer. Both read from disk: the files are dropped from the page
        cache first (``posix_fadvise``; ``--warm`` keeps them). Peak resident
        set (VmHWM) of both, against the buffer's bytes B: a resume must hold
        the buffer once (issue 19: at most B + 10%).

The buffer is filled with synthetic random frames, and what is saved keeps its
shapes: this measures the throughput of *full* checkpoints and the time and memory of a
resume, which depend on the bytes, not on where the frames came from. It does not
measure incremental checkpoints of a real run (emulator states that change length, a
sum tree's index list, an optimizer state that appears): that is
``benchmarks/bench_pong_checkpoints.py``, on rlpyt's real ``AtariEnv`` (Pong over
ale-py), the documented real-env benchmark (docs/incremental.rst).

Save timings are best of ``--rounds``; resume and raw-read timings best of
``--read-rounds`` fresh processes, alternated (each writes into a freshly built
buffer once); ratios are against the reference measured
in the same run. Needs RLPYT_SRC (rlpyt's source tree), about twice the buffer
size in free disk and 1.2 times it in free memory. On a shared machine run it
under ``flock /tmp/namedschema-bigmem.lock``.

    RLPYT_SRC=/path/to/rlpyt python benchmarks/bench_rlpyt_resume.py [--steps N]
        [--envs B] [--frame HxW] [--rounds R] [--read-rounds R] [--warm] [--dir DIR]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

# This checkout (its root is above this folder): its benchmarks.suite and namedschema.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.suite.common import rotated  # noqa: E402

CHILD = r"""
import json, os, sys, time
sys.path.append(os.environ["RLPYT_SRC"])
import numpy as np
import namedschema
namedschema.patch_rlpyt()
from rlpyt.replays.non_sequence.frame import PrioritizedReplayFrameBuffer
from rlpyt.utils.collections import namedarraytuple
from namedschema.rlpyt.resume import state
from namedschema.apps.harness import peak_rss

steps, envs, directory, mode, rounds = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                        sys.argv[4], int(sys.argv[5]))
H, W = (int(n) for n in sys.argv[6].split("x"))
S = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])

def build():
    example = S(np.zeros((4, H, W), np.uint8), np.int64(0), np.float32(0), False)
    return PrioritizedReplayFrameBuffer(example=example, size=steps, B=envs, discount=0.99,
                                        n_step_return=3, alpha=0.6, beta=0.4)

def arrays(obj):
    out = []
    def walk(value):
        if isinstance(value, np.ndarray):
            out.append(value)
        elif isinstance(value, tuple) and hasattr(value, "_fields"):
            for v in value:
                walk(v)
        elif hasattr(value, "__dict__") and type(value).__module__.startswith("rlpyt.replays"):
            for v in vars(value).values():
                walk(v)
    for v in vars(obj).values():
        walk(v)
    # Views are written once, through the array owning their memory (the last
    # array in the chain of bases: a buffer's memory may be a map under it).
    bases, seen = [], set()
    for a in out:
        while isinstance(a.base, np.ndarray):
            a = a.base
        if id(a) not in seen:
            seen.add(id(a))
            bases.append(a)
    return bases

def rss_mib():
    return peak_rss() / 2**20

def resident_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")

ckpt = os.path.join(directory, "resume.nsc")
raw = os.path.join(directory, "raw.bin")
t0 = time.perf_counter()
buf = build()
built = time.perf_counter() - t0
result = {"build_s": built}
if mode == "save":
    T = 1000
    rng = np.random.RandomState(0)
    block = rng.randint(0, 255, (T, envs, 4, H, W), dtype=np.uint8)
    t0 = time.perf_counter()
    for i in range(steps // (T * envs)):
        block[0, :, -1, 0, 0] = i % 251        # frames differ between batches
        buf.append_samples(S(block, rng.randint(0, 6, (T, envs)),
                             rng.rand(T, envs).astype(np.float32), rng.rand(T, envs) < 0.01))
    result["fill_s"] = time.perf_counter() - t0
    result["buffer_bytes"] = sum(a.nbytes for a in arrays(buf))
    saves, refs, captures = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        captured = {"replay": state.capture(buf, None)}
        t1 = time.perf_counter()
        namedschema.save(captured, ckpt)
        t2 = time.perf_counter()
        captures.append(t1 - t0)
        saves.append(t2 - t0)
        t0 = time.perf_counter()
        fd = os.open(raw, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for a in arrays(buf):
                view = memoryview(np.ascontiguousarray(a)).cast("B")
                while view:
                    view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        refs.append(time.perf_counter() - t0)
    result.update(capture_s=min(captures), save_s=min(saves), raw_write_s=min(refs),
                  file_bytes=os.path.getsize(ckpt), peak_rss_mib=rss_mib())
elif mode == "resume":
    # One round: a resume writes into a freshly built (untouched) buffer once.
    before = resident_mib()
    t0 = time.perf_counter()
    loaded = namedschema.load(ckpt, allow_pickle=True, mmap_mode="r")
    state.restore(buf, loaded["replay"], None, "replay")
    del loaded
    result.update(resume_s=time.perf_counter() - t0, peak_rss_mib=rss_mib(),
                  rss_before_mib=before,
                  views=[bool(np.shares_memory(buf.samples_new_frames, buf.samples_frames)),
                         bool(np.shares_memory(buf.priority_tree.priorities,
                                               buf.priority_tree.tree))])
else:
    before = resident_mib()
    t0 = time.perf_counter()
    with open(raw, "rb", buffering=0) as f:
        for a in arrays(buf):
            view = memoryview(a).cast("B")
            while view:
                view = view[f.readinto(view):]
    result.update(raw_read_s=time.perf_counter() - t0, peak_rss_mib=rss_mib(),
                  rss_before_mib=before)
print(json.dumps(result))
"""


def _evict(directory):
    """Drop the checkpoint and the raw file from the page cache: the reads hit the disk."""
    for name in ("resume.nsc", "raw.bin"):
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _child(mode, args, directory):
    if mode != "save" and not args.warm:
        _evict(directory)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(args.steps),
                           str(args.envs), directory, mode, str(args.rounds), args.frame],
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} child failed:\n{proc.stderr.decode(errors='replace')}")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--frame", default="104x80", help="frame pixels, HxW")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--read-rounds", type=int, default=1,
                        help="resume and raw-read rounds, alternated (best of each)")
    parser.add_argument("--warm", action="store_true",
                        help="read the files from the page cache (default: from disk)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not os.environ.get("RLPYT_SRC"):
        raise SystemExit("set RLPYT_SRC to rlpyt's source tree (the directory holding rlpyt/)")
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        save = _child("save", args, directory)
        runs: dict = {"resume": [], "raw-read": []}
        for n in range(args.read_rounds):
            for mode in rotated(runs, n):
                runs[mode].append(_child(mode, args, directory))
        resume = min(runs["resume"], key=lambda r: r["resume_s"])
        raw = min(runs["raw-read"], key=lambda r: r["raw_read_s"])
        resume.update(raw_read_s=raw["raw_read_s"], raw_peak_rss_mib=raw["peak_rss_mib"],
                      raw_rss_before_mib=raw["rss_before_mib"],
                      resume_all_s=[r["resume_s"] for r in runs["resume"]],
                      raw_read_all_s=[r["raw_read_s"] for r in runs["raw-read"]],
                      peak_rss_all_mib=[r["peak_rss_mib"] for r in runs["resume"]])
    gib = save["buffer_bytes"] / 2**30
    print(f"PrioritizedReplayFrameBuffer, {args.steps:,} steps x 4x{args.frame} uint8 frames "
          f"over {args.envs} envs: {gib:.2f} GiB of arrays, checkpoint file "
          f"{save['file_bytes'] / 2**30:.2f} GiB")
    print("(filled with synthetic frames, full checkpoints only; incremental checkpoints of a "
          "real-env run: benchmarks/bench_pong_checkpoints.py)")
    print(f"checkpoint (capture + namedschema.save, synced): {save['save_s']:.2f} s "
          f"(capture {save['capture_s'] * 1e3:.1f} ms); raw write + fsync "
          f"{save['raw_write_s']:.2f} s; ratio {save['save_s'] / save['raw_write_s']:.2f}x")
    cache = "page cache" if args.warm else "disk"
    print(f"resume from {cache} (namedschema.load mmap + in-place restore): "
          f"{resume['resume_s']:.2f} s; raw readinto {resume['raw_read_s']:.2f} s; "
          f"ratio {resume['resume_s'] / resume['raw_read_s']:.2f}x; views kept: "
          f"{resume['views']}")
    if args.read_rounds > 1:
        print(f"  all rounds: resume {[round(t, 1) for t in resume['resume_all_s']]} s, raw "
              f"{[round(t, 1) for t in resume['raw_read_all_s']]} s")
    b = save["buffer_bytes"] / 2**20
    print(f"peak RSS (VmHWM), buffer B = {b:.0f} MiB: saver {save['peak_rss_mib']:.0f} MiB; "
          f"resumer {resume['peak_rss_mib']:.0f} MiB = {resume['peak_rss_mib'] / b:.3f} B "
          f"(growth during the resume {resume['peak_rss_mib'] - resume['rss_before_mib']:.0f}"
          f" MiB = {(resume['peak_rss_mib'] - resume['rss_before_mib']) / b:.3f} B); raw "
          f"reader {resume['raw_peak_rss_mib']:.0f} MiB = "
          f"{resume['raw_peak_rss_mib'] / b:.3f} B")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"save": save, "resume": resume, "args": vars(args),
                       "fill": "synthetic"}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
