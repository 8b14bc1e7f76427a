"""The benchmark harness: timing, result rows, tables, JSON, plots and the runner.

Each topic lives in ``namedschema.apps.bench.<topic>`` and exposes
``main(argv=None) -> int``; ``namedschema bench`` runs every topic in
``TOPICS`` in its own subprocess and combines their JSON.

This ``__init__`` only re-exports; the code is in:

* ``timing``: ``best_times`` (interleaved, repeated timing), ``best_of``
* ``rows``: ``result``, ``compare``, ``target_met``, ``format_table``,
  ``environment``, ``write_json`` (result rows, their tables and files)
* ``topic``: ``topic_parser``, ``choice_list``, ``run_in_child``,
  ``load_rlpyt_collections``, ``finish`` (what every topic's ``main`` shares)
* ``runner``: ``TOPICS``, ``run_topics``, ``plot_results``, ``run_bench``
  (``namedschema bench`` itself)
* ``harness``: child processes, peak RSS, round rotation and the Atari-like
  example (``demo`` uses them too)
"""

from __future__ import annotations

from .rows import (
    RATIO_NOTE,
    compare,
    environment,
    format_table,
    result,
    target_met,
    write_json,
    write_json_atomic,
)
from .runner import TOPICS, check_outputs, plot_results, run_bench, run_topics
from .timing import best_of, best_times
from .topic import (
    RLPYT_SKIP_NOTE,
    choice_list,
    finish,
    load_rlpyt_collections,
    run_in_child,
    topic_parser,
)

__all__ = [
    "TOPICS", "environment", "best_times", "best_of", "result", "compare", "target_met",
    "topic_parser", "choice_list", "run_in_child", "finish", "format_table", "write_json",
    "write_json_atomic", "plot_results", "check_outputs", "run_topics", "run_bench",
    "load_rlpyt_collections", "RLPYT_SKIP_NOTE", "RATIO_NOTE",
]
