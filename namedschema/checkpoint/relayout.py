"""Relayout: place an incremental save's new and resized blocks around the blocks kept in place.

A real run's checkpoints change more than array contents between saves: an
emulator state or a sum tree's index list is a few bytes longer or shorter,
an optimizer's state appears after the first step, the pickle of the
non-array part outgrows the room it had. Such a save keeps every block that
has the same tensor name, size and declaration as in the file where it is
(its changed bytes are then written in place, as before) and *rewrites* the
others whole, each at the first place that fits:

* where the block was, when it still fits there (it may grow into the free
  space after it, or shrink, giving the rest back);
* else in the first free space (the padding between blocks and the room
  given back by blocks that moved or went away) with room to spare;
* else appended at the end of the file.

Each block placed anew gets room to grow (1/8 of its size, at least 64
bytes; a pickle block at least a page), so that a block whose size wobbles
settles in one place. Bytes that blocks give back are zeroed (padding is
zeros), so they are free space for later saves and the file does not grow
without bound; when the free space grows past ``SLACK`` of the data, the
caller writes a full, compact checkpoint instead.

The result is a file of the same format: the tensors still tile the data
section (the free space is ``__pad__.K`` tensors), only not in block order.

Relayout   the new tensor table, the blocks at their places, what is kept and zeroed
plan       the relayout of a new layout over an old header, or why there is none
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .constants import ALIGN
from .header import BlockEntry, Header, TensorEntry
from .layout import PICKLE_TENSOR, Layout, congruence
from .pages import PAGE

__all__ = ["Relayout", "plan", "SLACK"]

#: Free space allowed in a relaid file, as a share of its data (at least SLACK_MIN bytes).
SLACK = 1 / 8
SLACK_MIN = 4 * 2**20


@dataclass(frozen=True)
class Relayout:
    """Where everything of the new save goes (offsets relative to the data section)."""

    tensors: dict[str, TensorEntry]     # the new safetensors table, in file order
    blocks: tuple[BlockEntry, ...]      # the new blocks at their places (checksums 0)
    kept: tuple[int | None, ...]        # per new block: the old block updated in place
    zeroed: tuple[tuple[int, int], ...]  # (start, stop) ranges given back: written as zeros
    data_end: int                       # the end of the new data section
    rewritten: int                      # bytes of the blocks written whole
    reason: str                         # what changed that made the relayout needed

    @property
    def zeroed_bytes(self) -> int:
        """Bytes of the zeroed ranges together."""
        return sum(b - a for a, b in self.zeroed)


def _want(source: object, nbytes: int, data_start: int) -> int | None:
    """The page offset (of the data section) a block should start at, or None: 64-aligned."""
    page = congruence(source, nbytes)
    return None if page is None else (page - data_start) % PAGE


def _aligned(offset: int, want: int | None) -> int:
    if want is None:
        return offset + (-offset % ALIGN)
    return offset + (want - offset) % PAGE


def _subtract(free: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    out = []
    for a, b in free:
        if b <= lo or a >= hi:
            out.append((a, b))
            continue
        if a < lo:
            out.append((a, lo))
        if hi < b:
            out.append((hi, b))
    return out


def _headroom(tensor: str, nbytes: int) -> int:
    return max(PAGE if tensor == PICKLE_TENSOR else ALIGN, nbytes // 8)


def difference(old: Header, new: Layout) -> str:
    """What differs between the arrays of ``old`` and ``new`` (for messages), briefly."""
    old_blocks = {b.tensor: b for b in old.blocks}
    new_names = {b.tensor for b in new.blocks}
    for b in new.blocks:
        was = old_blocks.get(b.tensor)
        if b.tensor == PICKLE_TENSOR:
            if was is not None and b.nbytes > was.nbytes:
                room = old.file_size - old.data_start - was.start
                if b.nbytes > room:
                    return f"the pickled part grew from {was.nbytes:,} to {b.nbytes:,} bytes"
            continue
        if was is None:
            return f"a new array {b.tensor!r} ({b.nbytes:,} bytes)"
        ot, nt = old.tensors[b.tensor], new.tensors[b.tensor]
        if (was.nbytes, ot.dtype, ot.shape) != (b.nbytes, nt.dtype, nt.shape):
            return (f"array {b.tensor!r} changed from {ot.dtype}{list(ot.shape)} to "
                    f"{nt.dtype}{list(nt.shape)}")
    gone = [t for t in old_blocks if t not in new_names]
    if gone:
        return f"array {gone[0]!r} is no longer saved"
    return "the arrays' placement changed"


def plan(old: Header, new: Layout) -> Relayout | str:
    """The relayout of ``new`` over the file whose header is ``old``, or why there is none.

    The caller checks that the rewritten and zeroed bytes are worth it.
    """
    if any(b.table is not None for b in old.blocks):
        return "the file's blocks are compressed, which are not updated in place"
    old_index = {b.tensor: i for i, b in enumerate(old.blocks)}
    old_end = old.file_size - old.data_start
    kept: list[int | None] = []
    free = [(0, old_end)]
    for b in new.blocks:
        j = old_index.get(b.tensor)
        keep = None
        if j is not None and b.tensor != PICKLE_TENSOR:
            ob = old.blocks[j]
            ot, nt = old.tensors[b.tensor], new.tensors[b.tensor]
            if (ob.nbytes, ot.dtype, ot.shape) == (b.nbytes, nt.dtype, nt.shape):
                keep = j
                free = _subtract(free, ob.start, ob.start + ob.nbytes)
        kept.append(keep)
    starts: list[int] = []
    end = old_end
    rewritten = 0
    for i, (b, source) in enumerate(zip(new.blocks, new.sources, strict=True)):
        k = kept[i]
        if k is not None:
            starts.append(old.blocks[k].start)
            continue
        want = _want(source, b.nbytes, old.data_start)
        room = _headroom(b.tensor, b.nbytes)
        spot = None
        j = old_index.get(b.tensor)
        if j is not None:   # where it was, if it still fits there
            s = old.blocks[j].start
            if _aligned(s, want) == s and any(a <= s and s + b.nbytes <= c for a, c in free):
                spot = s
        if spot is None:
            for a, c in free:
                s = _aligned(a, want)
                if s + b.nbytes + room <= c:
                    spot = s
                    break
        if spot is None:    # appended, after the free space at the end if any
            tail = next((a for a, c in free if c == end), end)
            spot = _aligned(tail, want)
            grown = spot + b.nbytes + room
            grown += -grown % ALIGN
            free = [(a, c) for a, c in free if c != end] + [(tail, grown)]
            end = grown
        free = _subtract(free, spot, spot + b.nbytes + room)   # its room to grow kept free
        starts.append(spot)
        rewritten += b.nbytes
    if end - new.data_bytes > max(SLACK_MIN, int(SLACK * new.data_bytes)):
        return (f"{difference(old, new)}, and placing it around the others would leave "
                f"{end - new.data_bytes:,} bytes free: a full save compacts the file")
    written = [(s, s + b.nbytes) for s, b, k in zip(starts, new.blocks, kept, strict=True)
               if k is None]
    zeroed: list[tuple[int, int]] = []
    kept_old = {k for k in kept if k is not None}
    for j, ob in enumerate(old.blocks):
        if j in kept_old:
            continue
        pieces = [(ob.start, ob.start + ob.nbytes)]
        for lo, hi in written:
            pieces = [p for a, c in pieces for p in _subtract([(a, c)], lo, hi)]
        zeroed.extend(p for p in pieces if p[1] > p[0])
    return Relayout(_table(new, starts, end), tuple(
        replace(b, start=s, crc32=0) for b, s in zip(new.blocks, starts, strict=True)),
        tuple(kept), tuple(sorted(zeroed)), end, rewritten, difference(old, new))


def _table(new: Layout, starts: list[int], end: int) -> dict[str, TensorEntry]:
    """The tensors of the blocks at ``starts``, the gaps up to ``end`` as padding."""
    placed = sorted((s, b.tensor) for s, b in zip(starts, new.blocks, strict=True))
    table: dict[str, TensorEntry] = {}
    position = pads = 0
    sizes = {b.tensor: b.nbytes for b in new.blocks}
    for s, tensor in [*placed, (end, None)]:
        if s > position:
            table[f"__pad__.{pads}"] = TensorEntry("U8", (s - position,), position, s)
            pads += 1
        if tensor is None:
            break
        declared = new.tensors[tensor]
        table[tensor] = TensorEntry(declared.dtype, declared.shape, s, s + sizes[tensor])
        position = s + sizes[tensor]
    return table
