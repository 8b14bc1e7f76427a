"""The ``namedschema`` command (``python -m namedschema``)."""

import argparse
import sys

from . import __version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="namedschema", description=__doc__)
    parser.add_argument("--version", action="version", version=f"namedschema {__version__}")
    parser.parse_args(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
