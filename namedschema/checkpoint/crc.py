"""The CRC-32 of a block after some of its bytes changed, without reading the rest.

zlib's CRC-32 is affine over GF(2): for two messages of one length,
``crc(a) ^ crc(b)`` depends only on ``a ^ b``, and a difference confined to
bytes ``[s, e)`` of an ``n``-byte block contributes
``(crc(old[s:e]) ^ crc(new[s:e]))`` advanced through ``n - e`` zero bytes.
Advancing a CRC register through ``k`` zero bytes is a linear map; the maps
for ``k = 2**j`` are kept as byte tables, so advancing many ranges at once is
a few table look-ups per set bit of ``k``, vectorised over the ranges.

updated_crc   a block's new CRC-32 from its old one and the changed ranges
crc_concat    the CRC-32 of pieces put end to end, from the pieces' CRC-32s
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

import numpy as np

__all__ = ["updated_crc", "crc_concat"]

_POLY = 0xEDB88320
_BITS = 48  # blocks up to 2**48 bytes


def _apply(tables: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Apply the linear map whose byte tables are ``tables`` (4 x 256) to ``values``."""
    return (tables[0][values & 0xFF] ^ tables[1][(values >> 8) & 0xFF]
            ^ tables[2][(values >> 16) & 0xFF] ^ tables[3][values >> 24])


def _tables_from_columns(columns: np.ndarray) -> np.ndarray:
    """Byte tables of the linear map taking bit ``b`` to ``columns[b]``."""
    tables = np.zeros((4, 256), np.uint32)
    byte = np.arange(256, dtype=np.uint32)
    for part in range(4):
        for bit in range(8):
            tables[part][((byte >> bit) & 1) == 1] ^= columns[8 * part + bit]
    return tables


@cache
def _zero_tables() -> np.ndarray:
    """``[j]``: byte tables advancing a register through ``2**j`` zero bytes."""
    columns = np.zeros(32, np.uint32)
    for bit in range(32):
        reg = 1 << bit
        for _ in range(8):  # one zero byte: eight shifts of the reflected register
            reg = (reg >> 1) ^ (_POLY if reg & 1 else 0)
        columns[bit] = reg
    out = np.zeros((_BITS, 4, 256), np.uint32)
    out[0] = _tables_from_columns(columns)
    for j in range(1, _BITS):
        columns = _apply(out[j - 1], columns)  # twice the previous distance
        out[j] = _tables_from_columns(columns)
    return out


def updated_crc(old_crc: int, nbytes: int, changes: Iterable[tuple[int, int]]) -> int:
    """The CRC-32 of an ``nbytes`` block whose CRC was ``old_crc``, after ``changes``.

    Each change is ``(end, delta)``: bytes ending at offset ``end`` of the
    block changed, and ``delta = crc32(old bytes) ^ crc32(new bytes)`` over
    exactly those bytes. Changes must not overlap.
    """
    ends, deltas = [], []
    for end, delta in changes:
        ends.append(end)
        deltas.append(delta)
    if not ends:
        return old_crc
    values = np.array(deltas, np.uint32)
    distance = nbytes - np.array(ends, np.int64)
    if distance.min() < 0 or distance.max() >= 1 << _BITS:
        raise ValueError("a change ends outside the block")
    tables = _zero_tables()
    for j in range(int(distance.max()).bit_length()):
        move = ((distance >> j) & 1) == 1
        if move.any():
            values[move] = _apply(tables[j], values[move])
    return int(old_crc ^ int(np.bitwise_xor.reduce(values)))


@cache
def _advance_table(nbytes: int) -> tuple[list[int], ...]:
    """Byte tables (as lists) advancing a register through ``nbytes`` zero bytes."""
    columns = np.array([1 << bit for bit in range(32)], np.uint32)
    tables = _zero_tables()
    for j in range(nbytes.bit_length()):
        if (nbytes >> j) & 1:
            columns = _apply(tables[j], columns)
    return tuple(t.tolist() for t in _tables_from_columns(columns))


def crc_concat(crcs: list[int], piece: int, last: int) -> int:
    """The CRC-32 of ``len(crcs)`` pieces put end to end, from their CRC-32s.

    Every piece has ``piece`` bytes except the last, which has ``last``
    (``crc(a + b) = advance(crc(a), len(b)) ^ crc(b)``, as zlib's
    ``crc32_combine``).
    """
    if not crcs:
        return 0
    if len(crcs) == 1:
        return crcs[0]
    if not 0 < piece < 1 << _BITS or not 0 < last <= piece:
        raise ValueError("piece sizes out of range")
    t0, t1, t2, t3 = _advance_table(piece)
    value = crcs[0]
    for crc in crcs[1:-1]:
        value = (t0[value & 0xFF] ^ t1[(value >> 8) & 0xFF] ^ t2[(value >> 16) & 0xFF]
                 ^ t3[value >> 24] ^ crc)
    t0, t1, t2, t3 = _advance_table(last)
    return (t0[value & 0xFF] ^ t1[(value >> 8) & 0xFF] ^ t2[(value >> 16) & 0xFF]
            ^ t3[value >> 24] ^ crcs[-1])
