"""Run file checks in a child interpreter under a memory and a time limit.

A crash (a segfault in torch, an allocation the kernel refuses) then fails
one test with the child's output instead of ending the whole test run.

run_limited   run a snippet in a fresh interpreter with RLIMIT_AS = start + 1 GiB
CHECK_FILES   a snippet body that loads/inspects every file of ``PATHS`` and
              prints one outcome per call as JSON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.helpers import REPO_ROOT

MEMORY_HEADROOM = 2**30  # bytes of address space the child may add after start-up

_PRELUDE = textwrap.dedent("""
    import json, resource, signal, sys
    def _limit_memory(headroom):
        with open("/proc/self/status") as f:
            vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + headroom, vm + headroom))
    class CaseTimeout(BaseException):
        pass
    def _alarm(signum, frame):
        raise CaseTimeout()
    signal.signal(signal.SIGPROF, _alarm)
    def outcome(fn, *args, seconds, **kwargs):
        '''Call fn; return 'ok', 'format', 'timeout', 'memory' or 'other:<what>'.

        The time limit counts this process's CPU time (ITIMER_PROF), not the wall
        clock: on a busy machine the wall clock runs on while the case waits for a core.
        (A case blocked without using the CPU is ended by run_limited's own timeout.)'''
        from namedschema.errors import FormatError
        try:
            signal.setitimer(signal.ITIMER_PROF, seconds)
            try:
                fn(*args, **kwargs)
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            return "ok"
        except FormatError:
            return "format"
        except CaseTimeout:
            return "timeout"
        except MemoryError:
            return "memory"
        except Exception as exc:
            return "other:" + type(exc).__name__ + ": " + str(exc)[:120]
    """)

CHECK_FILES = """
import namedschema
_limit_memory(HEADROOM)
out = []
for path in PATHS:
    for fn, kw in ((namedschema.load, {}), (namedschema.load, {"mmap_mode": "r"}),
                   (namedschema.inspect, {})):
        out.append(outcome(fn, path, seconds=SECONDS, **kw))
print(json.dumps(out))
"""


def run_limited(body: str, *, timeout: float = 600, cwd: str | None = None,
                env: dict | None = None, **names) -> subprocess.CompletedProcess:
    """Run ``body`` after the prelude in a fresh interpreter; ``names`` become globals.

    Each keyword is bound in the child to its value (via JSON), e.g.
    ``PATHS=[...]``. The child's memory limit is set by the body calling
    ``_limit_memory(HEADROOM)``, after whatever imports it needs first.
    """
    names.setdefault("HEADROOM", MEMORY_HEADROOM)
    assigns = "".join(f"{k} = json.loads({json.dumps(json.dumps(v))})\n"
                      for k, v in names.items())
    code = _PRELUDE + assigns + textwrap.dedent(body)
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = REPO_ROOT + os.pathsep + child_env.get("PYTHONPATH", "")
    child_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          timeout=timeout, cwd=cwd, env=child_env)


def outcomes_of(proc: subprocess.CompletedProcess) -> list:
    """The JSON list a child printed last, or an AssertionError with its stderr."""
    if proc.returncode != 0:
        raise AssertionError(f"child died with status {proc.returncode}:\n"
                             f"{proc.stderr.decode(errors='replace')[-3000:]}")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])
