"""The ``namedschema`` command (``python -m namedschema``); see ``namedschema.apps.cli``.

main   the console-script entry point
"""

import sys

from .apps.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
