"""Fresh interpreters, peak memory and the Atari-like transition: what ``demo`` measures with.

The benchmarks of a source checkout (``benchmarks/suite``, run by ``namedschema bench``)
use the same, so that the demo and every benchmark build the same data and measure
memory the same way:

child_env            the environment of a fresh interpreter that imports this namedschema
run_python           run ``python <args>`` in such an interpreter
peak_rss             this process's peak resident set size, by one method (VmHWM)
ATARI_FIELDS, ...    the Atari-like transition: 84x84 uint8 frame, action, reward, done
atari_example        one zero transition of a given schema (what buffers are built from)
atari_transitions    ``n`` transitions of a schema: seeded random data, or a cheap pattern
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["child_env", "run_python", "peak_rss", "ATARI_FIELDS", "ATARI_FRAME",
           "ATARI_DTYPES", "ATARI_BYTES_PER_TRANSITION", "atari_example",
           "atari_transitions"]

# The folder holding the namedschema package this module belongs to.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

_T = TypeVar("_T")

ATARI_FIELDS = ("observation", "action", "reward", "done")
ATARI_FRAME = (84, 84)
# dtype names (numpy is imported only where arrays are made).
ATARI_DTYPES = {"observation": "uint8", "action": "int32", "reward": "float32", "done": "bool"}
ATARI_BYTES_PER_TRANSITION = ATARI_FRAME[0] * ATARI_FRAME[1] + 4 + 4 + 1


def child_env() -> dict[str, str]:
    """``os.environ`` with this namedschema first on ``PYTHONPATH``.

    A child then imports the very package that started it (a source checkout
    or an installed copy alike), whatever its working directory.
    """
    env = dict(os.environ)
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = _PACKAGE_PARENT + (os.pathsep + rest if rest else "")
    return env


def run_python(args: list[str], *, timeout: float = 3600) -> subprocess.CompletedProcess[Any]:
    """Run ``sys.executable <args>`` with :func:`child_env`; capture text output.

    ``-B`` is always given: a child must not leave ``__pycache__`` folders in
    the work directories it is pointed at.
    """
    return subprocess.run([sys.executable, "-B", *args], capture_output=True, text=True,
                          timeout=timeout, env=child_env())


def peak_rss() -> int:
    """Peak resident set size of this process so far, in bytes.

    The kernel's ``VmHWM`` starts afresh with each program. ``getrusage``'s
    ``ru_maxrss`` survives ``execve`` on Linux, so a child started from a large
    parent would report the parent's peak; it serves only where there is no
    ``/proc`` (macOS, where it counts bytes, not KiB).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def atari_example(cls: Callable[..., _T]) -> _T:
    """One all-zero Atari-like transition as a ``cls`` instance (``cls`` has ATARI_FIELDS)."""
    import numpy as np
    return cls(np.zeros(ATARI_FRAME, np.uint8), np.int32(0), np.float32(0), np.bool_(False))


def atari_transitions(cls: Callable[..., _T], n: int, seed: int | None = None) -> _T:
    """``n`` Atari-like transitions as one ``cls`` instance of arrays.

    With a ``seed``, seeded random data, a pure function of ``(n, seed)``
    (what resume checks compare). Without one, a cheap fixed pattern that still
    writes every page (what size and speed measurements need, at GiB sizes).
    """
    import numpy as np
    if seed is not None:
        rng = np.random.default_rng([seed, n])
        return cls(observation=rng.integers(0, 256, size=(n, *ATARI_FRAME), dtype=np.uint8),
                   action=rng.integers(0, 18, size=n, dtype=np.int32),
                   reward=rng.standard_normal(n, dtype=np.float32),
                   done=rng.random(n) < 0.01)
    observation = np.empty((n, *ATARI_FRAME), np.uint8)
    observation[:] = np.arange(ATARI_FRAME[0] * ATARI_FRAME[1],
                               dtype=np.uint8).reshape(ATARI_FRAME)
    return cls(observation, np.arange(n, dtype=np.int32), np.ones(n, np.float32),
               np.zeros(n, bool))
