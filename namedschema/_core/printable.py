"""Text from untrusted files made safe to print on a terminal.

A name, key or reason read from a checkpoint may hold control characters
(ESC sequences, carriage returns, bidi overrides) that rewrite what a terminal
shows. Every such string passes through :func:`printable` before it is put
in a message or a report.

printable   escape every character ``str.isprintable`` rejects, as ``repr`` does
"""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every non-printable character escaped (``\\x1b``, ``\\n``, ``\\u202e``).

    Printable text (spaces included) is returned unchanged, so ordinary
    names read as they are; backslashes are left alone, so escaping twice
    changes nothing more. With ``keep_newlines``, ``\\n`` is kept (for
    multi-line reports whose lines are escaped already).

    >>> printable("obs\\x1b[2K\\rpos")
    'obs\\\\x1b[2K\\\\rpos'
    >>> printable("a\\nb", keep_newlines=True)
    'a\\nb'
    """
    text = str(text)
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable() or (keep_newlines and char == "\n"):
            out.append(char)
        else:
            out.append(repr(char)[1:-1])
    return "".join(out)
