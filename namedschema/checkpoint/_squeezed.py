"""In-place updates of compressed checkpoints (incremental compressed saves)."""

from __future__ import annotations

import bisect
import ctypes
import itertools
import os
import struct
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from .. import _process
from . import _journal, _storage, _tracking, _write
from ._compression import Compression, chunk_pieces, compress_chunk, workers
from ._graph import EncodedGraph
from ._header import ALIGN, BlockEntry, Header, SaveRecord, TensorEntry, crc_concat, read_header
from ._storage import PAGE, MemorySpan, Progress, Source
from ._tracking import identity

__all__ = ["full_save", "update", "begin", "report", "adopt", "forget", "FULL_FRACTION", "SLACK"]

_T = TypeVar("_T")


# ---------------------------------------- squeezed
#
# Incremental saves of compressed checkpoints: rewrite only the chunks that changed.
#
# ``save(obj, path, incremental=True, compression="zstd")`` lands here (through
# ``incremental``, which locks the file, settles its journal and finishes the save).
# Nothing else imports this module: plain saves and loads never load it.
#
# Layout (``full_save``): ``_write.write`` with the ``PAGE_ALIGNED`` policy and
# compression writes the file (``writer`` writes every new file; this module only
# updates one in place): every block ``_compression.compressed_blocks`` selects (at
# least ``min_block`` bytes; with ``"auto"``, of one-byte dtypes only), and the pickle
# block whatever its size, stored as a chunk table that places its chunks (``offsets``,
# the feature ``"zstd-chunk-offsets"``) and lists their raw CRC-32s (``raw_crc32``, the
# feature ``"zstd-chunk-raw-crcs"``) in a tensor with room to spare
# (``_write.placed_capacity``); smaller blocks raw; the header with room to grow; a
# ``saved`` record. The baseline of the next save (``_Baseline``) is kept in memory:
# each chunk's raw CRC-32, and the write-protect token of the block's memory.
#
# An update (``update``, or ``begin`` and its second half for background saves):
#
# 1. *Candidates.* With write protection, the chunks holding pages written since the
#    last save (and a chunk whose partial edge page changed); otherwise every chunk
#    whose raw CRC-32 differs from the baseline's. Each is copied aside (the save's
#    snapshot).
# 2. *Compress* them (a thread pool); a chunk whose stored bytes equal the file's is
#    left alone (a page written with the same values).
# 3. *Place* each changed chunk in its block's tensor: where it was if it still fits,
#    else in the first free gap; if the gaps are too small, the block's chunks are
#    packed together again (the unchanged ones read from the file); if they do not fit
#    its capacity at all, the block moves to a free stretch of padding or to the end of
#    the file, with half as much again as it needs, and its old place is zeroed.
# 4. A save that would cost more than a quarter of a full one (bytes compressed, plus
#    twice the bytes written), or leave more padding than half the blocks' tensors
#    (plus ``SLACK``), or outgrow the header's room, is not made: the caller writes a
#    full save, which packs the file again. So the file stays within about twice its
#    blocks' stored size whatever the number of saves.
# 5. The changed chunks, the moved blocks and the new header go through the journal
#    (``_incremental.py``), then into the file in place, as any incremental save.
#
# Without a baseline in memory (a file this process did not save: a resumed run; or one
# changed since) the file's own chunk tables give one (``_from_file``): each chunk's raw
# CRC-32 as the file lists it, trusted only where it agrees with the rest of the file (a
# raw chunk's stored checksum, the block's CRC-32). Nothing is then known of the memory,
# so every chunk of it is checksummed (a thread pool) and compared; the chunks that
# differ are rewritten as above. A background save does this in its snapshot child, not
# in the caller. A file whose tables list no raw checksums is saved in full. A compressed file is not made incremental by uncompressed saves, nor the
# other way round: switching writes a full file.
#
# full_save  a full compressed save laid out for these updates
# update     the whole update of a locked file: a SaveRecord, or why a full save is needed
# begin      the caller's half of a background update (candidates copied aside)
# report, adopt  a snapshot child's baseline, handed to its parent

#: Above this share of a full save's cost, an update is not worth it.
FULL_FRACTION = 0.25
#: Padding an update may leave beyond half the blocks' tensors before a full save packs.
SLACK = 8 * 2**20


