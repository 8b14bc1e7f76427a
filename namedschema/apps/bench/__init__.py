"""The benchmark harness: timing, result rows, tables, JSON, plots and the runner.

Each topic lives in ``namedschema.apps.bench.<topic>`` and exposes
``main(argv=None) -> int``; ``namedschema bench`` runs every topic in
``TOPICS`` in its own subprocess and combines their JSON.

TOPICS            the registry of topic module names, in running order
environment       the machine / library facts stored with every result file
best_times        interleaved, repeated timing of several contenders (min per call)
result            one result row, with its ratio against a reference value
target_met        whether a ratio meets a target such as ``"<= 1.1"``
topic_parser      the argparse parser every topic shares (--quick, --json, --cases)
finish            print a topic's table, write its JSON; the end of every ``main``
format_table      the human-readable table of result rows
write_json        write a result file in the shared shape
plot_results      bar charts of the ratios (matplotlib, imported on use)
run_topics        run topics in subprocesses and collect their results
run_bench         carry out ``namedschema bench`` (the CLI parses its arguments)

Child processes, peak RSS, round rotation and the Atari-like example are in
``namedschema.apps.bench.harness`` (``demo`` uses them too).
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
import tempfile
import time
import timeit
import uuid
from collections.abc import Sequence

from ..._core.extras import extra_hint
from .harness import run_python

__all__ = [
    "TOPICS", "environment", "best_times", "result", "target_met", "topic_parser",
    "finish", "format_table", "write_json", "plot_results", "run_topics", "run_bench",
]

# Topics run in this order (each is a module of this package).
TOPICS = ("core", "pickling", "buffer", "checkpoint", "incremental", "background", "replay")

RATIO_NOTE = ("ratio = value / reference value measured in the same run; "
              "for every metric here lower is better")


def _version_of(dist: str) -> str | None:
    """Installed version of ``dist`` without importing it (torch is slow to import)."""
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict:
    """Facts about this machine and the libraries, stored with every result.

    Returns:
        A JSON-serialisable dict: python, numpy, namedschema, torch (or None),
        platform, machine, processor count.
    """
    import numpy

    from ..._version import __version__
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


def _calibrate(timer: timeit.Timer, min_time: float) -> int:
    """Loop count that makes one ``timer.timeit`` call last at least ``min_time``."""
    number = 1
    while True:
        if timer.timeit(number) >= min_time or number >= 10**7:
            return number
        number *= 4


def best_times(contenders: dict, *, repeat: int = 7, min_time: float = 0.02,
               setup: str = "pass", globals_: dict | None = None) -> dict:
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


def best_of(func, *, repeat: int = 5) -> float:
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


def result(case: str, contender: str, metric: str, value: float, unit: str, *,
           reference: str | None = None, reference_value: float | None = None,
           target: str | None = None, note: str | None = None) -> dict:
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
    row = {"case": case, "contender": contender, "metric": metric,
           "value": float(value), "unit": unit, "reference": reference,
           "ratio": ratio, "target": target}
    if note:
        row["note"] = note
    return row


def compare(case: str, metric: str, unit: str, values: dict, reference: str,
            targets: dict | None = None, scale: float = 1.0) -> list:
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


def topic_parser(topic: str, description: str, cases: tuple) -> argparse.ArgumentParser:
    """The argument parser every topic's ``main`` uses.

    Args:
        topic: topic name (the module name under ``namedschema.apps.bench``).
        description: what the topic measures (shown by ``--help``).
        cases: the case names ``--cases`` accepts.
    """
    parser = argparse.ArgumentParser(
        prog=f"python -m namedschema.apps.bench.{topic}", description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(f"cases: {', '.join(cases)}\n\nexamples:\n"
                f"  python -m namedschema.apps.bench.{topic} --quick\n"
                f"  python -m namedschema.apps.bench.{topic} --cases {cases[0]} "
                f"--json {topic}.json"))
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and few repeats (under a minute; what CI runs)")
    parser.add_argument("--json", metavar="FILE", help="also write the results to FILE as JSON")
    parser.add_argument("--cases", metavar="NAME,...", type=choice_list(cases),
                        default=tuple(cases), help="run only these cases")
    return parser


def choice_list(choices, what: str = "case"):
    """An argparse type for a comma-separated subset of ``choices``."""
    def parse(text):
        chosen = tuple(c.strip() for c in text.split(",") if c.strip())
        unknown = [c for c in chosen if c not in choices]
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(
                f"unknown {what}(s) {', '.join(unknown) or '(none given)'}; "
                f"choose from {', '.join(choices)}")
        return chosen
    return parse


def run_in_child(module: str, spec: dict, label: str, timeout: float = 1800) -> dict:
    """Run ``namedschema.apps.bench.<module>._child([json spec])`` in a fresh interpreter.

    Measurements of memory and cold state need a process of their own; the
    child prints one JSON line, returned here as a dict.
    """
    proc = run_python(["-c", f"import sys; from namedschema.apps.bench.{module} import _child;"
                       " sys.exit(_child(sys.argv[1:]))", json.dumps(spec)], timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt_value(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 1e6:
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:.3g}"


def format_table(results: list, title: str | None = None) -> str:
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


def write_json(path: str, topic: str, quick: bool, results: list, *,
               notes: list | None = None, env: dict | None = None) -> None:
    """Write ``{"topic", "quick", "environment", "results"}`` to ``path`` atomically.

    The file is written next to its destination and renamed over it, so an
    interrupted run never leaves a half-written result file.
    """
    doc = {"topic": topic, "quick": bool(quick), "environment": env or environment(),
           "results": results}
    if notes:
        doc["notes"] = list(notes)
    _write_json_atomic(path, doc)


def _write_json_atomic(path: str, doc: dict) -> None:
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


def finish(topic: str, args, results: list, notes: Sequence[str] = ()) -> int:
    """Print a topic's table and notes, write its JSON if asked; return the exit code."""
    print(format_table(results, title=f"{topic}{' (quick)' if args.quick else ''}"))
    for note in notes:
        print(f"note: {note}")
    print(RATIO_NOTE)
    if args.json:
        write_json(args.json, topic, args.quick, results, notes=list(notes))
    return 0


