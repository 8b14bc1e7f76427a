"""What every topic shares: timing, result rows and tables, its parser, child runs, the end.

Timing
  best_times            several statements timed in interleaved rounds, best time per call
  best_of               the best wall time of a slow call over a few repeats
  rotated               contenders in round ``n`` order, so none always runs first
Fresh interpreters
  child_env             the environment of a child that imports this namedschema and
                        this ``benchmarks`` package
  run_python            run ``python <args>`` in such a child
  run_in_child          run a topic's ``_child`` in a fresh interpreter, get its JSON back
Result rows
  result, compare       one result row with its ratio; rows of contenders against one
  target_met            whether a ratio meets a target such as ``"<= 1.1"``
  format_table          the human-readable table of result rows
  environment           the machine / library facts stored with every result file
  write_json            write a topic's result file in the shared shape
  write_json_atomic     write any JSON document through a temporary file renamed over it
  RATIO_NOTE            the line under every table that says how to read ratios
A topic's ``main``
  topic_parser          the argparse parser every topic shares (--quick, --json, --cases)
  choice_list           an argparse type for a comma-separated subset of names
  load_rlpyt_collections  rlpyt's collections module loaded from ``RLPYT_SRC``, or None
  RLPYT_SKIP_NOTE       the note of a topic whose rlpyt rows were skipped
  PROGRESS_PREFIX       what starts a progress line, which ``namedschema bench`` shows live
  progress              say on stderr how far a topic has got (a case begun or done)
  missing_extra_note    the note of cases skipped because an optional package is missing
  finish                print a topic's table, write its JSON; the end of every ``main``

Peak memory and the Atari-like transition are ``namedschema.apps.harness``'s, which the
demo uses too.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import time
import timeit
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, TypeVar

from namedschema.apps import harness as _harness

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["best_times", "best_of", "rotated", "child_env", "run_python", "run_in_child",
           "result", "compare", "target_met", "format_table", "environment", "write_json",
           "write_json_atomic", "RATIO_NOTE", "topic_parser", "choice_list",
           "load_rlpyt_collections", "RLPYT_SKIP_NOTE", "PROGRESS_PREFIX", "progress",
           "missing_extra_note", "finish"]

_T = TypeVar("_T")


class Result(TypedDict):
    """One result row (:func:`result`), as the JSON files hold it."""
    case: str
    contender: str
    metric: str
    value: float
    unit: str
    reference: str | None
    ratio: float | None
    target: str | None
    note: NotRequired[str]


#: The folder holding the ``benchmarks`` package (a source checkout's root).
_BENCHMARKS_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: The package the topic modules live in (``python -m PACKAGE.<topic>``).
PACKAGE = __name__.rpartition(".")[0]


# ------------------------------------------------------------------------------ timing
def _calibrate(timer: timeit.Timer, min_time: float) -> int:
    """Loop count that makes one ``timer.timeit`` call last at least ``min_time``."""
    number = 1
    while True:
        if timer.timeit(number) >= min_time or number >= 10**7:
            return number
        number *= 4


def best_times(contenders: Mapping[str, str | Callable[[], object]], *, repeat: int = 7,
               min_time: float = 0.02, setup: str = "pass",
               globals_: dict[str, Any] | None = None) -> dict[str, float]:
    """Time several statements, interleaved, and keep the best time per call of each.

    Rounds alternate between contenders (A B C A B C ...), so slow drifts of
    the machine (other processes, CPU frequency) hit every contender alike;
    the minimum over rounds is the least disturbed measurement.

    Args:
        contenders: name -> statement (source text or a zero-argument callable).
        repeat: rounds per contender.
        min_time: seconds each timed batch should last at least.
        setup: setup statement shared by all timers.
        globals_: namespace the statements run in.

    Returns:
        name -> best seconds per execution of the statement.
    """
    timers = {name: timeit.Timer(stmt, setup=setup, globals=globals_)
              for name, stmt in contenders.items()}
    numbers = {name: _calibrate(t, min_time) for name, t in timers.items()}
    best = {name: math.inf for name in timers}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            for name, t in timers.items():
                best[name] = min(best[name], t.timeit(numbers[name]) / numbers[name])
    finally:
        if gc_was_enabled:
            gc.enable()
    return best


def best_of(func: Callable[..., object], *, repeat: int = 5) -> float:
    """Best wall time in seconds of ``func()`` over ``repeat`` calls (for slow operations)."""
    best = math.inf
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()  # as timeit does: a collection would land on one contender by chance
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            func()
            best = min(best, time.perf_counter() - start)
    finally:
        if gc_was_enabled:
            gc.enable()
    return best

def rotated(contenders: Iterable[_T], shift: int) -> list[_T]:
    """``contenders`` starting at position ``shift``: round ``n`` of an interleaved run.

    Across rounds no contender always runs first, or always right after the
    same other one, so drifts of the machine (page cache, CPU frequency) do
    not favour one of them.

    >>> [rotated("ABC", n) for n in range(4)]
    [['A', 'B', 'C'], ['B', 'C', 'A'], ['C', 'A', 'B'], ['A', 'B', 'C']]
    """
    contenders = list(contenders)
    shift %= len(contenders)
    return contenders[shift:] + contenders[:shift]


# ------------------------------------------------------------------ fresh interpreters
def child_env() -> dict[str, str]:
    """``namedschema.apps.harness.child_env()`` with this ``benchmarks`` package importable.

    A child imports the very namedschema that started it (first on ``PYTHONPATH``), and
    the topics from the checkout they belong to (after it).
    """
    env = _harness.child_env()
    parts = env["PYTHONPATH"].split(os.pathsep)
    if _BENCHMARKS_PARENT not in parts:
        parts.insert(1, _BENCHMARKS_PARENT)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def run_python(args: list[str], *, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    """Run ``sys.executable <args>`` with :func:`child_env`; capture text output.

    ``-B`` is always given: a child must not leave ``__pycache__`` folders in
    the work directories it is pointed at.
    """
    return subprocess.run([sys.executable, "-B", *args], capture_output=True, text=True,
                          timeout=timeout, env=child_env())


def run_in_child(module: str, spec: dict[str, Any], label: str,
                 timeout: float = 1800) -> dict[str, Any]:
    """Run ``benchmarks.suite.<module>._child([json spec])`` in a fresh interpreter.

    Measurements of memory and cold state need a process of their own; the
    child prints one JSON line, returned here as a dict.
    """
    proc = run_python(["-c", f"import sys; from {PACKAGE}.{module} import _child;"
                       " sys.exit(_child(sys.argv[1:]))", json.dumps(spec)], timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{proc.stderr}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])  # _child's dict
    return out


# ------------------------------------------------------------------------- result rows
RATIO_NOTE = ("ratio = value / reference value measured in the same run; "
              "for every metric here lower is better")


def result(case: str, contender: str, metric: str, value: float, unit: str, *,
           reference: str | None = None, reference_value: float | None = None,
           target: str | None = None, note: str | None = None) -> Result:
    """One result row in the shared JSON shape.

    Args:
        case: what was measured (``"attr_access_8"``).
        contender: who was measured (``"namedschema"``).
        metric: kind of value (``"time"``, ``"bytes"``).
        value: the measurement.
        unit: its unit (``"ns"``, ``"B"``).
        reference: contender this row is compared against, or None for a
            reference row.
        reference_value: that contender's value in the same run.
        target: a condition on the ratio such as ``"<= 1.1"``, or None.
        note: free text shown under the table.

    Returns:
        The row as a dict; ``ratio`` is ``value / reference_value``.
    """
    ratio = None
    if reference is not None and reference_value:
        ratio = value / reference_value
    row: Result = {"case": case, "contender": contender, "metric": metric,
           "value": float(value), "unit": unit, "reference": reference,
           "ratio": ratio, "target": target}
    if note:
        row["note"] = note
    return row


def compare(case: str, metric: str, unit: str, values: Mapping[str, float], reference: str,
            targets: dict[str, str] | None = None, scale: float = 1.0) -> list[Result]:
    """Rows for every contender in ``values``, each against ``values[reference]``.

    Args:
        case: the case name for all rows.
        metric: the metric for all rows.
        unit: the unit of ``value * scale``.
        values: contender -> measured value (the reference included).
        reference: the reference contender's name.
        targets: contender -> target string for its ratio.
        scale: multiplier applied to values for display (seconds -> ns: 1e9).

    Returns:
        A list of rows; the reference row comes first and has no ratio.
    """
    targets = targets or {}
    ref = values[reference] * scale
    rows = [result(case, reference, metric, ref, unit)]
    for name, value in values.items():
        if name != reference:
            rows.append(result(case, name, metric, value * scale, unit,
                               reference=reference, reference_value=ref,
                               target=targets.get(name)))
    return rows


def target_met(ratio: float | None, target: str | None) -> bool | None:
    """Whether ``ratio`` meets ``target`` (``"<= 1.1"`` or ``">= 0.5"``).

    Returns:
        True or False, or None when there is no target or no ratio.

    Raises:
        ValueError: the target is not of the form ``"<= number"`` / ``">= number"``.

    >>> target_met(1.05, "<= 1.1"), target_met(1.2, "<= 1.1"), target_met(None, "<= 1")
    (True, False, None)
    """
    if target is None or ratio is None:
        return None
    op, _, number = target.strip().partition(" ")
    try:
        bound = float(number)
    except ValueError:
        raise ValueError(f"benchmark target {target!r}: expected '<= N' or '>= N'") from None
    if op == "<=":
        return ratio <= bound
    if op == ">=":
        return ratio >= bound
    raise ValueError(f"benchmark target {target!r}: expected '<= N' or '>= N'")


def _fmt_value(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 1e6:
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:.3g}"


def format_table(results: Sequence[Result], title: str | None = None) -> str:
    """The rows as an aligned text table, with targets and whether each is met.

    >>> rows = [result("make", "namedtuple", "time", 200.0, "ns"),
    ...         result("make", "mine", "time", 220.0, "ns", reference="namedtuple",
    ...                reference_value=200.0, target="<= 1.3")]
    >>> print(format_table(rows))  # doctest: +NORMALIZE_WHITESPACE
    case  contender   metric  value  unit  ratio  target  met
    make  namedtuple  time    200    ns    ref
    make  mine        time    220    ns    1.10x  <= 1.3  yes
    """
    header = ("case", "contender", "metric", "value", "unit", "ratio", "target", "met")
    lines = [header]
    for row in results:
        met = target_met(row.get("ratio"), row.get("target"))
        ratio = row.get("ratio")
        lines.append((
            row["case"], row["contender"], row["metric"], _fmt_value(row["value"]),
            row["unit"],
            "ref" if row.get("reference") is None else
            ("n/a" if ratio is None else f"{ratio:.2f}x"),
            row.get("target") or "",
            "" if met is None else ("yes" if met else "NO")))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    out = [] if title is None else [title, "=" * len(title)]
    for line in lines:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=False)).rstrip())
    notes = [f"note ({row['case']}, {row['contender']}): {row['note']}"
             for row in results if row.get("note")]
    return "\n".join(out + notes)


def _version_of(dist: str) -> str | None:
    """Installed version of ``dist`` without importing it (torch is slow to import)."""
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Facts about this machine and the libraries, stored with every result.

    Returns:
        A JSON-serialisable dict: python, numpy, namedschema, torch (or None),
        platform, machine, processor count.
    """
    import numpy

    from namedschema import __version__
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "numpy": numpy.__version__,
        "namedschema": __version__,
        "torch": _version_of("torch"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "rlpyt_src": bool(os.environ.get("RLPYT_SRC")),
    }


