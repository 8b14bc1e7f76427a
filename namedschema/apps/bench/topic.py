"""What every topic's ``main`` shares: its argument parser, child runs, rlpyt, the end.

topic_parser            the argparse parser every topic shares (--quick, --json, --cases)
choice_list             an argparse type for a comma-separated subset of names
run_in_child            run a topic's ``_child`` in a fresh interpreter, get its JSON back
load_rlpyt_collections  rlpyt's collections module loaded from ``RLPYT_SRC``, or None
RLPYT_SKIP_NOTE         the note of a topic whose rlpyt rows were skipped
PROGRESS_PREFIX         what starts a progress line, which ``namedschema bench`` shows live
progress                say on stderr how far a topic has got (a case begun or done)
missing_extra_note      the note of cases skipped because an optional package is missing
finish                  print a topic's table, write its JSON; the end of every ``main``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Sequence

from .harness import run_python
from .rows import RATIO_NOTE, format_table, write_json

__all__ = ["topic_parser", "choice_list", "run_in_child", "load_rlpyt_collections",
           "RLPYT_SKIP_NOTE", "PROGRESS_PREFIX", "progress", "missing_extra_note", "finish"]

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
    from ..._core.extras import extra_hint
    return (f"{topic}: skipped {', '.join(cases)}: {why}, and {module} is not installed "
            f"({extra_hint(module)})")


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


def finish(topic: str, args, results: list, notes: Sequence[str] = ()) -> int:
    """Print a topic's table and notes, write its JSON if asked; return the exit code."""
    print(format_table(results, title=f"{topic}{' (quick)' if args.quick else ''}"))
    for note in notes:
        print(f"note: {note}")
    print(RATIO_NOTE)
    if args.json:
        write_json(args.json, topic, args.quick, results, notes=list(notes))
    return 0