def load_rlpyt_collections():
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


RLPYT_SKIP_NOTE = "RLPYT_SRC is not set: rlpyt rows skipped (set it to an rlpyt source tree)"


# --------------------------------------------------------------------------- runner


def run_topics(topics, *, quick: bool, verbose: bool = False, timeout: float = 3600,
               log=None) -> tuple[list, list, bool]:
    """Run each topic's ``main`` in a fresh subprocess and collect its results.

    Args:
        topics: topic names to run.
        quick: pass ``--quick`` to each topic.
        verbose: let each topic's own output through (to ``log``).
        timeout: seconds allowed per topic.
        log: text stream for progress lines (defaults to stderr).

    Returns:
        (documents, notes, all_ok): the JSON document of each topic that ran,
        notes about skipped or failed topics, and whether none failed.
    """
    log = log or sys.stderr
    documents, notes, ok = [], [], True
    with tempfile.TemporaryDirectory(prefix="namedschema-bench-") as tmp:
        for topic in topics:
            out = os.path.join(tmp, f"{topic}.json")
            args = ["-m", f"{__name__}.{topic}", "--json", out] + ["--quick"] * quick
            print(f"[bench] {topic}: running ...", file=log, flush=True)
            start = time.perf_counter()
            try:
                proc = run_python(args, timeout=timeout)
            except subprocess.TimeoutExpired:
                ok = False
                notes.append(f"topic {topic!r} failed: no result after {timeout:.0f} s")
                continue
            elapsed = time.perf_counter() - start
            if verbose and proc.stdout:
                print(proc.stdout, file=log, end="", flush=True)
            if proc.returncode != 0 or not os.path.exists(out):
                ok = False
                last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                notes.append(f"topic {topic!r} failed with exit status "
                             f"{proc.returncode}: {last}")
                print(f"[bench] {topic}: FAILED ({elapsed:.1f} s)", file=log, flush=True)
                continue
            with open(out) as f:
                documents.append(json.load(f))
            print(f"[bench] {topic}: done ({elapsed:.1f} s)", file=log, flush=True)
    return documents, notes, ok


def _ratio_rows(documents):
    for doc in documents:
        for row in doc["results"]:
            # A ratio of 0 (e.g. no extra memory at all) has no place on a log axis.
            if row.get("ratio") is not None and row["ratio"] > 0:
                yield doc["topic"], row


