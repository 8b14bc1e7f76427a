"""``namedschema bench``: run every topic in its own subprocess, combine, plot.

``namedschema bench ARGS`` (``namedschema.apps.cli``) finds this package next to the
namedschema package of a source checkout and calls :func:`main` with ``ARGS``;
``python -m benchmarks.suite.runner ARGS`` does the same.

TOPICS        the registry of topic module names, in running order
run_topics    run topics in subprocesses and collect their results
plot_results  bar charts of the ratios (matplotlib, imported on use)
check_outputs refuse unwritable ``--json`` / ``--plot`` paths before anything runs
QUICK_NOTE    what ``--quick`` prints about its ratios and missed targets
run_bench     carry out ``namedschema bench`` for parsed arguments
build_parser  the argument parser of ``namedschema bench``
main          parse the arguments and run; usage errors are one line and status 2
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from namedschema._core.instance import printable
from namedschema._core.tree import extra_hint

from .common import (
    PACKAGE,
    PROGRESS_PREFIX,
    RATIO_NOTE,
    child_env,
    choice_list,
    environment,
    format_table,
    target_met,
    write_json_atomic,
)

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["TOPICS", "run_topics", "plot_results", "check_outputs", "QUICK_NOTE", "run_bench",
           "build_parser", "main"]

#: What ``namedschema bench`` calls itself in its usage lines and messages.
PROG = "namedschema bench"
#: The exit status of a usage error (as every ``namedschema`` command).
EXIT_USAGE = 2

# Topics run in this order (each is a module of this package).
TOPICS = ("core", "pickling", "buffer", "checkpoint", "incremental", "background", "compression",
          "replay")
#: Seconds without a progress line from a topic after which the runner says it still runs.
HEARTBEAT_S = 15.0

#: Printed after the tables of a ``--quick`` run, before its missed targets.
QUICK_NOTE = ("quick run: tiny sizes and few repeats, so every ratio is indicative and "
              "so is each missed target below: at these sizes timing noise moves a ratio "
              "near its target to either side of it from run to run (more on a busy or "
              "shared machine), and the list of misses changes between runs; run without "
              "--quick for numbers to quote")


def _run_topic(args: list[str], topic: str, *, timeout: float, heartbeat: float,
               log: TextIO) -> subprocess.CompletedProcess[str]:
    """Run ``python <args>`` for ``topic``; show its progress lines on ``log`` as they come.

    A topic's stderr lines that start with ``PROGRESS_PREFIX`` are passed on at once;
    its other stderr output and its stdout are returned. When no line came for
    ``heartbeat`` seconds, a line says the topic still runs, so none is silent.

    Raises:
        subprocess.TimeoutExpired: the topic ran longer than ``timeout`` (it is killed).
    """
    proc = subprocess.Popen([sys.executable, "-B", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())
    lines: queue.Queue[str | None] = queue.Queue()
    stdout: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    def read_stdout() -> None:
        assert proc.stdout is not None
        stdout.append(proc.stdout.read())

    readers = [threading.Thread(target=f, daemon=True) for f in (read_stderr, read_stdout)]
    for reader in readers:
        reader.start()
    start = last = time.monotonic()
    stderr: list[str] = []
    try:
        while True:
            now = time.monotonic()
            if now - start > timeout:
                raise subprocess.TimeoutExpired(args, timeout)
            try:
                line = lines.get(timeout=max(0.01, min(last + heartbeat - now,
                                                       start + timeout - now)))
            except queue.Empty:
                if time.monotonic() - last >= heartbeat:
                    print(f"[bench] {topic}: still running ({time.monotonic() - start:.0f} s)",
                          file=log, flush=True)
                    last = time.monotonic()
                continue
            if line is None:
                break
            if line.startswith(PROGRESS_PREFIX):
                print(line.rstrip("\n"), file=log, flush=True)
                last = time.monotonic()
            else:
                stderr.append(line)
        proc.wait(timeout=max(1.0, start + timeout - time.monotonic()))
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        for reader in readers:
            reader.join(timeout=5)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(stdout),
                                       "".join(stderr))


def run_topics(topics: Iterable[str], *, quick: bool, verbose: bool = False,
               timeout: float = 3600, log: TextIO | None = None,
               heartbeat: float = HEARTBEAT_S) -> tuple[list[dict[str, Any]], list[str], bool]:
    """Run each topic's ``main`` in a fresh subprocess and collect its results.

    Args:
        topics: topic names to run.
        quick: pass ``--quick`` to each topic.
        verbose: let each topic's own output through (to ``log``).
        timeout: seconds allowed per topic.
        log: text stream for progress lines (defaults to stderr): each topic's
            start and end, its own progress lines (a case begun) as they come, and
            a line whenever it said nothing for ``heartbeat`` seconds.
        heartbeat: seconds of silence after which a line says a topic still runs.

    Returns:
        (documents, notes, all_ok): the JSON document of each topic that ran,
        notes about skipped or failed topics, and whether none failed.
    """
    log = log or sys.stderr
    documents, notes, ok = [], [], True
    with tempfile.TemporaryDirectory(prefix="namedschema-bench-") as tmp:
        for topic in topics:
            out = os.path.join(tmp, f"{topic}.json")
            args = ["-m", f"{PACKAGE}.{topic}", "--json", out] + ["--quick"] * quick
            print(f"[bench] {topic}: running ...", file=log, flush=True)
            start = time.perf_counter()
            try:
                proc = _run_topic(args, topic, timeout=timeout, heartbeat=heartbeat, log=log)
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


def _ratio_rows(documents: Iterable[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in documents:
        for row in doc["results"]:
            # A ratio of 0 (e.g. no extra memory at all) has no place on a log axis.
            if row.get("ratio") is not None and row["ratio"] > 0:
                yield doc["topic"], row


def plot_results(documents: list[dict[str, Any]], path: str) -> None:
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


def _import_matplotlib() -> ModuleType:
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("--plot needs matplotlib, which is not installed: "
                          + extra_hint("plot")) from exc
    return matplotlib


def plot_formats() -> list[str]:
    """The file extensions (without the dot) matplotlib's ``savefig`` writes here.

    Raises:
        ImportError: matplotlib is not installed (the message says how to get it).
    """
    _import_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase
    return sorted(FigureCanvasBase.get_supported_filetypes())


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any benchmark runs, output paths that could not be written at the end.

    Raises:
        OSError: the folder of ``--json`` / ``--plot`` is missing or not writable, or
            the path is a folder (the message names the option and the path).
        ImportError: ``--plot`` is given and matplotlib cannot be imported.
        ValueError: the ``--plot`` path has no extension, or one matplotlib cannot
            write (the message names the path and the extensions it can).
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
        formats = plot_formats()
        extension = os.path.splitext(args.plot)[1][1:]
        if extension.lower() not in formats:
            what = f"the extension .{extension}" if extension else "no extension"
            raise ValueError(f"--plot {args.plot}: {what}: matplotlib writes "
                             f"{', '.join('.' + f for f in formats)} (the extension picks "
                             "the format; .png is the usual one)")
        _try_plot_format(args.plot, extension)


def _try_plot_format(path: str, extension: str) -> None:
    """Save a tiny figure with text as ``extension`` into a temporary folder: some formats
    need more than matplotlib (.pgf needs LaTeX; .avif a Pillow built with it)."""
    matplotlib = _import_matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(1, 1))
    fig.text(0.5, 0.5, "1.0x")        # text, as the plot has (.pgf needs LaTeX for it)
    try:
        with tempfile.TemporaryDirectory(prefix="namedschema-bench-plot-") as tmp:
            fig.savefig(os.path.join(tmp, f"probe.{extension}"))
    except Exception as exc:  # whatever the format's writer raises: said, not a traceback
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"--plot {path}: matplotlib cannot write .{extension} files here "
                         f"({type(exc).__name__}: {first}); use .png") from exc
    finally:
        plt.close(fig)


def run_bench(args: argparse.Namespace) -> int:
    """Carry out ``namedschema bench`` for arguments parsed by :func:`build_parser`."""
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
        print(QUICK_NOTE)
    label = " (indicative: a quick run)" if args.quick else ""
    print(f"targets met: {met}, missed: {len(missed)}{label}"
          + "".join(f"\n  missed{' (indicative)' if args.quick else ''}: {t} {r['case']} "
                    f"{r['contender']} {r['ratio']:.2f}x (target {r['target']})"
                    for t, r in missed))
    if args.json:
        combined = {"topic": "all", "quick": bool(args.quick), "environment": environment(),
                    "results": [dict(r, topic=doc["topic"]) for doc in documents
                                for r in doc["results"]],
                    "notes": notes, "topics": documents}
        write_json_atomic(args.json, combined)
        print(f"wrote {args.json}")
    if args.plot:
        plot_results(documents, args.plot)
        print(f"wrote {args.plot}")
    return 0 if ok else 1


def _topic_list(text: str) -> tuple[str, ...]:
    return choice_list(TOPICS, "topic")(text)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``namedschema bench``."""
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"Run every benchmark topic ({', '.join(TOPICS)}; each in "
                    "its own subprocess) and print tables of ratios against references "
                    "measured in the same run: stdlib namedtuple, pickle, np.save, joblib, "
                    "raw writes, and rlpyt's own types when RLPYT_SRC points at an rlpyt "
                    "source tree. Exit status 1 if a topic failed to run.",
        epilog="examples:\n"
               "  namedschema bench --quick\n"
               "  RLPYT_SRC=~/src/rlpyt namedschema bench --json bench.json --plot bench.png\n"
               "  namedschema bench --topics core,pickling")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and few repeats (what CI runs)")
    parser.add_argument("--json", metavar="FILE", help="write all results to FILE as JSON")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="draw the ratios as bar charts (needs matplotlib: "
                             "the plot extra)")
    parser.add_argument("--topics", metavar="NAME,...", type=_topic_list,
                        help=f"run only these topics (of {', '.join(TOPICS)})")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show each topic's own output as it finishes")
    return parser


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    """Run ``namedschema bench`` with ``argv`` (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 when every topic ran, 1 when one failed, 2 for usage errors
        (a bad option, an output path that cannot be written, ``--plot`` without
        matplotlib or in a format it cannot write), each said in one line on stderr.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits for --help and usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        check_outputs(args)       # before anything runs (run_bench checks again: cheap)
        return run_bench(args)
    except ImportError as exc:  # --plot without matplotlib (checked before the run)
        return _fail(str(exc))
    except OSError as exc:  # an output path that cannot be written (checked before the run)
        return _fail(printable(str(exc)))
    except ValueError as exc:  # a --plot format matplotlib cannot write (checked first)
        if not str(exc).startswith("--plot "):
            raise
        return _fail(printable(str(exc)))


if __name__ == "__main__":
    sys.exit(main())