@dataclass
class _Block:
    """What the last save left of one chunked block: its memory and its chunks' raw CRCs."""

    lo: int | None              # address of its memory (a MemorySpan without lead), else None
    nbytes: int
    token: int | None           # write protection armed at that save
    edges: tuple[int, int]      # CRC-32 of the partial first and last pages (unprotected)
    crcs: np.ndarray            # raw CRC-32 of every chunk (uint32)


@dataclass
class _Baseline:
    identity: tuple[int, ...]
    checkpoint_id: str
    blocks: list[_Block | None]
    #: read from the file's chunk tables (``_from_file``): nothing known of the memory
    from_file: bool = False


_known: dict[str, _Baseline] = {}   # (guarded by _process.LOCK)


def _lookup(real: str, st: os.stat_result, header: Header) -> _Baseline | None:
    with _process.LOCK:
        known = _known.get(real)
    if known is None or known.identity != identity(st) or \
            known.checkpoint_id != header.description.checkpoint_id:
        return None
    return known


def _record(real: str, st: os.stat_result, checkpoint_id: str,
            blocks: list[_Block | None]) -> None:
    with _process.LOCK:
        _known[real] = _Baseline(identity(st), checkpoint_id, blocks)


def forget(real: str) -> None:
    """Drop the baseline of ``real`` (a save that failed after re-arming tracking)."""
    with _process.LOCK:
        _known.pop(real, None)


def _clear_in_child() -> None:
    # A fork child keeps the raw CRCs (they describe the file, checked by identity) but
    # not the tokens: its write protection is gone.
    with _process.LOCK:
        for known in _known.values():
            for b in known.blocks:
                if b is not None:
                    b.token = None


_process.on_fork_child("checkpoint._squeezed", _clear_in_child)


# --------------------------------------------------------------------------
# Full saves
# --------------------------------------------------------------------------

def full_save(enc: EncodedGraph, plan: _storage.Layout, path: str, progress: bool,
              compression: Compression) -> SaveRecord:
    """A full compressed save laid out for updates; its baseline recorded for the next."""
    real = os.path.realpath(path)
    known = _tracking.arm_for_full_save(plan.sources, [b.nbytes for b in plan.blocks])
    edges = [_edge_crcs(s.lo, b.nbytes) if isinstance(s, MemorySpan) and not s.lead
             else (0, 0) for s, b in zip(plan.sources, plan.blocks, strict=True)]
    written = _write.write(enc, plan, path, _write.PAGE_ALIGNED, progress=progress,
                           compression=compression)
    header, st = written.header, written.stat
    crcs = [None if b.table is None or b.table.raw_crcs is None else b.table.raw_crcs
            for b in header.blocks]
    saved = header.description.saved
    assert saved is not None
    try:
        now = os.stat(real)
    except OSError:
        return saved
    if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
        _record(real, now, header.description.checkpoint_id, [
            None if c is None else _new_block(plan.sources[i], plan.blocks[i].nbytes,
                                              k.token if k is not None else None, c,
                                              edges[i])
            for i, (c, k) in enumerate(zip(crcs, known, strict=True))])
    else:
        forget(real)
    return saved


def _new_block(source: Source, nbytes: int, token: int | None,
               crcs: list[int] | tuple[int, ...] | np.ndarray,
               edges: tuple[int, int]) -> _Block:
    lo = source.lo if isinstance(source, MemorySpan) and not source.lead else None
    return _Block(lo, nbytes, token if lo is not None else None, edges,
                  np.asarray(crcs, np.uint32))


