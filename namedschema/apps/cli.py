"""The ``namedschema`` command line: ``demo``, ``inspect``, ``verify`` and ``bench``.

Also run as ``python -m namedschema``. User mistakes (a missing file, a file
that is not a namedschema checkpoint, a bad option) print one line on stderr
and exit with status 2, never a traceback.

``bench`` is a thin entry point: it runs ``benchmarks/suite`` of the source checkout
the package sits in (``benchmarks/`` next to ``namedschema/``) with its arguments, and
where there is none (an installed package) says in one line to run it from a clone.

build_parser   the argparse parser with every subcommand
parse_size     ``"64MB"`` / ``"1GiB"`` / ``"500000"`` -> a number of bytes
main           the console-script entry point
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable

from .._core.instance import printable
from .._version import __version__

__all__ = ["build_parser", "parse_size", "main"]

EXIT_USAGE = 2
#: What ``namedschema bench`` says where the package has no source checkout around it.
NO_BENCHMARKS = ("the benchmarks are not part of the installed package: clone the "
                 "namedschema repository and run 'python -m namedschema bench' from its root")

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30,
          "tib": 2**40}


def parse_size(text: str) -> int:
    """A size such as ``64MB``, ``1GB``, ``16GiB`` or ``500000`` as a number of bytes.

    KB/MB/GB/TB are powers of 1000; K/M/G and KiB/MiB/GiB/TiB powers of 1024.

    Args:
        text: the size; case and a space before the unit do not matter.

    Returns:
        The size in bytes.

    Raises:
        argparse.ArgumentTypeError: the text is not a positive size.

    >>> parse_size("64MB"), parse_size("1 GiB"), parse_size("512")
    (64000000, 1073741824, 512)
    """
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match and match.group(2).lower()
    if not match or unit not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: expected a number with an optional unit "
            "(KB, MB, GB, TB, KiB, MiB, GiB, TiB), such as 64MB or 16GB")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: must be positive")
    return size


def _fail(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _run_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    try:
        return run_demo(size=args.size, workdir=args.workdir, seed=args.seed,
                        progress=args.progress, keep=args.keep)
    except OSError as exc:  # an unwritable --workdir, a full disk
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        return _fail("namedschema demo", f"{exc.strerror or exc}{where}")
    except MemoryError:
        return _fail("namedschema demo", f"not enough memory for a buffer of "
                                         f"{args.size:,} bytes; try a smaller --size")


def _unreadable(path: str) -> str | None:
    """Why ``path`` cannot be read as a file at all (missing, a directory, ...), or None.

    Asked before the file is read, so that ``inspect`` and ``verify`` say the same
    thing, with the same status (2), for a path that names no file.
    """
    import os
    import stat

    from ..checkpoint._write import file_kind
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        return f"{path}: is {file_kind(mode)}, not a checkpoint file"
    return None


def _message(path: str, exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return printable(f"{path}: {exc.strerror}")
    text = str(exc)  # format errors name the file themselves
    return printable(text if str(path) in text else f"{path}: {text}")


def _run_inspect(args: argparse.Namespace) -> int:
    from ..checkpoint import inspect as inspect_file
    from ..checkpoint._read import describe
    from ..errors import FormatError
    why = _unreadable(args.path)
    if why:
        return _fail("namedschema inspect", printable(why))
    try:
        report = inspect_file(args.path)
    except (FormatError, OSError) as exc:
        return _fail("namedschema inspect", _message(args.path, exc))
    print(describe(report, full=args.full))
    return 0


def _run_verify(args: argparse.Namespace) -> int:
    from ..checkpoint._read import verify
    from ..errors import FormatError
    why = _unreadable(args.path)
    if why:  # nothing to verify: a usage error, as for inspect
        return _fail("namedschema verify", printable(why))
    try:
        info = verify(args.path, progress=args.progress and sys.stderr.isatty())
    except (FormatError, OSError) as exc:
        print(f"namedschema verify: FAILED: {_message(args.path, exc)}", file=sys.stderr)
        return 1
    stored = (f" (stored compressed in {info.stored_bytes:,} bytes: every chunk checked)"
              if info.compressed else "")
    print(f"{printable(str(args.path))}: ok, {info.data_bytes:,} bytes of data in "
          f"{len(info.fields)} arrays match their checksums{stored}")
    return 0


def _benchmarks_parent() -> str | None:
    """The source checkout around this namedschema package, if it has ``benchmarks/suite``."""
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    suite = os.path.join(root, "benchmarks", "suite", "runner.py")
    return root if os.path.isfile(suite) else None


def _run_bench(argv: list[str]) -> int:
    """``namedschema bench ARGS``: ``benchmarks.suite.runner.main(ARGS)`` of the checkout.

    The benchmarks are not part of the installed package: they run from a source
    checkout, whose ``benchmarks`` folder sits next to the ``namedschema`` folder.
    """
    import importlib
    import os
    root = _benchmarks_parent()
    if root is None:
        return _fail("namedschema bench", NO_BENCHMARKS)
    if root not in sys.path:
        sys.path.insert(0, root)
    runner = importlib.import_module("benchmarks.suite.runner")
    where = os.path.abspath(runner.__file__ or "")
    if not where.startswith(os.path.join(root, "benchmarks", "")):  # another 'benchmarks'
        return _fail("namedschema bench", f"'benchmarks' is imported from {where}, not from "
                                          f"{root}; run 'python -m namedschema bench' there")
    status: int = runner.main(argv)    # benchmarks.suite.runner.main: an exit status
    return status


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``namedschema`` command, with its subcommands.

    Each subcommand's parser stores its handler in ``func``, except ``bench``'s: its
    arguments are parsed by the benchmarks themselves (see :func:`main`).
    """
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="namedschema", formatter_class=raw,
        description="Named tuples and named array tuples that pickle by value: "
                    "a demo, a checkpoint inspector and verifier, and the benchmarks.",
        epilog="examples:\n"
               "  namedschema demo                 # the resume scenario, 64 MB\n"
               "  namedschema inspect buffer.nsb   # what is inside a checkpoint\n"
               "  namedschema verify buffer.nsb    # check every byte against its checksum\n"
               "  namedschema bench --quick        # every benchmark, tiny sizes\n\n"
               "'namedschema COMMAND --help' describes each command.")
    parser.add_argument("--version", action="version", version=f"namedschema {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo", formatter_class=raw, help="checkpoint a replay buffer and resume it "
                                         "in a fresh interpreter",
        description="Build a replay buffer of Atari-like transitions, checkpoint it with "
                    "pickle (protocol 4) and with namedschema.save, load each in a fresh "
                    "interpreter that never defined the schema, verify the contents bit "
                    "for bit, and check that sampling resumes exactly like an "
                    "uninterrupted twin. Also shows what rlpyt-style classes made at run "
                    "time do under the same treatment. Exit status 0 only if every check "
                    "passed.",
        epilog="examples:\n"
               "  namedschema demo\n"
               "  namedschema demo --size 1GB\n"
               "  namedschema demo --size 16GB --workdir /scratch   # needs 2x16 GB disk\n"
               "  namedschema demo --keep --workdir ./demo-files    # keep the checkpoints")
    demo.add_argument("--size", type=parse_size, default=parse_size("64MB"), metavar="SIZE",
                      help="approximate buffer size (default 64MB; accepts KB, MB, GB, "
                           "KiB, MiB, GiB)")
    demo.add_argument("--workdir", metavar="DIR",
                      help="directory for the checkpoint files (default: a temporary "
                           "directory, deleted afterwards)")
    demo.add_argument("--keep", action="store_true",
                      help="keep the checkpoint files (with --workdir)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the synthetic data and "
                                                          "of sampling (default 0)")
    demo.add_argument("--no-progress", dest="progress", action="store_false",
                      help="no progress bars")
    demo.set_defaults(func=_run_demo)

    inspect = sub.add_parser(
        "inspect", formatter_class=raw, help="show the structure of a saved file",
        description="Print the structure of a file written by namedschema.save as a tree: "
                    "schema names, fields, shapes, dtypes, bytes per field, the total, the "
                    "format version and whether loading needs allow_pickle. Reads only the "
                    "header, so it is instant even for a 16 GB checkpoint.",
        epilog="examples:\n"
               "  namedschema inspect replay.nsb\n"
               "  namedschema inspect run.nsc --full | less    # RNG states in full too")
    inspect.add_argument("path", metavar="PATH", help="file written by namedschema.save")
    inspect.add_argument("--full", action="store_true",
                         help="print generator states and long tuples in full (by "
                              "default each takes one line)")
    inspect.set_defaults(func=_run_inspect)

    verify = sub.add_parser(
        "verify", formatter_class=raw, help="check every byte of a saved file against its "
                                           "checksums",
        description="Read every data block of a file written by namedschema.save and check "
                    "it against its stored CRC-32 (inspect reads only the header, so it "
                    "cannot see damaged data). Never unpickles anything, so it is safe on "
                    "files you do not trust. Exit status 0 if the file is intact, 1 if it "
                    "is damaged, truncated or not a namedschema file, 2 for usage errors "
                    "(a missing file, a directory).",
        epilog="examples:\n"
               "  namedschema verify replay.nsb\n"
               "  namedschema verify run.nsc && cp run.nsc /backup/")
    verify.add_argument("path", metavar="PATH", help="file written by namedschema.save")
    verify.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar (none is shown when stderr is not a terminal)")
    verify.set_defaults(func=_run_verify)

    # Listed here; main() hands its arguments to the benchmarks of a source checkout,
    # whose parser ('namedschema bench --help') takes them.
    sub.add_parser("bench", add_help=False,
                   help="run the benchmarks and print ratio tables (from a source checkout)")

    from .check_resume import add_parser as add_check_resume
    add_check_resume(sub)
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    """Run the ``namedschema`` command.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 when a check or benchmark failed,
        2 for usage errors and unreadable files.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    command: str
    run: Callable[[], int]
    if argv[:1] == ["bench"]:
        command, run = "bench", lambda: _run_bench(argv[1:])
    else:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse exits for --help, --version and usage errors
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        command, run = args.command, lambda: args.func(args)
    try:
        return run()
    except KeyboardInterrupt:
        print(f"namedschema {command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (``| head``) went away; silence the flush at exit.
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
