"""Result rows and their ratios, tables and JSON files.

result            one result row, with its ratio against a reference value
compare           rows for several contenders against one of them
target_met        whether a ratio meets a target such as ``"<= 1.1"``
format_table      the human-readable table of result rows
environment       the machine / library facts stored with every result file
write_json        write a topic's result file in the shared shape
write_json_atomic write any JSON document through a temporary file renamed over the target
RATIO_NOTE        the line under every table that says how to read ratios
"""

from __future__ import annotations

import json
import os
import platform
import uuid

__all__ = ["result", "compare", "target_met", "format_table", "environment", "write_json",
           "write_json_atomic", "RATIO_NOTE"]

RATIO_NOTE = ("ratio = value / reference value measured in the same run; "
              "for every metric here lower is better")


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
    write_json_atomic(path, doc)


def write_json_atomic(path: str, doc: dict) -> None:
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
