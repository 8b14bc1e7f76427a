#!/usr/bin/env python3
"""Buffer benchmarks: allocating, filling and handing on an rlpyt-style replay buffer.

Measures, as ratios against a reference measured in the same run (lower is
better), on an Atari-like buffer (uint8 84x84 observations, int64 action,
float32 reward, bool done; 1 GiB, 16 MiB with ``--quick``):

* ``alloc_fill``: time to allocate and to write every byte, and peak RSS
  growth, of ``buffer_from_example`` with and without ``share_memory`` and of
  rlpyt-style ``multiprocessing.RawArray`` fields, against ``np.zeros`` of the
  same total size;
* ``handoff``: time and sender memory to send the filled buffer through a
  ``multiprocessing`` queue to a running worker, shared versus by value.

Usage:

    python benchmarks/bench_buffer.py [--quick] [--json FILE] [--cases alloc_fill,handoff]
"""

import os
import sys

# This checkout (its root is above this folder): its benchmarks.suite and namedschema.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.suite.buffer import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
