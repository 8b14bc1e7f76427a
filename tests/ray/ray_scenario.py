"""A seeded ShardedReplay run, in-process or as a script killed mid-checkpoint.

``python -m tests.ray.ray_scenario DIR [PAUSE]`` builds the replay, checkpoints
generation 1, writes more, prints ``CHECKPOINT2`` and checkpoints generation 2
(the test SIGKILLs the process group somewhere in there), then prints ``DONE``.
With ``PAUSE`` (``before-manifest``: the shard files of generation 2 written, its
manifest not; ``after-manifest``: the manifest committed, the old files not yet
removed) the checkpoint of generation 2 prints ``PAUSED <PAUSE>`` at that point and
waits there until it is killed: the test kills at the phase it names, not after a
guessed delay.
:func:`expected` runs the same program uninterrupted and returns, for each
generation, what a replay restored from it samples.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np

import namedschema as ns

Step = ns.NamedArrayTupleSchema("Step", "obs action reward")
EXAMPLE = Step(np.zeros((64, 64), np.uint8), np.int64(0), np.float32(0))
CAPACITY, SHARDS, SEED = 3000, 3, 11


def batch(k: int, n: int = 50) -> object:
    return Step(np.full((n, 64, 64), k % 251, np.uint8), np.arange(n) + 1000 * k,
                np.full(n, k, np.float32))


def build() -> object:
    from namedschema.ray import ShardedReplay
    return ShardedReplay(EXAMPLE, CAPACITY, num_shards=SHARDS, prioritized=True, seed=SEED)


def phase1(replay: object) -> None:
    for k in range(40):
        replay.extend(batch(k))
    _, idx, _ = replay.sample(64)
    replay.update_priorities(idx, np.linspace(0.1, 5.0, len(idx)))


def phase2(replay: object) -> None:
    for k in range(40, 70):
        replay.extend(batch(k))


def digest(replay: object) -> list:
    """What a restored replay does next: three prioritized samples."""
    out = []
    for _ in range(3):
        b, idx, w = replay.sample(32)
        out.append((b.action.tolist(), idx.tolist(), w.tolist()))
    return out


def expected(directory: str) -> dict[int, list]:
    """Generation -> the digest of a replay restored from it (uninterrupted run)."""
    from namedschema.ray import ShardedReplay
    replay = build()
    out = {}
    for generation, phase in ((1, phase1), (2, phase2)):
        phase(replay)
        replay.checkpoint(directory)
        restored = ShardedReplay.restore(directory)
        out[generation] = digest(restored)
        restored.close()
    replay.close()
    return out


def _pause_at(pause: str) -> None:
    """Make generation 2's checkpoint stop at ``pause`` (see the module's docstring)."""
    import threading

    from namedschema.ray import _files as manifest
    from namedschema.ray import sharded

    def stop() -> None:
        print(f"PAUSED {pause}", flush=True)
        threading.Event().wait()        # until SIGKILL

    if pause == "before-manifest":
        real_write = manifest.write_manifest

        def write_manifest(directory, m, *args, **kwargs):
            if m.generation == 2:
                stop()
            return real_write(directory, m, *args, **kwargs)
        manifest.write_manifest = write_manifest
    elif pause == "after-manifest":
        real_remove = sharded._remove_strays

        def remove_strays(directory, generation, files):
            if generation == 2:
                stop()
            return real_remove(directory, generation, files)
        sharded._remove_strays = remove_strays
    else:
        raise SystemExit(f"unknown pause {pause!r}")


def main(directory: str, pause: str | None = None) -> None:
    import ray
    if pause is not None:
        _pause_at(pause)
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             object_store_memory=128 * 2**20, logging_level="ERROR")
    replay = build()
    phase1(replay)
    replay.checkpoint(directory)
    phase2(replay)
    print("CHECKPOINT2", flush=True)
    replay.checkpoint(directory)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
