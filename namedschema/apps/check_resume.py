"""``namedschema check-resume``: does my training command resume exactly?

    namedschema check-resume [--kills K] [--seed S] [--timeout T] [--ignore PATTERN]...
                             [--json] -- COMMAND ARGS...

Runs the command uninterrupted, then K times SIGKILLed at random instants and
restarted until it finishes, each run in a fresh copy of the current
directory, and compares the audit records its checkpoints wrote
(:func:`namedschema.testing.check_resume`). Progress lines go to stderr (at each
run's end, and every 10 s with the step of the run under way), the
verdict to stdout (``--json``: the whole report as JSON). Exit status 0: every
resume was exact; 1: a resume (or the command itself) differs; 2: the check
could not be made (the command crashed, hung, never checkpointed) or a usage error.
``--ignore PATTERN`` (repeatable) leaves the parts whose ``OBJECT.PATH`` matches
out of the comparison (values that differ by design, such as a timestamp).

add_parser   register the subcommand on the ``namedschema`` parser
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_parser"]

EXIT_USAGE = 2


def _run(args: argparse.Namespace) -> int:
    from ..testing import check_resume
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("namedschema check-resume: error: give the command after --, such as: "
              "namedschema check-resume -- python train.py", file=sys.stderr)
        return EXIT_USAGE

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)
    try:
        report = check_resume(command, kills=args.kills, seed=args.seed, timeout=args.timeout,
                              copy=args.copy, keep=args.keep, progress=progress,
                              ignore=args.ignore)
    except (ValueError, OSError) as exc:
        print(f"namedschema check-resume: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.summary())
        if report.output and report.exit_code == 2:
            print("the command's last output:\n" + report.output.rstrip(), file=sys.stderr)
        if report.directory:
            print(f"the runs' directories: {report.directory}", file=sys.stderr)
    return report.exit_code


def _positive(kind: type) -> object:
    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be positive")
        return value
    return parse


def add_parser(sub: Any) -> None:
    """Add ``check-resume`` to the ``namedschema`` command's subparsers."""
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "check-resume", formatter_class=raw,
        help="kill your training command at random moments and check it resumes exactly",
        description="Run COMMAND once uninterrupted, then --kills more times SIGKILLed "
                    "(its whole process group) at random instants drawn from --seed: at a "
                    "random moment, right after a checkpoint write began, and twice (a "
                    "second kill after a resume); each time it is started again, unchanged, "
                    "until it finishes. Each run works in a fresh copy of the current "
                    "directory ($NAMEDSCHEMA_CHECK_DIR names it). The checkpoints' audit "
                    "records (RunCheckpoint, namedschema.rlpyt.resumable) are compared with "
                    "the uninterrupted run's: the step and the object of the first "
                    "difference are reported. Exit status 0 if every resume was exact, 1 if "
                    "one differs, 2 if the check could not be made.",
        epilog="examples:\n"
               "  namedschema check-resume -- python train.py --steps 2000\n"
               "  namedschema check-resume --kills 10 --seed 3 -- python train.py\n"
               "  namedschema check-resume --ignore 'envs.*.last_time' -- python train.py\n"
               "  namedschema check-resume --json --timeout 300 -- python train.py > report.json")
    p.add_argument("--kills", type=_positive(int), default=5, metavar="K",
                   help="how many runs to kill (default 5)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed of the kill instants (default 0)")
    p.add_argument("--timeout", type=_positive(float), default=600.0, metavar="T",
                   help="seconds each start of the command may take (default 600)")
    p.add_argument("--ignore", action="append", default=[], metavar="PATTERN",
                   help="leave the parts whose OBJECT.PATH (as a difference names them, "
                        "such as envs.*.episode_start_time) or object name matches this "
                        "shell-style pattern out of the comparison; repeatable (known "
                        "wall-clock values of env wrappers are left out already)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--keep", action="store_true",
                   help="keep the runs' directories (their path is printed)")
    p.add_argument("--no-copy", dest="copy", action="store_false",
                   help="run in the current directory instead of copies of it (the command "
                        "must then write its checkpoints under $NAMEDSCHEMA_CHECK_DIR)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS",
                   help="the training command, after --")
    p.set_defaults(func=_run)
