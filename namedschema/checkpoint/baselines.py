"""What this process knows about the checkpoint files it saved last: the baseline of the next save.

After a save to a file the process keeps, per data block, how it can later
find what changed in that block's memory: the token of the write protection
armed at the save (``writeprotect``), or the CRC-32 of every memory page as
the file holds it (``digests``), or nothing. A baseline is trusted only while
the file is exactly as the save left it (same device, inode, size,
modification and change times, and header id): any other writer (a second
process's save, ``cp`` over the file, a truncation, a replacement) makes the
next save compare memory with the file instead, which is always exact.

Block       what is known about one block's memory
Baseline    the state of one file after this process's last save to it
lookup      the baseline of a file, if it still holds
record      remember the state a save left
forget      drop it (a save that failed after re-arming tracking)
page_crcs   CRC-32 of each memory page of a byte range
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

import numpy as np

from .. import _process
from .header import Header
from .pages import PAGE

__all__ = ["Block", "Baseline", "lookup", "record", "forget", "identity", "page_crcs"]


@dataclass
class Block:
    """One block's memory at the last save: ``[lo, lo + nbytes)``.

    ``token``: the write-protect token armed then (writes since are listed by
    the kernel); ``digests``: CRC-32 per memory page of the block (page ``j``
    covers block bytes ``[j * PAGE - lo % PAGE, (j + 1) * PAGE - lo % PAGE)``,
    clipped), equal to the file's bytes there.
    """

    lo: int
    nbytes: int
    token: int | None = None
    digests: np.ndarray | None = None


@dataclass
class Baseline:
    """What the last save of a file left on disk: its identity, id and block CRCs."""

    identity: tuple[int, ...]
    checkpoint_id: str
    blocks: list[Block | None]

    def block_at(self, index: int) -> Block | None:
        """What is known about block ``index`` (None when nothing)."""
        return self.blocks[index] if index < len(self.blocks) else None

    def block(self, index: int, lo: int, nbytes: int) -> Block | None:
        """What is known about block ``index`` if its memory is still ``[lo, lo + nbytes)``."""
        if index >= len(self.blocks):
            return None
        known = self.blocks[index]
        if known is None or (known.lo, known.nbytes) != (lo, nbytes):
            return None
        return known


_baselines: dict[str, Baseline] = {}   # (guarded by _process.LOCK)


def _clear_in_child() -> None:
    # A fork child's memory is not what the parent's tracking describes.
    _baselines.clear()


_process.on_fork_child("checkpoint.baselines", _clear_in_child)


def identity(st: os.stat_result) -> tuple[int, ...]:
    """What must not change for a baseline to hold (any write changes the times)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def lookup(real_path: str, st: os.stat_result, header: Header) -> Baseline | None:
    """The baseline of ``real_path`` if the file (``st``, ``header``) is as this process left it."""
    with _process.LOCK:
        known = _baselines.get(real_path)
    if known is None or known.identity != identity(st) or \
            known.checkpoint_id != header.description.checkpoint_id:
        return None
    return known


def record(real_path: str, st: os.stat_result, checkpoint_id: str,
           blocks: list[Block | None]) -> None:
    """Remember the blocks a save of ``real_path`` just wrote, as the next save's baseline."""
    with _process.LOCK:
        _baselines[real_path] = Baseline(identity(st), checkpoint_id, blocks)


def forget(real_path: str) -> None:
    """Drop the baseline of ``real_path`` (the next save compares with nothing)."""
    with _process.LOCK:
        _baselines.pop(real_path, None)


def page_crcs(data: np.ndarray, phase: int) -> np.ndarray:
    """CRC-32 of each memory page of ``data`` (uint8), whose first byte is at page offset ``phase``.

    Measured here at 1.6 GB/s (a CRC call per page); the first and last
    entries may cover partial pages.
    """
    first = min(PAGE - phase, data.size) if phase else min(PAGE, data.size)
    bounds = list(range(first, data.size, PAGE))
    out = np.empty(len(bounds) + 1, np.uint32)
    view = data.data
    start = 0
    for k, stop in enumerate([*bounds, data.size]):
        out[k] = zlib.crc32(view[start:stop])
        start = stop
    return out