def plot_results(documents: list, path: str) -> None:
    """Draw the ratio of every compared row as horizontal bars, one panel per topic.

    Bars are coloured by whether their target is met (green), missed (red),
    or absent (grey); a dashed line marks 1.0 (as fast / as large as the
    reference) and a tick marks each target.

    Args:
        documents: topic result documents, as :func:`write_json` writes them.
        path: PNG file to write.

    Raises:
        ImportError: matplotlib is not installed (the message says how to get it).
    """
    matplotlib = _import_matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    panels = [(doc["topic"], [r for t, r in _ratio_rows([doc])]) for doc in documents]
    panels = [(topic, rows) for topic, rows in panels if rows]
    if not panels:
        panels = [("no comparisons", [])]
    heights = [max(1.6, 0.32 * len(rows) + 1.0) for _, rows in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (topic, rows) in zip(axes[:, 0], panels, strict=True):
        labels = [f"{r['case']} {r['metric']}: {r['contender']} vs {r['reference']}"
                  for r in rows]
        ratios = [r["ratio"] for r in rows]
        colours = []
        for r in rows:
            met = target_met(r["ratio"], r.get("target"))
            colours.append("#bbbbbb" if met is None else ("#3a9a4a" if met else "#c8423a"))
        ys = range(len(rows))
        ax.barh(list(ys), ratios, color=colours)
        ax.axvline(1.0, color="black", linestyle="--", linewidth=0.8)
        for y, r in zip(ys, rows, strict=True):
            ax.text(r["ratio"], y, f" {r['ratio']:.2f}x", va="center", fontsize=7)
            if r.get("target"):
                bound = float(r["target"].split()[1])
                ax.plot([bound, bound], [y - 0.4, y + 0.4], color="black", linewidth=1.5)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        lo, hi = min(ratios + [1.0]) / 1.3, max(ratios + [1.0]) * 1.5
        ax.set_xlim(lo, hi)
        ticks = [t for t in (0.1, 0.2, 0.5, 0.7, 1, 1.5, 2, 5, 10, 20, 50, 100, 200)
                 if lo <= t <= hi]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}x"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{topic}: ratio to reference (lower is better; "
                     "green = target met, red = missed, | = target)", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _import_matplotlib():
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("--plot needs matplotlib, which is not installed: "
                          + extra_hint("plot")) from exc
    return matplotlib


def check_outputs(args) -> None:
    """Refuse, before any benchmark runs, output paths that could not be written at the end.

    Raises:
        OSError: the folder of ``--json`` / ``--plot`` is missing or not writable, or
            the path is a folder (the message names the option and the path).
        ImportError: ``--plot`` is given and matplotlib cannot be imported.
    """
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if not path:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise OSError(f"{option} {path}: is a folder; give a file name")
        if not os.path.isdir(folder):
            raise OSError(f"{option} {path}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise OSError(f"{option} {path}: the folder {folder} is not writable")
    if args.plot:
        _import_matplotlib()


def run_bench(args) -> int:
    """Carry out ``namedschema bench`` for parsed arguments (see ``namedschema.apps.cli``)."""
    check_outputs(args)
    topics = args.topics or TOPICS
    documents, notes, ok = run_topics(topics, quick=args.quick, verbose=args.verbose)
    for doc in documents:
        title = f"{doc['topic']}{' (quick)' if doc.get('quick') else ''}"
        print(format_table(doc["results"], title=title))
        for note in doc.get("notes", ()):
            print(f"note: {note}")
        print()
    for note in notes:
        print(f"note: {note}")
    print(RATIO_NOTE)
    missed = [(doc["topic"], r) for doc in documents for r in doc["results"]
              if target_met(r.get("ratio"), r.get("target")) is False]
    met = sum(1 for doc in documents for r in doc["results"]
              if target_met(r.get("ratio"), r.get("target")))
    if args.quick:
        print("quick run: tiny sizes and few repeats, so ratios are indicative only; "
              "run without --quick for numbers to quote")
    print(f"targets met: {met}, missed: {len(missed)}"
          + "".join(f"\n  missed: {t} {r['case']} {r['contender']} "
                    f"{r['ratio']:.2f}x (target {r['target']})" for t, r in missed))
    if args.json:
        combined = {"topic": "all", "quick": bool(args.quick), "environment": environment(),
                    "results": [dict(r, topic=doc["topic"]) for doc in documents
                                for r in doc["results"]],
                    "notes": notes, "topics": documents}
        _write_json_atomic(args.json, combined)
        print(f"wrote {args.json}")
    if args.plot:
        plot_results(documents, args.plot)
        print(f"wrote {args.plot}")
    return 0 if ok else 1