def write_json(path: str, topic: str, quick: bool, results: list[Result], *,
               notes: list[str] | None = None, env: dict[str, Any] | None = None) -> None:
    """Write ``{"topic", "quick", "environment", "results"}`` to ``path`` atomically.

    The file is written next to its destination and renamed over it, so an
    interrupted run never leaves a half-written result file.
    """
    doc: dict[str, Any] = {"topic": topic, "quick": bool(quick), "environment": env or environment(),
           "results": results}
    if notes:
        doc["notes"] = list(notes)
    write_json_atomic(path, doc)


def write_json_atomic(path: str, doc: dict[str, Any]) -> None:
    """Write ``doc`` as JSON to ``path`` through a temporary file renamed over it."""
    directory = os.path.dirname(os.path.abspath(path))
    # Created as open() creates files (0o666 less the umask), not mkstemp's private 0o600.
    tmp = os.path.join(directory, f".bench-{os.getpid()}-{uuid.uuid4().hex}.json")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                 0o666)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------- a topic's main
RLPYT_SKIP_NOTE = "RLPYT_SRC is not set: rlpyt rows skipped (set it to an rlpyt source tree)"
#: A topic's stderr lines that start with this are progress: ``namedschema bench`` shows
#: them as they come (a topic's other stderr output is kept for its error message).
PROGRESS_PREFIX = "[bench] "


