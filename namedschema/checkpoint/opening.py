"""Opening a path as an untrusted checkpoint, and the one place read failures become FormatError.

open_checkpoint   open a regular file for reading (or ``r+``) without ever blocking:
                  FIFOs, devices, sockets and directories are refused
file_errors       ``with file_errors(name):`` turns any failure of reading the
                  file into a FormatError naming it (OSError and MemoryError excepted)

``load`` and ``inspect`` both open through ``open_checkpoint`` and run inside
``file_errors``, so they refuse the same files in the same words.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

from ..errors import FormatError, MissingClassError, MissingModuleError
from .atomic import file_kind
from .header import fail


def open_checkpoint(name: str, writable: bool = False) -> BinaryIO:
    """The unbuffered file ``name``, checked to be a regular file before any read.

    Opened with ``O_NONBLOCK`` (so a FIFO with no writer cannot block the
    open), checked with ``fstat`` on the open descriptor (no race with a
    rename), then switched back to blocking reads.
    """
    flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_NONBLOCK \
        | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(name, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            fail(name, f"is not a regular file ({file_kind(mode)}); checkpoints are "
                 "regular files")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return open(fd, "r+b" if writable else "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def file_errors(name: str) -> Iterator[None]:
    """Re-raise every failure inside as a FormatError naming ``name``.

    Header checks raise FormatError themselves; this catches what they cannot
    foresee (an exception from numpy, torch or a schema built from the file)
    so that no other exception type escapes ``load`` or ``inspect`` for a bad
    file. OSError (the file cannot be read), MemoryError and the errors of
    this process rather than the file (a module or class missing when
    unpickling, a codec's package missing: ModuleNotFoundError) pass unchanged.
    """
    try:
        yield
    except (FormatError, OSError, MemoryError, MissingModuleError, MissingClassError,
            ModuleNotFoundError):
        raise
    except RecursionError as exc:
        fail(name, "structure is nested too deeply", exc)
    except Exception as exc:  # the point: every failure of a bad file
        fail(name, f"cannot be loaded: {type(exc).__name__}: {exc}", exc)