def _edge_crcs(lo: int, nbytes: int) -> tuple[int, int]:
    """CRC-32 of the partial pages at both ends of ``[lo, lo + nbytes)`` (not protected)."""
    head = min(-lo % PAGE, nbytes)
    tail_start = max((lo + nbytes) // PAGE * PAGE, lo + head)
    mem = _memory(lo, nbytes)
    return (zlib.crc32(mem[:head].data), zlib.crc32(mem[tail_start - lo:].data))


def _memory(lo: int, nbytes: int) -> np.ndarray:
    """A view (no copy) of ``nbytes`` of this process's memory at address ``lo``."""
    return np.frombuffer(memoryview((ctypes.c_ubyte * nbytes).from_address(lo)), np.uint8)


# --------------------------------------------------------------------------
# Updates: finding the candidates (the caller's half of a background save)
# --------------------------------------------------------------------------

class _Stop(Exception):
    """Why the update is not made (a full save is)."""


class _ToChild(_Stop):
    """Not in the caller: a snapshot child compares the chunks (not a full save). Its
    text is empty: there is no reason for a full save to note."""

    def __init__(self) -> None:
        super().__init__("")


@dataclass
class _Candidates:
    """What the first half found: per chunked block, ``{chunk: a private copy}``."""

    st: os.stat_result
    old: Header
    base: _Baseline
    chunks: dict[int, dict[int, bytes]]
    raw_blocks: dict[int, bytes]          # small raw blocks that differ from the file
    tokens: dict[int, int | None]         # the tokens the next save starts from
    edges: dict[int, tuple[int, int]]


def _compatible(old: Header, plan: _storage.Layout, enc: EncodedGraph,
                compression: Compression) -> str | None:
    chunked = _write.chunked_blocks(plan, enc, compression)
    has_pickle = enc.pickle_bytes is not None
    if (len(old.blocks) != len(plan.blocks) or old.arrays != plan.arrays
            or (old.description.pickle is not None) != has_pickle):
        return "its arrays differ from the file's (shapes, dtypes, views or the pickle)"
    for i, (ob, nb) in enumerate(zip(old.blocks, plan.blocks, strict=True)):
        pickle = has_pickle and i == len(plan.blocks) - 1
        if ob.tensor != nb.tensor or (ob.nbytes != nb.nbytes and not pickle):
            return "its arrays differ from the file's (shapes, dtypes, views or the pickle)"
        if chunked[i] != (ob.table is not None) or (ob.table is not None and (
                ob.table.offsets is None or ob.table.chunk != compression.chunk
                or ob.table.codec != compression.codec)):
            return "the file is not laid out for incremental compressed saves of this kind"
        if ob.table is None and old.tensors[ob.tensor] != TensorEntry(
                plan.tensors[nb.tensor].dtype, plan.tensors[nb.tensor].shape, ob.start,
                ob.start + ob.nbytes):
            return "its arrays differ from the file's (shapes, dtypes, views or the pickle)"
    return None


def _from_file(old: Header) -> _Baseline | None:
    """The baseline the file's own chunk tables give: each chunk's raw CRC-32.

    For a save in a process that did not write the file's current state (a resumed
    run): nothing is known of its memory (no address, no write protection), so every
    chunk of memory is checksummed and compared with the file's. None when a table lists
    no raw checksums, or they disagree with what else the file says (a raw chunk's
    stored checksum, the block's CRC-32): a full save then.
    """
    blocks: list[_Block | None] = []
    for b in old.blocks:
        t = b.table
        if t is None:
            blocks.append(None)
            continue
        if t.raw_crcs is None:
            return None
        n = len(t.chunks)
        for k, ((size, crc), raw) in enumerate(zip(t.chunks, t.raw_crcs, strict=True)):
            if size == t.raw_size(k, b.nbytes) and crc != raw:
                return None
        if crc_concat(list(t.raw_crcs), t.chunk, t.raw_size(n - 1, b.nbytes)) != b.crc32:
            return None
        blocks.append(_Block(None, b.nbytes, None, (0, 0), np.asarray(t.raw_crcs, np.uint32)))
    return _Baseline((), old.description.checkpoint_id, blocks, from_file=True)


def _find(enc: EncodedGraph, plan: _storage.Layout, path: str, real: str, fd: int,
          compression: Compression, caller_half: bool = False) -> _Candidates:
    """Step 1 (module docstring): the candidate chunks, copied; raises _Stop.

    ``caller_half`` (a background save's): a baseline read from the file is not used
    (checksumming all memory would stall the caller: a snapshot child does it).
    """
    st = os.fstat(fd)
    try:
        with open(fd, "rb", buffering=0, closefd=False) as f:
            old = read_header(f, path, st.st_size)
    except Exception as exc:
        raise _Stop("the file is not a checkpoint this save can update") from exc
    why = _compatible(old, plan, enc, compression)
    if why is not None:
        raise _Stop(why)
    if _too_loose([t.end - t.start for n, t in old.tensors.items()
                   if not n.startswith("__pad__.")],
                  max((t.end for t in old.tensors.values()), default=0)):
        raise _Stop("the file's free space passed its bound: a full save packs it")
    base = _lookup(real, st, old)
    if base is None:
        base = _from_file(old)
        if base is None:
            raise _Stop("this process did not write the file's current state and the file "
                        "lists no raw checksums of its chunks to compare memory with (no "
                        "baseline of its chunks)")
        if caller_half:   # checksumming all memory here would stall the caller
            raise _ToChild()
    budget = int(FULL_FRACTION * max(plan.data_bytes, 1))
    found = _Candidates(st, old, base, {}, {}, {}, {})
    spent = 0
    for i, (b, source) in enumerate(zip(old.blocks, plan.sources, strict=True)):
        nbytes = plan.blocks[i].nbytes
        if b.table is None:
            data = b"".join(bytes(piece) for piece, _copy in source.chunks())
            if os.pread(fd, len(data), old.block_file_start(i)) != data:
                found.raw_blocks[i] = data
            continue
        known = base.blocks[i] if i < len(base.blocks) else None
        chosen = _chunks_of(source, nbytes, known, compression.chunk, found, i,
                            budget - spent)
        spent += sum(len(v) for v in chosen.values())
        found.chunks[i] = chosen
    return found


def _chunks_of(source: Source, nbytes: int, known: _Block | None, chunk: int,
               found: _Candidates, i: int, budget: int) -> dict[int, bytes]:
    """The candidate chunks of one block, copied (sets its next token and edges); _Stop
    when they pass ``budget`` bytes (before copying them, where the kernel lists them)."""
    too_much = _Stop("more changed than an incremental save is worth")
    lo = source.lo if isinstance(source, MemorySpan) and not source.lead else None
    n = -(-nbytes // chunk)
    same = known is not None and known.nbytes == nbytes and known.crcs.size == n
    if lo is not None and known is not None and same and known.lo == lo \
            and known.token is not None and _tracking.mode() == "writeprotect":
        scanned = _tracking.scan_and_token(lo, lo + nbytes, known.token)
        if scanned is not None:
            runs, token = scanned
            found.tokens[i] = token
            picked: set[int] = set()
            for a, b in (runs - lo).tolist():
                a, b = max(a, 0), min(b, nbytes)
                if b > a:
                    picked.update(range(a // chunk, (b - 1) // chunk + 1))
            edges = _edge_crcs(lo, nbytes)
            found.edges[i] = edges
            if edges[0] != known.edges[0]:
                picked.add(0)
            if edges[1] != known.edges[1]:
                picked.add(n - 1)
            if sum(min(chunk, nbytes - k * chunk) for k in picked) > budget:
                raise too_much
            mem = _memory(lo, nbytes)
            return {k: bytes(mem[k * chunk:(k + 1) * chunk]) for k in sorted(picked)}
    # No protection to ask: every chunk's raw CRC against the baseline's (armed first, so
    # writes from now on are seen by the next save).
    if lo is not None:
        armed = _tracking.arm_for_full_save([source], [nbytes])[0]
        found.tokens[i] = None if armed is None else armed.token
        found.edges[i] = _edge_crcs(lo, nbytes)
    out: dict[int, bytes] = {}
    if not same or known is None:
        for k, (piece, _live) in enumerate(chunk_pieces(source, chunk)):
            budget -= memoryview(piece).nbytes
            if budget < 0:
                raise too_much
            out[k] = bytes(piece)
        return out
    # Checksums of the chunks as they are (zlib releases the GIL: a pool's threads share
    # the work), a window of them at a time; only the chunks that differ are copied.
    window = 4 * workers()
    pieces = chunk_pieces(source, chunk)
    with ThreadPoolExecutor(workers(), thread_name_prefix="namedschema-crc") as pool:
        k = 0
        while True:
            batch = [p for p, _live in itertools.islice(pieces, window)]
            if not batch:
                break
            for piece, crc in zip(batch, pool.map(zlib.crc32, batch), strict=True):
                if crc != int(known.crcs[k]):
                    budget -= memoryview(piece).nbytes
                    if budget < 0:
                        raise too_much
                    out[k] = bytes(piece)
                k += 1
    return out


# --------------------------------------------------------------------------
# Updates: compress, place, journal, write
# --------------------------------------------------------------------------

class _Space:
    """Free stretches of one range (sorted, disjoint)."""

    def __init__(self, lo: int, hi: int, used: list[tuple[int, int]]) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        at = lo
        for a, b in sorted(used):
            if a > at:
                self.starts.append(at)
                self.ends.append(a)
            at = max(at, b)
        if hi > at:
            self.starts.append(at)
            self.ends.append(hi)

    def take_at(self, at: int, size: int) -> bool:
        """Take ``[at, at + size)`` if it is free."""
        k = bisect.bisect_right(self.starts, at) - 1
        if k >= 0 and at + size <= self.ends[k]:
            self._cut(k, at, size)
            return True
        return False

    def take(self, size: int, align: int = 1) -> int | None:
        """Take ``size`` bytes (at a multiple of ``align``): the last stretch first (the
        room at the end of a tensor, where it fits in one step), then the first that fits."""
        k: int
        for k in [len(self.starts) - 1, *range(len(self.starts) - 1)] if self.starts else []:
            at = self.starts[k] + (-self.starts[k] % align)
            if at + size <= self.ends[k]:
                self._cut(k, at, size)
                return at
        return None

    def _cut(self, k: int, at: int, size: int) -> None:
        parts = [p for p in ((self.starts[k], at), (at + size, self.ends[k])) if p[1] > p[0]]
        self.starts[k:k + 1] = [p[0] for p in parts]
        self.ends[k:k + 1] = [p[1] for p in parts]


@dataclass
class _Plan:
    pieces: list[tuple[int, Any, int]]
    blocks: list[BlockEntry]
    sizes: list[int]
    crcs: list[np.ndarray | None]
    end: int                     # the data section's end
    written: int


def _squeeze(found: _Candidates, level: int) -> dict[int, dict[int, tuple[Any, int, int]]]:
    """Step 2: the candidates compressed, ``{block: {chunk: (stored, crc, raw crc)}}``."""
    out: dict[int, dict[int, tuple[Any, int, int]]] = {}
    jobs = [(i, k, data) for i, chosen in found.chunks.items() for k, data in chosen.items()]
    if len(jobs) > 1:
        with ThreadPoolExecutor(workers(), thread_name_prefix="namedschema-zstd") as pool:
            results = list(pool.map(lambda j: compress_chunk(j[2], False, level), jobs))
    else:
        results = [compress_chunk(j[2], False, level) for j in jobs]
    for (i, k, _data), result in zip(jobs, results, strict=True):
        out.setdefault(i, {})[k] = result
    return out


def _too_loose(sizes: list[int], end: int) -> bool:
    """Whether the padding between the blocks' tensors passed its bound (step 4)."""
    used = sum(s + (-s % ALIGN) for s in sizes)
    return end - used > used // 2 + SLACK


def _place(found: _Candidates, plan: _storage.Layout, fd: int, budget: int | None,
           squeezed: dict[int, dict[int, tuple[Any, int, int]]]) -> _Plan:
    """Steps 3 and 4: where every changed chunk goes; the journal's pieces.

    ``budget`` None: no limit (a background save's copies are all it can write from).
    """
    old = found.old
    base = old.data_start
    blocks = list(old.blocks)
    sizes = [old.tensors[b.tensor].end - old.tensors[b.tensor].start for b in blocks]
    crcs: list[np.ndarray | None] = [None] * len(blocks)
    pieces: list[tuple[int, Any, int]] = []
    end = max((t.end for t in old.tensors.values()), default=0)
    region_space = _Space(0, end, [(b.start, b.start + sizes[i]) for i, b in enumerate(blocks)])
    cost = 0
    moved: list[tuple[int, int]] = []     # old places of moved blocks, zeroed
    for i, data in found.raw_blocks.items():
        crc = zlib.crc32(data)
        blocks[i] = replace(blocks[i], crc32=crc)
        pieces.append((base + blocks[i].start, data, crc))
        cost += len(data)
    for i, b in enumerate(blocks):
        if b.table is None:
            continue
        table = b.table
        nbytes = plan.blocks[i].nbytes
        n = -(-nbytes // table.chunk)
        known = found.base.blocks[i] if i < len(found.base.blocks) else None
        resized = n != len(table.chunks) or nbytes != b.nbytes
        block_crcs = np.zeros(n, np.uint32) if resized or known is None \
            else known.crcs.copy()
        news = squeezed.get(i, {})
        entries = list(table.chunks) if not resized else [(0, 0)] * n
        starts = list(table.starts()) if not resized else [0] * n
        changed: dict[int, Any] = {}
        for k, (stored, crc, raw_crc) in news.items():
            block_crcs[k] = raw_crc
            if not resized and (len(stored), crc) == entries[k] and os.pread(
                    fd, len(stored), base + b.start + starts[k]) == bytes(stored):
                continue    # written with the same values: the file has it
            changed[k] = stored
            entries[k] = (len(stored), crc)
        crcs[i] = block_crcs
        raw_crcs = tuple(int(c) for c in block_crcs)
        if not changed and not resized:
            blocks[i] = replace(b, table=replace(table, raw_crcs=raw_crcs))
            continue
        keep = [] if resized else [(starts[k], starts[k] + entries[k][0])
                                   for k in range(n) if k not in changed]
        placed = {}
        space = _Space(0, sizes[i], keep)
        for k in sorted(changed):
            if not resized and space.take_at(starts[k], len(changed[k])):
                placed[k] = starts[k]
        for k in sorted(changed, key=lambda k: -len(changed[k])):
            if k not in placed:
                at = space.take(len(changed[k]))
                if at is None:
                    break
                placed[k] = at
        start = b.start
        if len(placed) == len(changed):
            for k, at in placed.items():
                pieces.append((base + start + at, changed[k], entries[k][1]))
                starts[k] = at
                cost += len(changed[k])
        else:
            # pack the block again: the unchanged chunks from the file, the changed ones new
            parts = []
            for k in range(n):
                parts.append(changed[k] if k in changed else os.pread(
                    fd, entries[k][0], base + b.start + starts[k]))
            total = sum(len(p) for p in parts)
            if total > sizes[i]:
                # too big for its tensor: move it (padding, else the end of the file)
                size = _write.placed_capacity(total, nbytes, table.chunk)
                at = region_space.take(size, PAGE)
                if at is None:
                    at = end + (-end % PAGE)
                    end = at + size
                moved.append((b.start, b.start + sizes[i]))
                start, sizes[i] = at, size
            packed = b"".join(parts)
            pieces.append((base + start, packed, zlib.crc32(packed)))
            cost += total
            at = 0
            for k, p in enumerate(parts):
                starts[k] = at
                at += len(p)
        if budget is not None and 2 * cost > budget:
            raise _Stop("more changed than an incremental save is worth")
        block_crc = crc_concat([int(c) for c in block_crcs], table.chunk,
                               table.raw_size(n - 1, nbytes))
        blocks[i] = replace(b, start=start, nbytes=nbytes, crc32=block_crc, table=replace(
            table, chunks=tuple(entries), stored=sizes[i], offsets=tuple(starts),
            raw_crcs=raw_crcs))
    for lo, hi in moved:
        zeros = bytes(hi - lo)
        pieces.append((base + lo, zeros, zlib.crc32(zeros)))
        cost += hi - lo
    if budget is not None and 2 * cost > budget:
        raise _Stop("more changed than an incremental save is worth")
    if budget is not None and moved and _too_loose(sizes, end):
        raise _Stop("the file's free space passed its bound: a full save packs it")
    return _Plan(pieces, blocks, sizes, crcs, end, sum(len(memoryview(p[1])) for p in pieces))


def _commit(enc: EncodedGraph, plan: _storage.Layout, path: str, real: str, fd: int,
            found: _Candidates, compression: Compression, progress: bool,
            lenient: bool = False) -> SaveRecord:
    """Steps 2 to 5 of an update whose candidates are copied aside; raises _Stop.

    ``lenient`` (a background save's second half): no budget, no bound on padding (the
    next save's first half checks it).
    """
    old = found.old
    budget = None if lenient else int(FULL_FRACTION * max(plan.data_bytes, 1))
    squeezed = _squeeze(found, compression.level)
    placed = _place(found, plan, fd, budget, squeezed)
    declared = [plan.tensors[b.tensor] for b in plan.blocks]
    saved = SaveRecord("incremental", placed.written, len(placed.pieces), plan.data_bytes)
    header = Header(_write.placed_description(enc, plan, tuple(placed.blocks), saved),
                    _write.placed_tensors(placed.blocks, placed.sizes, declared, placed.end),
                    name=path)
    length = old.data_start - 8
    raw = header.encode()
    if len(raw) > length:
        raise _Stop("its header outgrew the room the file has for it")
    head = struct.pack("<Q", length) + header.encode(length)
    pieces = [*placed.pieces, (0, head, zlib.crc32(head))]
    size = max(found.st.st_size, old.data_start + placed.end)
    bar = Progress(placed.written, "saving (incremental)", progress)
    _journal.reserve(fd, pieces, found.st.st_size)
    try:
        _journal.write(_write.journal_path(path), old.description.checkpoint_id,
                       header.description.checkpoint_id, size, pieces)
    except _journal.Unusable as exc:
        raise _Stop("something that is not a journal is in the way of the journal") from exc
    if size > found.st.st_size:   # committed: the file may grow now (a replay grows it too)
        os.ftruncate(fd, size)
    _tracking.write_in_place(fd, size, pieces, bar)
    news: list[_Block | None] = []
    for i, crcs in enumerate(placed.crcs):
        b = plan.blocks[i]
        if old.blocks[i].table is None:
            news.append(None)
            continue
        known = found.base.blocks[i] if i < len(found.base.blocks) else None
        if crcs is None:
            crcs = known.crcs if known is not None else np.zeros(0, np.uint32)
        # edges as taken before the copy (later writes: the next save's)
        news.append(_new_block(plan.sources[i], b.nbytes, found.tokens.get(i), crcs,
                               found.edges.get(i, (0, 0))))
    _record(real, os.fstat(fd), header.description.checkpoint_id, news)
    return saved


def update(enc: EncodedGraph, plan: _storage.Layout, path: str, real: str, fd: int,
           progress: bool, compression: Compression) -> SaveRecord | str:
    """Update the locked file ``fd`` in place with the chunks that changed, or say why not."""
    return _or_why(real, lambda: _commit(enc, plan, path, real, fd,
                                         _find(enc, plan, path, real, fd, compression),
                                         compression, progress))


def begin(enc: EncodedGraph, plan: _storage.Layout, path: str, real: str, fd: int,
          progress: bool, compression: Compression
          ) -> Callable[[], SaveRecord | str] | str:
    """The caller's half of a background update: the candidates, copied; the rest to run
    in the writer thread (a SaveRecord, or why nothing was written). Or why not: ``""``
    when a snapshot child is to compare the chunks with the file (no baseline in memory,
    raw checksums in the file), which is no reason for a full save."""
    found = _or_why(real, lambda: _find(enc, plan, path, real, fd, compression, True))
    if isinstance(found, str):
        return found

    def rest() -> SaveRecord | str:
        return _or_why(real, lambda: _commit(enc, plan, path, real, fd, found, compression,
                                             progress, True))
    return rest


def _or_why(real: str, step: Callable[[], _T]) -> _T | str:
    """``step()``, or why it stopped (a ``_Stop``'s text); the baseline is forgotten
    when it does not finish, since the file may no longer match it."""
    try:
        return step()
    except _Stop as stop:
        forget(real)
        return str(stop)
    except BaseException:
        forget(real)
        raise


def report(path: str) -> tuple[str, os.stat_result, list[_Block | None]] | None:
    """This process's baseline of ``path`` (a snapshot child hands it to its parent)."""
    real = os.path.realpath(path)
    with _process.LOCK:
        known = _known.get(real)
    try:
        st = os.stat(real)
    except OSError:
        return None
    if known is None or known.identity != identity(st):
        return None
    return known.checkpoint_id, st, known.blocks


def adopt(path: str, reported: tuple[str, os.stat_result, list[_Block | None]] | None,
          armed: list[Any]) -> None:
    """Record what a snapshot child ``reported`` as this process's baseline, with the
    write protection ``armed`` at its fork (``_tracking.arm_for_full_save``)."""
    real = os.path.realpath(path)
    try:
        now = os.stat(real)
    except OSError:
        now = None
    if reported is None or now is None or identity(now) != identity(reported[1]):
        forget(real)
        return
    blocks: list[_Block | None] = []
    for i, b in enumerate(reported[2]):
        if b is not None and i < len(armed) and armed[i] is not None and b.lo is not None:
            b.token = armed[i].token
        elif b is not None:
            b.token = None
        blocks.append(b)
    _record(real, now, reported[0], blocks)
