"""Collection rules for the doctests of namedschema's modules (``--doctest-modules``).

tests/conftest.py holds the test-suite configuration; this file only keeps doctest
collection of the package working where a module cannot be collected as is.
"""

import importlib.util

collect_ignore = [
    # An alias that replaces itself in sys.modules by namedschema.rlpyt.patch
    # (whose doctests are collected there); pytest refuses the file mismatch.
    "namedschema/rlpyt_compat.py",
    # The deprecated alias of namedschema.checkpoint: importing it warns by design
    # (tests/unit/test_checkpoint_package.py checks that), and it has no doctests.
    "namedschema/format.py",
]

if importlib.util.find_spec("torch") is None:
    # torch is an optional extra and this module is its integration: without
    # torch there is nothing in it to run (its tests skip the same way).
    collect_ignore.append("namedschema/integrations/torch.py")
