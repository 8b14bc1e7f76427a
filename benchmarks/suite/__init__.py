"""The benchmark suite behind ``namedschema bench``: its harness, runner and topics.

Each topic is a module of this package with ``main(argv=None) -> int``
(``python -m benchmarks.suite.<topic>``, or ``benchmarks/bench_<topic>.py``);
``namedschema bench`` runs every topic in ``TOPICS`` in its own subprocess and
combines their JSON. The suite runs from a source checkout: it is not part of the
installed package.

common   timing, result rows and tables, each topic's parser, child runs, the end
runner   ``namedschema bench`` itself: ``TOPICS``, ``run_topics``, ``plot_results``,
         ``main``
core, pickling, buffer, checkpoint, incremental, background, compression, replay
         the topics, in running order

This ``__init__`` only re-exports.
"""

from __future__ import annotations

from .common import (
    RATIO_NOTE,
    RLPYT_SKIP_NOTE,
    best_of,
    best_times,
    choice_list,
    compare,
    environment,
    finish,
    format_table,
    load_rlpyt_collections,
    result,
    run_in_child,
    target_met,
    topic_parser,
    write_json,
    write_json_atomic,
)
from .runner import TOPICS, check_outputs, plot_results, run_bench, run_topics

__all__ = [
    "TOPICS", "environment", "best_times", "best_of", "result", "compare", "target_met",
    "topic_parser", "choice_list", "run_in_child", "finish", "format_table", "write_json",
    "write_json_atomic", "plot_results", "check_outputs", "run_topics", "run_bench",
    "load_rlpyt_collections", "RLPYT_SKIP_NOTE", "RATIO_NOTE",
]
