"""A resumed rlpyt run continues its ``progress.csv`` instead of erasing it.

rlpyt's logger opens every tabular output with mode ``'w'``
(``rlpyt.utils.logging.logger.add_tabular_output``), so a resumed run that
calls ``logger_context`` again would erase the rows of the run it continues.
While a resume is set up (:func:`continue_tabular_logs`), ``add_tabular_output``
of a file that already has rows instead:

* drops the rows of iterations at or after the resumed one (the resumed run
  logs them again: they were logged after the checkpoint, before the kill),
  replacing the file atomically;
* opens it for appending, with rlpyt's header bookkeeping set from the
  file's header, so no second header is written.

The file then reads as the uninterrupted run's would. Nothing of rlpyt's code
on disk changes; the function is swapped in rlpyt's logger module and put
back by the returned callable.

continue_tabular_logs   make add_tabular_output continue existing files; returns the undo
open_tabular_logs       the tabular files rlpyt's logger has open now
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable

__all__ = ["continue_tabular_logs", "open_tabular_logs"]

ITERATION = "Iteration"   # the column every rlpyt runner logs (after a prefix such as
                          # "Diagnostics/")


def _logger():
    from rlpyt.utils.logging import logger
    return logger


def open_tabular_logs() -> list[str]:
    """The tabular (csv) files rlpyt's logger has open now."""
    return list(getattr(_logger(), "_tabular_outputs", []))


def continue_tabular_logs(resumed_itr: int) -> Callable[[], None]:
    """Until the returned callable is called, rlpyt's ``add_tabular_output`` continues a
    file that has rows (keeping those of iterations before ``resumed_itr``)."""
    logger = _logger()
    original = logger.add_tabular_output

    def add_tabular_output(file_name):
        header = None
        if file_name not in logger._tabular_fds_hold and file_name not in logger._tabular_fds:
            header = _keep_rows_before(file_name, resumed_itr)
        if header is None:
            return original(file_name)
        logger._add_output(file_name, logger._tabular_outputs, logger._tabular_fds, mode="a")
        logger._tabular_header_written.add(file_name)
        logger._tabular_headers[file_name] = header
        return None

    add_tabular_output.__wrapped__ = original  # type: ignore[attr-defined]
    logger.add_tabular_output = add_tabular_output

    def undo() -> None:
        if logger.add_tabular_output is add_tabular_output:
            logger.add_tabular_output = original
    return undo


def _keep_rows_before(file_name: str, itr: int) -> list[str] | None:
    """Cut ``file_name`` to its header and rows of iterations before ``itr``; its header,
    or None if the file does not exist or has no header (rlpyt then starts it anew)."""
    try:
        with open(file_name, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if not rows or not rows[0]:
        return None
    header, body = rows[0], rows[1:]
    column = next((i for i, name in enumerate(header)
                   if name == ITERATION or name.endswith("/" + ITERATION)), None)
    if column is None:
        return header
    kept = [row for row in body if not _at_or_after(row, column, itr)]
    if len(kept) != len(body):
        tmp = f"{file_name}.namedschema-{os.getpid()}.tmp"
        with open(tmp, "w", newline="") as f:
            csv.writer(f).writerows([header, *kept])
        os.replace(tmp, file_name)
    return header


def _at_or_after(row: list[str], column: int, itr: int) -> bool:
    try:
        return float(row[column]) >= itr
    except (IndexError, ValueError):
        return False
