"""The top layer, programs: the ``namedschema`` command, the demo and what it measures with.

cli           ``namedschema`` / ``python -m namedschema``: demo, bench, inspect, verify,
              check-resume (``bench`` runs the benchmarks of a source checkout,
              ``benchmarks/suite``, which are not part of the installed package)
demo          the 16-second tour: a replay buffer saved and loaded every way
check_resume  ``namedschema check-resume``: does a training command resume exactly?
harness       fresh interpreters, peak memory, the Atari-like transition (demo and
              benchmarks alike)
"""
