"""The caller's metadata: plain strings in the header, readable without loading anything.

A checkpoint may carry a few ``str -> str`` pairs (``save(..., metadata=)``),
stored as data in the header. They say what a file is (``{"kind":
"namedschema.rlpyt.resume", "version": "1"}``) before any of it is loaded, so
a reader can refuse a file of the wrong kind before it unpickles anything
(``load(..., expect_metadata=)``, ``inspect(path).metadata``).

MAX_METADATA            pairs a file may hold
metadata_problem        what is wrong with a metadata value, or None
check_metadata_argument ``save``'s argument as a dict, or TypeError/ValueError
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_METADATA", "metadata_problem", "check_metadata_argument"]

MAX_METADATA = 64
MAX_KEY = 200
MAX_VALUE = 10_000
_RULE = (f"at most {MAX_METADATA} pairs of strings, keys up to {MAX_KEY} characters, "
         f"values up to {MAX_VALUE:,}")


def metadata_problem(raw: Any) -> str | None:
    """Why ``raw`` is not valid metadata (as stored in a file), or None."""
    if not isinstance(raw, dict):
        return f"must be an object of strings, not {type(raw).__name__}"
    if len(raw) > MAX_METADATA or not all(
            type(k) is str and type(v) is str and len(k) <= MAX_KEY and len(v) <= MAX_VALUE
            for k, v in raw.items()):
        return f"must hold {_RULE}"
    return None


def check_metadata_argument(metadata: Any, where: str = "save") -> dict[str, str]:
    """``metadata`` (None or a mapping) as a dict, or a TypeError/ValueError saying why not."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(
            type(k) is str and type(v) is str for k, v in metadata.items()):
        raise TypeError(f"{where}: metadata must be a mapping of str to str (plain strings "
                        "that anyone can read without loading the file)")
    problem = metadata_problem(dict(metadata))
    if problem:
        raise ValueError(f"{where}: metadata {problem}")
    return dict(metadata)
