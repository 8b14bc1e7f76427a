#!/usr/bin/env python3
"""Cost of a ``namedschema.rlpyt.resumable`` checkpoint of an Atari-sized replay buffer.

Builds rlpyt's ``PrioritizedReplayFrameBuffer`` (4-frame 84x84 uint8
observations, the DQN/example_5 setting) of ``--steps`` steps (default 1e6:
7.1 GB of frames) over ``--envs`` environments, fills it, and measures, each
side in its own process:

save    capturing the buffer's state (what ``resumable`` does at a checkpoint)
        and ``namedschema.save`` of it, against the reference: writing the same
        arrays raw to one file with ``os.write`` and one ``fsync``
resume  a fresh process that built the same empty buffer: ``namedschema.load``
        (memory-mapped) of the checkpoint and the in-place restore, against
        the reference: another fresh process's ``readinto`` of the raw file
        straight into the arrays of its freshly built buffer

Save timings are best of ``--rounds``, resume timings one cold round; ratios are against the reference measured
in the same run. Needs RLPYT_SRC (rlpyt's source tree) and about twice the
buffer size in free disk and 1.2 times it in free memory.

    RLPYT_SRC=/path/to/rlpyt python benchmarks/bench_rlpyt_resume.py [--steps N]
        [--envs B] [--rounds R] [--dir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

CHILD = r"""
import json, os, resource, sys, time
sys.path.append(os.environ["RLPYT_SRC"])
import numpy as np
import namedschema
namedschema.patch_rlpyt()
from rlpyt.replays.non_sequence.frame import PrioritizedReplayFrameBuffer
from rlpyt.utils.collections import namedarraytuple
from namedschema.rlpyt import state

steps, envs, directory, mode, rounds = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                        sys.argv[4], int(sys.argv[5]))
S = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])

def build():
    example = S(np.zeros((4, 84, 84), np.uint8), np.int64(0), np.float32(0), False)
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
    # Views are written once (their base holds them).
    bases, seen = [], set()
    for a in out:
        base = a if a.base is None else a.base
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        base = base if isinstance(base, np.ndarray) else a
        if id(base) not in seen:
            seen.add(id(base))
            bases.append(base)
    return bases

def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

ckpt = os.path.join(directory, "resume.nsc")
raw = os.path.join(directory, "raw.bin")
t0 = time.perf_counter()
buf = build()
built = time.perf_counter() - t0
result = {"build_s": built}
if mode == "save":
    T = 1000
    rng = np.random.RandomState(0)
    block = rng.randint(0, 255, (T, envs, 4, 84, 84), dtype=np.uint8)
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
    t0 = time.perf_counter()
    loaded = namedschema.load(ckpt, mmap_mode="r")
    state.restore(buf, loaded["replay"], None, "replay")
    del loaded
    result.update(resume_s=time.perf_counter() - t0, peak_rss_mib=rss_mib(),
                  views=[bool(np.shares_memory(buf.samples_new_frames, buf.samples_frames)),
                         bool(np.shares_memory(buf.priority_tree.priorities,
                                               buf.priority_tree.tree))])
else:
    t0 = time.perf_counter()
    with open(raw, "rb", buffering=0) as f:
        for a in arrays(buf):
            view = memoryview(a).cast("B")
            while view:
                view = view[f.readinto(view):]
    result.update(raw_read_s=time.perf_counter() - t0, peak_rss_mib=rss_mib())
print(json.dumps(result))
"""


def _child(mode, args, directory):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(args.steps),
                           str(args.envs), directory, mode, str(args.rounds)],
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} child failed:\n{proc.stderr.decode(errors='replace')}")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not os.environ.get("RLPYT_SRC"):
        raise SystemExit("set RLPYT_SRC to rlpyt's source tree (the directory holding rlpyt/)")
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        save = _child("save", args, directory)
        resume = _child("resume", args, directory)
        resume.update(raw_read_s=_child("raw-read", args, directory)["raw_read_s"])
    gib = save["buffer_bytes"] / 2**30
    print(f"PrioritizedReplayFrameBuffer, {args.steps:,} steps x 4x84x84 uint8 frames "
          f"over {args.envs} envs: {gib:.2f} GiB of arrays, checkpoint file "
          f"{save['file_bytes'] / 2**30:.2f} GiB")
    print(f"checkpoint (capture + namedschema.save, synced): {save['save_s']:.2f} s "
          f"(capture {save['capture_s'] * 1e3:.1f} ms); raw write + fsync "
          f"{save['raw_write_s']:.2f} s; ratio {save['save_s'] / save['raw_write_s']:.2f}x")
    print(f"resume (namedschema.load mmap + in-place restore): {resume['resume_s']:.2f} s; "
          f"raw readinto {resume['raw_read_s']:.2f} s; "
          f"ratio {resume['resume_s'] / resume['raw_read_s']:.2f}x; views kept: "
          f"{resume['views']}")
    print(f"peak RSS: saver {save['peak_rss_mib']:.0f} MiB, resumer "
          f"{resume['peak_rss_mib']:.0f} MiB (buffer {save['buffer_bytes'] / 2**20:.0f} MiB)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"save": save, "resume": resume, "args": vars(args)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
