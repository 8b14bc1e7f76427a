"""The chunk table of a compressed block: the record, and every check of one read from a file.

Part of the trust boundary: ``header.read_header`` hands each block entry that
names a codec to :meth:`ChunkTable.from_json`, which bounds everything before
work proportional to it: the chunk count against the raw size (and the stored
bytes, one at least per chunk), each chunk's stored size against its raw size
and against the most zstd can expand (``MAX_RATIO``), and the stored sizes'
sum against the block's tensor, which lies inside the file. A table that
passes cannot make a load allocate more than ``MAX_RATIO`` times the file's
size, nor read outside its tensor.

ChunkTable    codec, raw bytes per chunk, ``(stored size, CRC-32)`` per chunk
first_fields  the first field of each block, named in messages about blocks
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .constants import CODECS, MAX_CHUNK, MAX_RATIO, MIN_CHUNK

_CRC_TEXT = re.compile(r"[0-9a-f]{8}", re.ASCII)


@dataclass(frozen=True)
class ChunkTable:
    """How a compressed block is stored: chunks of ``chunk`` raw bytes (the last may be
    shorter), each ``(stored size, CRC-32 of the stored bytes)``; a chunk stored at its
    raw size is raw, a smaller one is one frame of ``codec``."""

    codec: str
    chunk: int
    chunks: tuple[tuple[int, int], ...]
    stored: int                         # the stored sizes' sum: the block's bytes in the file

    def raw_size(self, k: int, nbytes: int) -> int:
        """Raw bytes of chunk ``k`` of a block of ``nbytes``."""
        return min(self.chunk, nbytes - k * self.chunk)

    def to_json(self) -> dict:
        return {"codec": self.codec, "chunk": self.chunk,
                "chunks": [[size, f"{crc:08x}"] for size, crc in self.chunks]}

    @classmethod
    def from_json(cls, raw: dict, nbytes: int, declared: str, stored_total: int) -> ChunkTable:
        """The table of a block entry ``raw`` of ``nbytes`` raw bytes whose tensor is
        declared ``declared`` and holds ``stored_total`` bytes; ValueError saying what
        is wrong."""
        codec = raw["codec"]
        if not isinstance(codec, str) or codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r:.40} (this version of namedschema "
                             f"reads {sorted(CODECS)})")
        if declared != "U8":
            raise ValueError(f"a compressed block must be declared U8, not {declared}")
        chunk = raw.get("chunk")
        if type(chunk) is not int or not MIN_CHUNK <= chunk <= MAX_CHUNK:
            raise ValueError(f"chunk size {chunk!r:.40} is not an integer from {MIN_CHUNK} "
                             f"to {MAX_CHUNK}")
        if nbytes < 1:
            raise ValueError(f"a compressed block of {nbytes} bytes")
        entries: Any = raw.get("chunks")
        count = -(-nbytes // chunk)
        if not isinstance(entries, list) or len(entries) != count:
            got = len(entries) if isinstance(entries, list) else type(entries).__name__
            raise ValueError(f"the chunk table has {got} entries; {nbytes} bytes in chunks "
                             f"of {chunk} need {count}")
        if count > stored_total:    # every chunk takes at least one byte of the file
            raise ValueError(f"{count} chunks cannot fit in {stored_total} stored bytes")
        chunks = []
        total = 0
        for k, entry in enumerate(entries):
            if (not isinstance(entry, list) or len(entry) != 2 or type(entry[0]) is not int
                    or not isinstance(entry[1], str) or not _CRC_TEXT.fullmatch(entry[1])):
                raise ValueError(f"chunk {k} is not [stored size, 8 hex digits]: "
                                 f"{entry!r:.60}")
            size = entry[0]
            raw_len = min(chunk, nbytes - k * chunk)
            if not 1 <= size <= raw_len:
                raise ValueError(f"chunk {k} claims {size} stored bytes for {raw_len} raw "
                                 "bytes (at least 1, at most its raw size)")
            if raw_len > size * MAX_RATIO:
                raise ValueError(f"chunk {k} claims {raw_len} raw bytes from {size} stored "
                                 f"bytes, more than zstd can expand (x{MAX_RATIO})")
            total += size
            if total > stored_total:
                raise ValueError(f"its chunks hold more stored bytes than its tensor "
                                 f"({stored_total})")
            chunks.append((size, int(entry[1], 16)))
        if total != stored_total:
            raise ValueError(f"its chunks hold {total} stored bytes, its tensor "
                             f"{stored_total}")
        return cls(codec, chunk, tuple(chunks), total)


def first_fields(raw_arrays: list) -> dict[int, str]:
    """``{block: "field '<path>'"}`` for the first array of each block, for messages
    about blocks (read before the arrays are checked: the paths are only quoted)."""
    out: dict[int, str] = {}
    for entry in raw_arrays:
        if (isinstance(entry, dict) and type(entry.get("block")) is int
                and isinstance(entry.get("path"), str)):
            out.setdefault(entry["block"], f"field {entry['path']!r}")
    return out
