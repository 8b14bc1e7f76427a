"""A graph as the file stores it: structure nodes, or a pickle, plus its array table.

Both ways of saving (whole files and incremental saves) start here, so the
rule for when pickle is needed, and the error when it is not allowed, exist once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import NotDataError
from . import pickled
from .nodes import Encoder, NotData


@dataclass(frozen=True)
class EncodedGraph:
    """An encoded graph: its arrays and schemas (``encoder``) and structure or pickle."""

    encoder: Encoder
    structure: Any                  # the root node; None when pickled
    not_data: NotData | None        # the first value that is not data, if pickled
    pickle_bytes: bytes | None
    metadata: dict[str, str] = field(default_factory=dict)  # the caller's, stored as data


def encode_graph(obj: Any, path: str, allow_pickle: bool,
                 metadata: dict[str, str] | None = None) -> EncodedGraph:
    """Encode ``obj`` as data, or pickle it if that is allowed (else NotDataError)."""
    metadata = metadata or {}
    encoder = Encoder()
    structure, not_data = None, None
    try:
        structure = encoder.encode(obj)
    except NotData as exc:
        # Kept for its message only: its traceback would keep the caller's frames alive.
        not_data = exc.with_traceback(None)
    except RecursionError:
        not_data = NotData("", obj, "nested too deeply for the data path")
    if not_data is None:
        return EncodedGraph(encoder, structure, None, None, metadata)
    if not allow_pickle:
        raise NotDataError(path, not_data.path, not_data.type_name, not_data.why) from None
    encoder = Encoder()  # start again: the pickle holds the whole graph
    return EncodedGraph(encoder, None, not_data, pickled.dumps(obj, encoder.arrays), metadata)
