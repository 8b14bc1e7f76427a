#!/usr/bin/env python3
"""Pickling benchmarks: schema instances against stdlib namedtuple and rlpyt's types.

Measures, as ratios against ``collections.namedtuple`` pickled in the same run
(protocol 4): the size, ``pickle.dumps`` time and ``pickle.loads`` time of a
list of 100,000 small instances (10,000 with ``--quick``), and the size and
load time of one instance. rlpyt's class-per-type ``namedarraytuple`` and its
``NamedTupleSchema`` join when ``RLPYT_SRC`` points at an rlpyt source tree.

    python benchmarks/bench_pickling.py [--quick] [--json FILE] [--cases NAME,...]
"""

import os
import sys

# This checkout (its root is above this folder): its benchmarks.suite and namedschema.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.suite.pickling import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
