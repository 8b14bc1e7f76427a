"""JSON text from a file, parsed with its memory bounded before parsing.

``json.loads`` spends tens of bytes per value (an empty list ``[]`` costs
about 60), so a header of 90 MiB of ``[],`` would take gigabytes. The
number of values is bounded first, by counting bytes, at C speed.

parse_bounded   parse JSON text of at most MAX_JSON_VALUES values
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from .._core.instance import printable
from ..errors import FormatError
from .constants import MAX_JSON_VALUES


def _reject_constant(text: str) -> NoReturn:
    raise ValueError(f"non-standard JSON constant {text}")


def parse_bounded(name: str, text: Any, what: str) -> Any:
    """Parse JSON ``text`` (str or bytes) of file ``name`` after bounding its values.

    Every value but the first follows a ``,``, a ``:`` or an opening bracket,
    so counting those characters (string contents included, which only
    overestimates) bounds the values before ``json`` builds any of them.
    Nesting is bounded by the parser itself (``RecursionError``).

    Raises:
        FormatError: more than MAX_JSON_VALUES values.
        ValueError, TypeError, RecursionError: not JSON text (the caller
            reports these in its own words).
    """
    if isinstance(text, bytes):
        values = 1 + sum(text.count(m) for m in (b",", b":", b"[", b"{"))
    elif isinstance(text, str):
        values = 1 + sum(text.count(m) for m in (",", ":", "[", "{"))
    else:
        raise TypeError(f"expected JSON text, got {type(text).__name__}")
    if values > MAX_JSON_VALUES:
        raise FormatError(printable(
            f"{name!r}: {what} holds up to {values:,} JSON values, more than the limit "
            f"of {MAX_JSON_VALUES:,} (a hostile or corrupt header?)"))
    return json.loads(text, parse_constant=_reject_constant)
