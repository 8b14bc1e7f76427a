"""What ``resumable`` checks and says at the start of a run, before any training.

A resume must say so: rlpyt's own log of a resumed run reads like a fresh start
(its startup counts from iteration 0), and rerunning a command to start anew
would quietly continue the old run. And a checkpoint path that cannot be written
must be refused when the run starts, not at the first checkpoint hours later.

check_target      refuse a checkpoint path that cannot be written (at ``resumable()``)
lack_of_room      a run whose state does not fit the free space (said at startup)
say_resumed       the one line that says a run resumed, through rlpyt's logger
continue_logs     rlpyt's progress.csv continues across the resume
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...checkpoint.destination import free_bytes, state_bytes, unwritable
from ...errors import ResumeError
from ..patch.tabular_logs import continue_tabular_logs, open_tabular_logs

__all__ = ["check_target", "lack_of_room", "say_resumed", "continue_logs"]

log = logging.getLogger("namedschema.rlpyt")


def check_target(path: str) -> None:
    """Raise ResumeError if no checkpoint can be written at ``path``."""
    why = unwritable(path)
    if why:
        raise ResumeError(f"resumable: cannot write checkpoints to {path!r}: {why}")


def lack_of_room(path: str, state: Any) -> str | None:
    """Why the run's state (its replay buffer full) does not fit the space a checkpoint at
    ``path`` may take, or None if it fits."""
    need, free = state_bytes(state), free_bytes(path)
    if need <= free:
        return None
    return (f"resumable: the checkpoints at {path!r} need about {_human(need)} (the run's "
            f"state, its replay buffer included), but only {_human(free)} are free there; "
            "free some space or pass a path on another file system")


def say_resumed(path: str, itr: int, steps: int) -> str:
    """Say, once, that the run continues from ``path``; returns the line."""
    line = (f"namedschema: resumed {path} at itr {itr:,} (step {steps:,}); rlpyt's startup "
            f"lines above count from 0, training continues at itr {itr:,}; "
            f"delete {path} to start fresh")
    log.info(line)
    try:
        from rlpyt.utils.logging import logger
    except ImportError:  # pragma: no cover - resumable needs rlpyt
        print(line, flush=True)
    else:
        logger.log(line)
    return line


def continue_logs(resumed_itr: int, note: Callable[[str], None]) -> Callable[[], None]:
    """rlpyt's ``progress.csv`` (opened by ``logger_context`` after this) continues its rows
    before ``resumed_itr``; files it already opened (erased) are said through ``note``.
    Returns the undo."""
    for name in open_tabular_logs():
        note(f"rlpyt's tabular log {name} was opened (and emptied by rlpyt) before "
             "resumable() was called: the rows of the run it resumes are gone; call "
             "resumable() before logger_context() to keep them")
    return continue_tabular_logs(resumed_itr)


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover
