"""The one full-file writer: header room, blocks and checksums, then the header, atomically.

Every save that writes a whole file goes through :func:`write`: plain saves,
and the full saves of incremental mode (in the caller or in a background
save's child). They differ only in the layout policy, which says where the
blocks go and how much room the header gets:

PLAIN         blocks back to back, each 64-byte aligned; the header as short as it can be
PAGE_ALIGNED  what later in-place updates need: large blocks at the page offset their
              memory has, header room to grow (as much again as the header, at least
              64 KiB), room for a pickle block to grow, and a ``saved`` record

Both leave aligned all-zero stretches of the data as holes (``blocks.HOLE``): the
file's content is the same, an empty buffer takes no disk space.

With ``compression`` and ``PLAIN`` the blocks it selects (``compression.compressed_blocks``:
at least ``compression.min_block`` bytes, of its dtypes) are written as chunk tables (``compression.write_block``); their stored sizes
are known only once written, so the header's room is that of the largest header
they could need (every chunk at its raw size, padding after every block), and the
header written is padded with spaces to it. With ``compression`` and ``PAGE_ALIGNED``
(a full incremental compressed save) the file is the one ``squeezed`` updates in place:
chunk tables that place their chunks and list their raw CRC-32s, each block's tensor
with room for its chunks to grow, the header with room as ``PAGE_ALIGNED`` gives it, and
a ``saved`` record (the package docstring, "Placed chunks").

LayoutPolicy    what a policy is: ``place``, ``header_length``, ``finish``
Written         what ``write`` returns: the header written and the file's ``stat``
describe        the header description of an encoded graph (in-place updates use it too)
write           write an encoded, planned graph to a file, atomically
chunked_blocks, placed_capacity, placed_tensors, placed_description
                the layout of placed compressed files (``squeezed``'s updates use it too)
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

from . import compression as _compression
from . import layout
from .atomic import AtomicFile
from .blocks import Progress, Source, write_all, write_blocks
from .chunktable import ChunkTable
from .compression import Compression
from .constants import ALIGN, COMPRESSED_FEATURE, MAX_HEADER, PLACED_FEATURE, RAW_CRCS_FEATURE
from .graph import EncodedGraph
from .header import BlockEntry, Description, Header, PickleEntry, SaveRecord, TensorEntry
from .nodes import features_of
from .pages import PAGE

__all__ = ["LayoutPolicy", "PLAIN", "PAGE_ALIGNED", "Written", "describe", "write",
           "HEADER_HEADROOM", "ROOM_CHUNKS", "chunked_blocks", "placed_capacity",
           "placed_tensors", "placed_description"]

#: The least room for the header to grow in files laid out for incremental saves (they
#: get as much again as their header when that is more).
HEADER_HEADROOM = 64 * 1024


class LayoutPolicy(Protocol):
    """Where a full save puts the blocks and how much room the header gets."""

    #: whether the header records the save (``"saved"``), as incremental mode's files do
    records_save: bool

    def place(self, plan: layout.Layout,
              pickled: bool) -> tuple[dict[str, TensorEntry], tuple[BlockEntry, ...]]:
        """The tensor table (padding included) and the blocks at their file offsets."""

    def header_length(self, header: Header) -> int:
        """The bytes reserved for ``header`` (its checksums not yet set)."""

    def finish(self, fd: int, size: int) -> None:
        """After the data is written: give the file its full ``size`` (data section end)."""


class _Plain:
    """Blocks back to back, each 64-byte aligned; the header as short as it can be."""

    records_save = False

    def place(self, plan: layout.Layout,
              pickled: bool) -> tuple[dict[str, TensorEntry], tuple[BlockEntry, ...]]:
        return plan.tensors, plan.blocks

    def header_length(self, header: Header) -> int:
        return len(header.encode())

    def finish(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)  # the blocks and their padding fill it, a last hole included


class _PageAligned:
    """Laid out for in-place updates (see the package docstring, "Incremental saves")."""

    records_save = True

    def place(self, plan: layout.Layout,
              pickled: bool) -> tuple[dict[str, TensorEntry], tuple[BlockEntry, ...]]:
        """Large blocks at their memory's page offset; a pickle block (last) gets room to grow."""
        table: dict[str, TensorEntry] = {}
        blocks = []
        offset = pads = 0
        for block, source in zip(plan.blocks, plan.sources, strict=True):
            want = layout.congruence(source, block.nbytes)
            pad = -offset % ALIGN if want is None else (want - offset) % PAGE
            if pad:
                table[f"__pad__.{pads}"] = TensorEntry("U8", (pad,), offset, offset + pad)
                pads += 1
                offset += pad
            declared = plan.tensors[block.tensor]
            table[block.tensor] = TensorEntry(declared.dtype, declared.shape, offset,
                                              offset + block.nbytes)
            blocks.append(replace(block, start=offset))
            offset += block.nbytes
        pad = -offset % ALIGN
        if pickled:
            pad += max(PAGE, blocks[-1].nbytes // 8)
        if pad:
            table[f"__pad__.{pads}"] = TensorEntry("U8", (pad,), offset, offset + pad)
        return table, tuple(blocks)

    def header_length(self, header: Header) -> int:
        """Room to grow (as much again as the header, at least ``HEADER_HEADROOM``), page-aligned.

        A real run's second checkpoint usually adds arrays (the optimizer state appears
        once learning starts): their entries must fit, or that save is a full one. The
        room is trailing spaces, written once (64 KiB on files of any size).
        """
        raw = len(header.encode())
        room = raw + max(HEADER_HEADROOM, raw)
        if 8 + room + PAGE > MAX_HEADER:   # a huge header: what the format allows
            room = max(raw, MAX_HEADER - 8 - PAGE)
        return room + (-(8 + room) % PAGE)

    def finish(self, fd: int, size: int) -> None:
        """Extend the file over the unwritten padding and the zeros left as holes.

        The holes get no disk blocks: a buffer that is still empty costs nothing on
        disk (a 5 GiB replay buffer at step 0 would otherwise take 5 GiB). A later
        in-place write into a hole needs free space like any write; on a full disk
        that save fails, its journal kept, and ``load`` finishes it once there is room.
        """
        os.ftruncate(fd, size)


PLAIN: LayoutPolicy = _Plain()
PAGE_ALIGNED: LayoutPolicy = _PageAligned()


@dataclass(frozen=True)
class Written:
    """What ``write`` wrote: the final header, and the ``stat`` of the file it wrote."""

    header: Header
    stat: os.stat_result


def describe(graph: EncodedGraph, plan: layout.Layout, blocks: tuple[BlockEntry, ...],
             saved: SaveRecord | None) -> Description:
    """The header description of ``graph`` with these blocks, under a new checkpoint id."""
    pickle_entry = None if graph.not_data is None else PickleEntry(len(blocks) - 1,
                                                                   str(graph.not_data))
    return Description(blocks=blocks, arrays=plan.arrays,
                       schemas=tuple(graph.encoder.schemas), structure=graph.structure,
                       pickle=pickle_entry, checkpoint_id=uuid.uuid4().hex, saved=saved,
                       features=features_of(graph.encoder.schemas), metadata=graph.metadata)


def write(graph: EncodedGraph, plan: layout.Layout, path: str, policy: LayoutPolicy, *,
          shown: str | None = None, progress: bool = False,
          compression: Compression | None = None) -> Written:
    """Write ``graph`` laid out by ``plan`` and ``policy`` to ``path``, atomically.

    ``shown`` names the file in messages (``path`` by default). The data
    starts after the header, whose checksums are known only once the data is
    written: the header's room is reserved (its fixed-width fields keep its
    length), the data written, then the header. ``compression`` (with
    ``PLAIN`` only) stores large blocks compressed.
    """
    if compression is not None:
        if policy is PAGE_ALIGNED:
            return _write_placed(graph, plan, path, compression,
                                 path if shown is None else shown, progress)
        return _write_compressed(graph, plan, path, compression,
                                 path if shown is None else shown, progress)
    tensors, blocks = policy.place(plan, graph.pickle_bytes is not None)
    data_bytes = plan.data_bytes
    saved = SaveRecord("full", data_bytes, len(blocks), data_bytes) \
        if policy.records_save else None
    header = Header(describe(graph, plan, blocks, saved), tensors,
                    name=path if shown is None else shown)
    length = policy.header_length(header)
    data_start = 8 + length
    end = max(t.end for t in tensors.values()) if tensors else 0
    bar = Progress(data_bytes, "saving", progress)
    with AtomicFile(path) as fd:
        write_all(fd, struct.pack("<Q", length) + b" " * length)
        crcs = _write_data(fd, data_start, blocks, plan.sources, bar)
        policy.finish(fd, data_start + end)
        os.lseek(fd, 8, os.SEEK_SET)
        header = header.with_crcs(crcs)
        write_all(fd, header.encode(length))
        st = os.fstat(fd)
    return Written(header, st)


def _write_data(fd: int, data_start: int, blocks: tuple[BlockEntry, ...],
                sources: tuple[Source, ...], bar: Progress) -> list[int]:
    """Write every block at its place; blocks that follow at plain alignment in one go."""
    crcs: list[int] = []
    run: list[int] = []
    for i, block in enumerate(blocks):
        if run and block.start != _aligned_end(blocks[run[-1]]):
            crcs += _write_run(fd, data_start, blocks, sources, run, bar)
            run = []
        run.append(i)
    if run:
        crcs += _write_run(fd, data_start, blocks, sources, run, bar)
    return crcs


def _aligned_end(block: BlockEntry) -> int:
    end = block.start + block.nbytes
    return end + (-end % ALIGN)


def _write_run(fd: int, data_start: int, blocks: tuple[BlockEntry, ...],
               sources: tuple[Source, ...], run: list[int], bar: Progress) -> list[int]:
    os.lseek(fd, data_start + blocks[run[0]].start, os.SEEK_SET)
    return write_blocks(fd, tuple(sources[i] for i in run), bar)


def _compressed_layout(plan: layout.Layout, tables: list[ChunkTable | None], crcs: list[int],
                       worst: bool) -> tuple[dict[str, TensorEntry], tuple[BlockEntry, ...]]:
    """The tensor table and blocks of a compressed file; ``worst``: the largest header
    the real one can be (63 bytes of padding after every block)."""
    table: dict[str, TensorEntry] = {}
    blocks = []
    offset = pads = 0
    for block, chunks, crc in zip(plan.blocks, tables, crcs, strict=True):
        declared = plan.tensors[block.tensor]
        size = block.nbytes if chunks is None else chunks.stored
        dtype, shape = (declared.dtype, declared.shape) if chunks is None else ("U8", (size,))
        table[block.tensor] = TensorEntry(dtype, shape, offset, offset + size)
        blocks.append(replace(block, start=offset, crc32=crc, table=chunks))
        offset += size
        pad = ALIGN - 1 if worst else -offset % ALIGN
        if pad:
            table[f"__pad__.{pads}"] = TensorEntry("U8", (pad,), offset, offset + pad)
            pads += 1
            offset += pad
    return table, tuple(blocks)


@contextlib.contextmanager
def _compressed_file(path: str, shown: str, data_bytes: int) -> Iterator[int]:
    """``AtomicFile`` for a compressed save, whose size is known only as it is written: a
    full disk is an OSError (its errno kept) saying how far the save got and that the
    file at ``path`` was left as it was (the temporary file is removed)."""
    with AtomicFile(path) as fd:
        try:
            yield fd
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise
            try:
                at = f"{os.lseek(fd, 0, os.SEEK_CUR):,} bytes"
            except OSError:
                at = "part of it"
            raise OSError(exc.errno, f"{os.strerror(exc.errno)}: the compressed checkpoint "
                          f"did not fit after {at} of it were written (its "
                          f"{data_bytes:,} bytes of data take what they compress to, known "
                          "only as they are written); the file there was left as it was",
                          shown) from exc


def _write_compressed(graph: EncodedGraph, plan: layout.Layout, path: str,
                      compression: Compression, shown: str, progress: bool) -> Written:
    """``write`` with large blocks compressed (see the module docstring)."""
    chunk = compression.chunk
    squeeze = _compression.compressed_blocks(plan.blocks, plan.arrays, compression)
    # The largest table each block can have: every chunk stored raw.
    worst_tables = [ChunkTable(compression.codec, chunk, tuple(
        (min(chunk, b.nbytes - at), 0) for at in range(0, b.nbytes, chunk)), b.nbytes)
        if s else None for b, s in zip(plan.blocks, squeeze, strict=True)]
    desc = describe(graph, plan, plan.blocks, None)
    if any(squeeze):
        desc = replace(desc, features=(*desc.features, COMPRESSED_FEATURE))

    def header_of(tables: list[ChunkTable | None], crcs: list[int], worst: bool) -> Header:
        tensors, blocks = _compressed_layout(plan, tables, crcs, worst)
        return Header(replace(desc, blocks=blocks), tensors, name=shown)

    raw_length = len(header_of(worst_tables, [0] * len(squeeze), True).encode())
    length = raw_length + (-(8 + raw_length) % ALIGN)
    bar = Progress(plan.data_bytes, "saving", progress)
    tables: list[ChunkTable | None] = []
    crcs: list[int] = []
    with _compressed_file(path, shown, plan.data_bytes) as fd:
        write_all(fd, struct.pack("<Q", length) + b" " * length)
        workers = _compression.workers()
        with ThreadPoolExecutor(workers, thread_name_prefix="namedschema-zstd") as pool:
            for block, source, s in zip(plan.blocks, plan.sources, squeeze, strict=True):
                if s:
                    written, crc = _compression.write_block(fd, source, block.nbytes,
                                                            compression, bar, pool, 2 * workers)
                    tables.append(written)
                    crcs.append(crc)
                else:
                    crcs += write_blocks(fd, (source,), bar)
                    tables.append(None)
        header = header_of(tables, crcs, False)
        end = max((t.end for t in header.tensors.values()), default=0)
        os.ftruncate(fd, 8 + length + end)  # a last hole included
        os.lseek(fd, 8, os.SEEK_SET)
        write_all(fd, header.encode(length))
        st = os.fstat(fd)
    return Written(header, st)


# --------------------------------------------------------------------------
# Placed compressed files (``PAGE_ALIGNED`` with compression), updated by ``squeezed``
# --------------------------------------------------------------------------

#: Least room of a placed block's tensor, in chunks (capped at an eighth of the block).
ROOM_CHUNKS = 2


def chunked_blocks(plan: layout.Layout, graph: EncodedGraph,
                   compression: Compression) -> list[bool]:
    """Which blocks a placed file stores as chunk tables: those ``compression``
    compresses (the large ones; with ``"auto"``, of one-byte dtypes only), and the
    pickle."""
    last = len(plan.blocks) - 1 if graph.pickle_bytes is not None else -1
    chosen = _compression.compressed_blocks(plan.blocks, plan.arrays, compression)
    return [i == last or c for i, c in enumerate(chosen)]


def placed_capacity(live: int, nbytes: int, chunk: int) -> int:
    """The tensor size given to chunks of ``live`` stored bytes of a block of ``nbytes``:
    a quarter more, at least ``ROOM_CHUNKS`` chunks or an eighth of the block."""
    room = max(live // 4, min(ROOM_CHUNKS * chunk, nbytes // 8), ALIGN)
    size = live + room
    return size + (-size % ALIGN)


def placed_tensors(blocks: Sequence[BlockEntry], sizes: Sequence[int],
                   declared: Sequence[TensorEntry], end: int) -> dict[str, TensorEntry]:
    """The tensor table of a placed file, in file order: every block's tensor at its
    place (``sizes``: a chunked block's tensor size), padding in the gaps up to ``end``."""
    table: dict[str, TensorEntry] = {}
    spans = sorted(range(len(blocks)), key=lambda i: blocks[i].start)
    at = pads = 0
    for i in spans:
        b = blocks[i]
        if b.start > at:
            table[f"__pad__.{pads}"] = TensorEntry("U8", (b.start - at,), at, b.start)
            pads += 1
        if b.table is None:
            table[b.tensor] = TensorEntry(declared[i].dtype, declared[i].shape, b.start,
                                          b.start + b.nbytes)
        else:
            table[b.tensor] = TensorEntry("U8", (sizes[i],), b.start, b.start + sizes[i])
        at = b.start + sizes[i]
    if end > at:
        table[f"__pad__.{pads}"] = TensorEntry("U8", (end - at,), at, end)
    return dict(sorted(table.items(), key=lambda kv: kv[1].start))


def placed_description(graph: EncodedGraph, plan: layout.Layout,
                       blocks: tuple[BlockEntry, ...], saved: SaveRecord) -> Description:
    """``describe`` for a placed file: its features listed."""
    desc = describe(graph, plan, blocks, saved)
    return replace(desc, features=(*desc.features, COMPRESSED_FEATURE, PLACED_FEATURE,
                                   RAW_CRCS_FEATURE))


def _write_placed(graph: EncodedGraph, plan: layout.Layout, path: str,
                  compression: Compression, shown: str, progress: bool) -> Written:
    """A full compressed save laid out for incremental ones (the package docstring,
    "Placed chunks"): chunk tables with offsets and raw checksums, tensors with room
    to spare, the header with room to grow, a ``saved`` record."""
    chunked = chunked_blocks(plan, graph, compression)
    chunk = compression.chunk
    # The header's room: that of the largest header this file can need (every chunk raw,
    # offsets and capacities at their widest), and as much again.
    widest = 10**15
    worst_blocks = []
    for b, c in zip(plan.blocks, chunked, strict=True):
        if c:
            n = -(-b.nbytes // chunk)
            worst_blocks.append(replace(b, start=widest, table=ChunkTable(
                compression.codec, chunk, tuple((min(chunk, b.nbytes - k * chunk), 0)
                                                for k in range(n)), widest,
                tuple([widest] * n), tuple([0] * n))))
        else:
            worst_blocks.append(replace(b, start=widest))
    declared = [plan.tensors[b.tensor] for b in plan.blocks]
    widest_saved = SaveRecord("incremental", 10**17, 10**13, plan.data_bytes)
    worst = Header(placed_description(graph, plan, tuple(worst_blocks), widest_saved),
                   placed_tensors(worst_blocks, [widest] * len(worst_blocks), declared,
                                  10**16))
    length = PAGE_ALIGNED.header_length(worst)
    data_start = 8 + length
    bar = Progress(plan.data_bytes, "saving", progress)
    blocks: list[BlockEntry] = []
    sizes: list[int] = []
    offset = 0
    with _compressed_file(path, shown, plan.data_bytes) as fd:
        write_all(fd, struct.pack("<Q", length) + b" " * length)
        workers = _compression.workers()
        with ThreadPoolExecutor(workers, thread_name_prefix="namedschema-zstd") as pool:
            for block, source, c in zip(plan.blocks, plan.sources, chunked, strict=True):
                os.lseek(fd, data_start + offset, os.SEEK_SET)
                if c:
                    raw: list[int] = []
                    table, crc = _compression.write_block(fd, source, block.nbytes,
                                                          compression, bar, pool,
                                                          2 * workers, raw)
                    size = placed_capacity(table.stored, block.nbytes, chunk)
                    table = replace(table, stored=size, offsets=tuple(table.starts()),
                                    raw_crcs=tuple(raw))
                    blocks.append(replace(block, start=offset, crc32=crc, table=table))
                else:
                    (crc,) = write_blocks(fd, (source,), bar)
                    size = block.nbytes
                    blocks.append(replace(block, start=offset, crc32=crc))
                sizes.append(size)
                offset += size + (-size % ALIGN)
        saved = SaveRecord("full", plan.data_bytes, len(blocks), plan.data_bytes)
        header = Header(placed_description(graph, plan, tuple(blocks), saved),
                        placed_tensors(blocks, sizes, declared, offset), name=shown)
        os.ftruncate(fd, data_start + offset)
        os.lseek(fd, 8, os.SEEK_SET)
        write_all(fd, header.encode(length))
        st = os.fstat(fd)
    return Written(header, st)
