#!/usr/bin/env python3
"""Incremental checkpoint benchmarks: ``save(..., incremental=True)`` against a full save.

On a 1 GiB Atari-like replay buffer, for three kinds of buffer (made by
``buffer_from_example``; loaded with ``load(path, mmap_mode='c')``; rlpyt's
uniform and prioritized replay buffers under ``patch_rlpyt()``, which need
``RLPYT_SRC``), measures the time and peak extra RSS of an incremental save
after 0.1%, 1% and 10% of the rows were overwritten (a contiguous ring
segment, and random rows), against a full ``namedschema.save`` of the same
object in the same process. Best of N rounds, each in a fresh process with
the order of the changes rotated.

Usage:

    python benchmarks/bench_incremental.py [--quick] [--json FILE] [--rounds N]
        [--size-mib N] [--cases NAME,...] [--dir DIR]

``namedschema bench --topics incremental`` runs the same.
"""

import os
import sys

# This checkout (its root is above this folder): its benchmarks.suite and namedschema.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.suite.incremental import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
