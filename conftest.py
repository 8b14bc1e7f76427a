"""Collection rules for the doctests of namedschema's modules (``--doctest-modules``).

tests/conftest.py holds the test-suite configuration; this file only keeps doctest
collection of the package working where a module cannot be collected as is.
"""

import importlib.util

collect_ignore: list[str] = []

if importlib.util.find_spec("torch") is None:
    # torch is an optional extra and this module is its integration: without
    # torch there is nothing in it to run (its tests skip the same way).
    collect_ignore.append("namedschema/integrations/torch.py")
