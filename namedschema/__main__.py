"""The ``namedschema`` command (``python -m namedschema``); see ``namedschema.cli``.

main   the console-script entry point
"""

import sys

from .cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