def progress(topic: str, text: str) -> None:
    """Say on stderr how far ``topic`` has got: ``[bench] TOPIC: TEXT``, flushed at once."""
    print(f"{PROGRESS_PREFIX}{topic}: {text}", file=sys.stderr, flush=True)


def missing_extra_note(topic: str, cases: Sequence[str], module: str, why: str) -> str:
    """The one-line note of ``cases`` skipped because ``module`` cannot be imported.

    Args:
        topic: the topic whose cases are skipped.
        cases: the skipped case names.
        module: the missing package (an extra of namedschema's, e.g. ``torch``).
        why: what those cases need it for.
    """
    from namedschema._core.tree import extra_hint
    return (f"{topic}: skipped {', '.join(cases)}: {why}, and {module} is not installed "
            f"({extra_hint(module)})")


def topic_parser(topic: str, description: str,
                 cases: tuple[str, ...]) -> argparse.ArgumentParser:
    """The argument parser every topic's ``main`` uses.

    Args:
        topic: topic name (the module name under ``benchmarks.suite``).
        description: what the topic measures (shown by ``--help``).
        cases: the case names ``--cases`` accepts.
    """
    parser = argparse.ArgumentParser(
        prog=f"python -m {PACKAGE}.{topic}", description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(f"cases: {', '.join(cases)}\n\nexamples:\n"
                f"  python -m {PACKAGE}.{topic} --quick\n"
                f"  python -m {PACKAGE}.{topic} --cases {cases[0]} "
                f"--json {topic}.json"))
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and few repeats (under a minute; what CI runs)")
    parser.add_argument("--json", metavar="FILE", help="also write the results to FILE as JSON")
    parser.add_argument("--cases", metavar="NAME,...", type=choice_list(cases),
                        default=tuple(cases), help="run only these cases")
    return parser


