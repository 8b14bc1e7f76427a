#!/usr/bin/env python3
"""Checkpoint benchmarks: namedschema.save/load of a 1 GiB Atari-like replay buffer.

Measures, each contender in a fresh process, alternating, best of N rounds:

* save time, file size and peak extra RSS of ``namedschema.save`` against raw
  per-array writes (the reference), ``np.save`` per field, pickle protocol 4
  and 5, ``np.savez`` and joblib, all with temporary file + fsync + rename;
* load time and peak extra RSS of ``namedschema.load`` (full and
  ``mmap_mode='r'``) against ``np.load`` of per-field ``.npy`` files (the
  reference), ``np.load(mmap_mode='r')``, raw ``readinto``, pickle, np.savez
  and joblib.

Usage:

    python benchmarks/bench_checkpoint.py [--quick] [--json FILE] [--rounds N] [--size-mib N]

Contenders whose package is not installed (joblib) are skipped with a note.
"""

import os
import sys

# This checkout (its root is above this folder): its benchmarks.suite and namedschema.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.suite.checkpoint import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
