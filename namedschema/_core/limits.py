"""Documented limits on what a schema may be, wherever it is built.

A schema can be built from untrusted data (a checkpoint, a pickle, a
``torch.load(weights_only=True)`` file), so its size is bounded before any
work proportional to it: a file cannot make the process spend seconds and
gigabytes building one class.

MAX_FIELDS           the most fields a schema may have (and a checkpoint's
                     schemas together)
check_field_count    raise SchemaDefinitionError past MAX_FIELDS
"""

from __future__ import annotations

from ..errors import SchemaDefinitionError

__all__ = ["MAX_FIELDS", "check_field_count"]

MAX_FIELDS = 100_000


def check_field_count(kind: str, typename: str, count: int) -> None:
    """Refuse a schema of more than MAX_FIELDS fields, naming it."""
    if count > MAX_FIELDS:
        raise SchemaDefinitionError(
            f"{kind} {typename!r}: {count:,} fields, more than the limit of "
            f"{MAX_FIELDS:,} fields a schema may have")