def choice_list(choices: Sequence[str],
                what: str = "case") -> Callable[[str], tuple[str, ...]]:
    """An argparse type for a comma-separated subset of ``choices``."""
    def parse(text: str) -> tuple[str, ...]:
        chosen = tuple(c.strip() for c in text.split(",") if c.strip())
        unknown = [c for c in chosen if c not in choices]
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(
                f"unknown {what}(s) {', '.join(unknown) or '(none given)'}; "
                f"choose from {', '.join(choices)}")
        return chosen
    return parse


def load_rlpyt_collections() -> ModuleType | None:
    """rlpyt's ``rlpyt/utils/collections.py`` loaded by file path from ``RLPYT_SRC``.

    That file imports only the standard library, so rlpyt (and torch) need not
    be installed. The module is registered in ``sys.modules`` under the name
    ``rlpyt_collections`` so that pickle can find its classes.

    Returns:
        The module, or None when ``RLPYT_SRC`` is unset.

    Raises:
        FileNotFoundError: ``RLPYT_SRC`` is set but holds no such file.
    """
    root = os.environ.get("RLPYT_SRC")
    if not root:
        return None
    name = "rlpyt_collections"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(root, "rlpyt", "utils", "collections.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"RLPYT_SRC={root!r} has no rlpyt/utils/collections.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # only for paths without a .py suffix
        raise FileNotFoundError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def finish(topic: str, args: argparse.Namespace, results: list[Result],
           notes: Sequence[str] = ()) -> int:
    """Print a topic's table and notes, write its JSON if asked; return the exit code."""
    print(format_table(results, title=f"{topic}{' (quick)' if args.quick else ''}"))
    for note in notes:
        print(f"note: {note}")
    print(RATIO_NOTE)
    if args.json:
        write_json(args.json, topic, args.quick, results, notes=list(notes))
    return 0
