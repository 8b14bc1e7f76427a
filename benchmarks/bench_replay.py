#!/usr/bin/env python3
"""Replay-buffer benchmarks: namedschema's buffers against TorchRL's and SB3's, same data.

Times ``extend`` (8 and 256 transitions), uniform ``sample`` (32, 256) and
prioritized sample + ``update_priorities`` of ``namedschema.ReplayBuffer`` /
``PrioritizedReplayBuffer`` against TorchRL's ``ReplayBuffer`` with
``LazyTensorStorage`` and ``LazyMemmapStorage`` (and ``PrioritizedSampler``) and
SB3's ``ReplayBuffer``, in one process, interleaved, as ratios (lower is better).
Needs ``pip install -e ".[bench]"`` for the references. The default capacity
(10,000 Atari transitions, 565 MB per buffer, four buffers) needs about 2.3 GB.

Usage:

    python benchmarks/bench_replay.py [--quick] [--capacity N] [--json FILE] [--cases ...]
"""

import os
import sys

# This checkout (its root is above this folder): its benchmarks.suite and namedschema.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.suite.replay import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
