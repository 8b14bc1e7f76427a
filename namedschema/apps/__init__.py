"""The top layer, programs: the ``namedschema`` command, the demo, the benchmarks.

cli     ``namedschema`` / ``python -m namedschema``: demo, bench, inspect, verify
demo    the 16-second tour: a replay buffer saved and loaded every way
bench   ``namedschema bench``: speed and memory against the alternatives
"""
