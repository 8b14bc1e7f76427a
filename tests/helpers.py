"""Helpers for tests that need a fresh interpreter or a worker process."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The hypothesis profile the suite runs under (tests/conftest.py loads it): ``dev`` by
#: default (the everyday run), ``ci`` in CI (.ci/run sets HYPOTHESIS_PROFILE=ci), ``long``.
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")


def examples(n: int) -> int:
    """The ``max_examples`` of a property test that runs ``n`` examples in CI.

    Under the ``ci`` and ``long`` profiles it is ``n``; under the default ``dev``
    profile (the everyday quick run) a quarter of it, at least 3: CI keeps the
    full search, the local loop stays short.
    """
    return n if HYPOTHESIS_PROFILE != "dev" else max(3, n // 4)


def run_fresh(code: str, *, stdin: bytes | None = None, timeout: float = 120,
              env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter that has never seen the caller's schemas.

    The child starts in a temporary-neutral directory with only the repository
    root on ``sys.path`` (so ``tests.*`` helper modules import), never the
    caller's modules. Raises AssertionError with the child's stderr when it fails
    and ``check`` is true.
    """
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = REPO_ROOT + os.pathsep + child_env.get("PYTHONPATH", "")
    child_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], input=stdin,
                          capture_output=True, timeout=timeout, env=child_env)
    if check and proc.returncode != 0:
        raise AssertionError(f"child failed with {proc.returncode}:\n"
                             f"{proc.stderr.decode(errors='replace')}")
    return proc


def echo_fresh(obj, protocol: int = pickle.HIGHEST_PROTOCOL):
    """Pickle ``obj``, load it in a fresh interpreter, pickle it back, load it here.

    The child also checks that everything it loaded of one schema has one type.
    """
    data = pickle.dumps(obj, protocol=protocol)
    proc = run_fresh(f"""
        import pickle, sys
        obj = pickle.loads(sys.stdin.buffer.read())
        again = pickle.loads(pickle.dumps(obj, protocol={protocol}))
        assert type(again) is type(obj), (type(again), type(obj))
        sys.stdout.buffer.write(pickle.dumps(obj, protocol={protocol}))
        """, stdin=data)
    return pickle.loads(proc.stdout)
