#!/usr/bin/env python3
"""Core benchmarks: schema instances against stdlib namedtuple and rlpyt's types.

Measures, as ratios against a reference timed in the same run:

* construction (positional, keyword, ``_make``), attribute access over eight
  fields and bytes per live instance, against ``collections.namedtuple``;
* ``x[5]``, ``x[10:20]``, ``x[3] = other`` and ``x[3] = 0`` on a named array
  tuple of four float64 (1000, 8) fields, against rlpyt's class-per-type
  ``namedarraytuple`` (with rlpyt's ``NamedArrayTupleSchema`` as a second
  contender and a plain loop over a tuple of the arrays as the floor).

rlpyt rows need ``RLPYT_SRC`` pointing at an rlpyt source tree. Usage:

    RLPYT_SRC=path/to/rlpyt python benchmarks/bench_core.py [--quick] [--json FILE]
"""

import os
import sys

# This checkout (its root is above this folder): its benchmarks.suite and namedschema.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.suite.core import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
