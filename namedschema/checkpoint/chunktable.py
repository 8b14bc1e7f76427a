"""The chunk table of a compressed block: the record, and every check of one read from a file.

Part of the trust boundary: ``header.read_header`` hands each block entry that
names a codec to :meth:`ChunkTable.from_json`, which bounds everything before
work proportional to it: the chunk count against the raw size (and the stored
bytes, one at least per chunk), each chunk's stored size against its raw size
and against the most zstd can expand (``MAX_RATIO``), and the stored sizes'
sum against the block's tensor, which lies inside the file. A table that
passes cannot make a load allocate more than ``MAX_RATIO`` times the file's
size, nor read outside its tensor.

A table may also place its chunks (``offsets``, written by incremental compressed
saves): each chunk's position in the tensor, which then also holds free space;
placed chunks must lie inside the tensor and not overlap. It may list each chunk's
raw CRC-32 (``raw_crc32``, written by incremental compressed saves): one per chunk,
eight lower-case hex digits each.

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
    raw size is raw, a smaller one is one frame of ``codec``. Chunks follow each other
    in the tensor, or, with ``offsets``, each lies at its offset in it."""

    codec: str
    chunk: int
    chunks: tuple[tuple[int, int], ...]
    stored: int                         # the block's bytes in the file: its tensor's size
    offsets: tuple[int, ...] | None = None   # each chunk's place in the tensor, if placed
    raw_crcs: tuple[int, ...] | None = None  # each chunk's raw CRC-32, if listed

    def raw_size(self, k: int, nbytes: int) -> int:
        """Raw bytes of chunk ``k`` of a block of ``nbytes``."""
        return min(self.chunk, nbytes - k * self.chunk)

    def starts(self) -> list[int]:
        """Where each chunk's stored bytes start in the block's tensor."""
        if self.offsets is not None:
            return list(self.offsets)
        out, at = [], 0
        for size, _crc in self.chunks:
            out.append(at)
            at += size
        return out

    @property
    def live(self) -> int:
        """Bytes of the chunks themselves (``stored`` less any free space)."""
        return sum(size for size, _crc in self.chunks)

    def to_json(self) -> dict[str, Any]:
        """The table as the header's JSON fields."""
        out: dict[str, Any] = {"codec": self.codec, "chunk": self.chunk,
                               "chunks": [[size, f"{crc:08x}"] for size, crc in self.chunks]}
        if self.offsets is not None:
            out["offsets"] = list(self.offsets)
        if self.raw_crcs is not None:
            out["raw_crc32"] = [f"{crc:08x}" for crc in self.raw_crcs]
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any], nbytes: int, declared: str, stored_total: int) -> ChunkTable:
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
        raw_crcs = _raw_crcs(raw.get("raw_crc32"), count)
        placed = raw.get("offsets")
        if placed is None:
            if total != stored_total:
                raise ValueError(f"its chunks hold {total} stored bytes, its tensor "
                                 f"{stored_total}")
            return cls(codec, chunk, tuple(chunks), total, None, raw_crcs)
        return cls(codec, chunk, tuple(chunks), stored_total,
                   _offsets(placed, chunks, stored_total), raw_crcs)


def _raw_crcs(listed: Any, count: int) -> tuple[int, ...] | None:
    """The ``raw_crc32`` of a table checked: absent, or one CRC text per chunk."""
    if listed is None:
        return None
    if not isinstance(listed, list) or len(listed) != count:
        got = len(listed) if isinstance(listed, list) else type(listed).__name__
        raise ValueError(f"the chunk table has {got} raw checksums for {count} chunks")
    for k, text in enumerate(listed):
        if not isinstance(text, str) or not _CRC_TEXT.fullmatch(text):
            raise ValueError(f"chunk {k}'s raw checksum is not 8 hex digits: {text!r:.40}")
    return tuple(int(text, 16) for text in listed)


def _offsets(placed: Any, chunks: list[tuple[int, int]], stored_total: int) -> tuple[int, ...]:
    """The ``offsets`` of a table checked: one per chunk, inside the tensor, no overlaps."""
    if not isinstance(placed, list) or len(placed) != len(chunks):
        got = len(placed) if isinstance(placed, list) else type(placed).__name__
        raise ValueError(f"the chunk table has {got} offsets for {len(chunks)} chunks")
    for k, at in enumerate(placed):
        if type(at) is not int or not 0 <= at <= stored_total - chunks[k][0]:
            raise ValueError(f"chunk {k} is placed at {at!r:.40}, outside its tensor of "
                             f"{stored_total} bytes")
    order = sorted(range(len(placed)), key=placed.__getitem__)
    for a, b in zip(order, order[1:], strict=False):
        if placed[a] + chunks[a][0] > placed[b]:
            raise ValueError(f"chunks {a} and {b} overlap in the file")
    return tuple(placed)


def first_fields(raw_arrays: list[Any]) -> dict[int, str]:
    """``{block: "field '<path>'"}`` for the first array of each block, for messages
    about blocks (read before the arrays are checked: the paths are only quoted)."""
    out: dict[int, str] = {}
    for entry in raw_arrays:
        if (isinstance(entry, dict) and type(entry.get("block")) is int
                and isinstance(entry.get("path"), str)):
            out.setdefault(entry["block"], f"field {entry['path']!r}")
    return out
