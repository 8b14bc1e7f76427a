"""namedschema's benchmarks, in a source checkout (not part of the installed package).

``suite`` is what ``namedschema bench`` runs (``benchmarks/bench_<topic>.py`` run one of
its topics); the other ``bench_*.py``, ``compare_*.py`` and ``profile_*.py`` scripts
stand alone (each says in its docstring what it measures and how to run it).
"""
