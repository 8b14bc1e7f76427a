#!/usr/bin/env python3
"""Background checkpoint benchmarks: how long ``save(..., background=True)`` stops training.

On an 8 GiB Atari-like buffer: the stall of the first, full, background
checkpoint and of background incremental saves after 1% of the rows changed
(a ring segment, random rows), against their writers' time and the budgets
(250 ms, 50 ms). Then a DQN-like learner (Nature-DQN network, batch 32, one
torch thread) on a 1e6-row frame buffer, for a window without checkpoints and
one checkpointing every minute with the writer ``namedschema.rlpyt.resumable``
uses: throughput ratio (target at least 0.99) and the stall of every
checkpoint, plotted with ``--plot``.

Usage (full size needs ~20 GiB of memory: run it alone):

    flock /tmp/namedschema-bigmem.lock python benchmarks/bench_background.py \\
        [--quick] [--json FILE] [--cases stall,dqn_loop] [--size-mib N] [--rows N] \\
        [--every S] [--window S] [--plot docs/background_stalls.png] [--dir DIR]

``namedschema bench --topics background`` runs the same.
"""

import os
import sys

# This checkout (its root is above this folder): its benchmarks.suite and namedschema.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.suite.background import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
