"""``namedschema bench``: run every topic in its own subprocess, combine, plot.

TOPICS        the registry of topic module names, in running order
run_topics    run topics in subprocesses and collect their results
plot_results  bar charts of the ratios (matplotlib, imported on use)
check_outputs refuse unwritable ``--json`` / ``--plot`` paths before anything runs
run_bench     carry out ``namedschema bench`` (the CLI parses its arguments)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from ..._core.extras import extra_hint
from .harness import run_python
from .rows import RATIO_NOTE, environment, format_table, target_met, write_json_atomic

__all__ = ["TOPICS", "run_topics", "plot_results", "check_outputs", "run_bench"]

# Topics run in this order (each is a module of this package).
TOPICS = ("core", "pickling", "buffer", "checkpoint", "incremental", "background", "replay")
#: The package the topic modules live in (``python -m PACKAGE.<topic>``).
PACKAGE = __name__.rpartition(".")[0]


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
            args = ["-m", f"{PACKAGE}.{topic}", "--json", out] + ["--quick"] * quick
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
        write_json_atomic(args.json, combined)
        print(f"wrote {args.json}")
    if args.plot:
        plot_results(documents, args.plot)
        print(f"wrote {args.plot}")
    return 0 if ok else 1
