"""Incremental saves: updating a checkpoint in place, crash-safely.

The relayout that grows a file whose blocks no longer fit, and the incremental save
itself, made atomic by the redo journal (``_journal``).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .. import _process
from ..errors import FormatError
from . import _journal, _storage, _tracking, _write
from ._compression import Compression
from ._graph import EncodedGraph, encode_graph
from ._header import ALIGN, BlockEntry, Header, SaveRecord, TensorEntry, read_header
from ._storage import PAGE, PICKLE_TENSOR, Layout, MemorySpan, Progress, congruence
from ._write import check_target, final_target, fsync_dir, is_file, journal_path

__all__ = ["Relayout", "plan", "SLACK", "save", "save_encoded", "full_save",
           "recover", "wait", "begin_background", "fallback_reason"]


# ---------------------------------------- relayout
#
# Relayout: place an incremental save's new and resized blocks around the blocks kept in place.
#
# A real run's checkpoints change more than array contents between saves: an
# emulator state or a sum tree's index list is a few bytes longer or shorter,
# an optimizer's state appears after the first step, the pickle of the
# non-array part outgrows the room it had. Such a save keeps every block that
# has the same tensor name, size and declaration as in the file where it is
# (its changed bytes are then written in place, as before) and *rewrites* the
# others whole, each at the first place that fits:
#
# * where the block was, when it still fits there (it may grow into the free
#   space after it, or shrink, giving the rest back);
# * else in the first free space (the padding between blocks and the room
#   given back by blocks that moved or went away) with room to spare;
# * else appended at the end of the file.
#
# Each block placed anew gets room to grow (1/8 of its size, at least 64
# bytes; a pickle block at least a page), so that a block whose size wobbles
# settles in one place. Bytes that blocks give back are zeroed (padding is
# zeros), so they are free space for later saves and the file does not grow
# without bound; when the free space grows past ``SLACK`` of the data, the
# caller writes a full, compact checkpoint instead.
#
# The result is a file of the same format: the tensors still tile the data
# section (the free space is ``__pad__.K`` tensors), only not in block order.
#
# Relayout   the new tensor table, the blocks at their places, what is kept and zeroed
# plan       the relayout of a new layout over an old header, or why there is none

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


# ---------------------------------------- incremental
#
# Incremental saves: update a checkpoint in place with only what changed since it was written.
#
# ``save(obj, path, incremental=True)`` compares ``obj`` with the checkpoint at
# ``path``. When both have the same arrays (shapes, dtypes, strides, views,
# hence the same blocks), it writes only the changed bytes, in place, through the
# redo journal (``_incremental.py``), so a crash leaves the old or the new checkpoint; otherwise it writes a full checkpoint through ``writer`` with
# the ``PAGE_ALIGNED`` layout, so that the next save can be incremental.
#
# What changed is found by ``_tracking.py`` (write protection armed at the last
# save, else page checksums, else a comparison with the file); the caller's
# memory is never mapped onto the file, so nothing done to the file (another
# process's save, ``cp`` over it, a truncation) can change or unmap it. The
# journal lives next to the real file when ``path`` is a symbolic link.
# When the changes would cost more than a quarter of a full save (their bytes,
# twice, plus ``_tracking.RANGE_COST`` per scattered range), a full save is
# cheaper and is done instead.
#
# save           save ``obj`` to ``path``, incrementally when the file allows it
# save_encoded   the same for a graph already encoded and laid out
# full_save      a full save laid out for incremental ones, recorded as their baseline
# begin_background  the caller's half of a background incremental save
# recover        finish or discard the journal an interrupted incremental save left
# wait           wait for the background sync of this process's last incremental save of a path
#                (a loader's shared lock, ``reading``, is in ``inflight``)

#: Above this fraction of changed data, a full save is done instead.
FULL_FRACTION = 0.25

_log = logging.getLogger("namedschema.checkpoint")
_fallbacks: dict[str, str] = {}   # real path -> why its last incremental-mode save was full


class _Finishing:
    """The background end of one incremental save (sync, remove the journal, unlock)."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def join(self) -> None:
        self.done.wait()


_pending_lock = threading.Lock()
_pending: dict[str, _Finishing] = {}          # real path -> its save's finishing thread
_locked_fds: set[int] = set()                # fds holding a lock (closed in fork children)


def _close_locked_in_child() -> None:
    # A fork child shares the lock with its parent until it closes the descriptor.
    for fd in list(_locked_fds):
        try:
            os.close(fd)
        except OSError:
            pass
    _locked_fds.clear()
    # The parent's finishing threads do not exist here: nothing to wait for (the lock is
    # made anew: a parent thread may have held it at the fork).
    global _pending_lock, _pending
    _pending_lock, _pending = threading.Lock(), {}


_process.on_fork_child("checkpoint._incremental", _close_locked_in_child)


# --------------------------------------------------------------------------
# Locking and the journal
# --------------------------------------------------------------------------

def wait(path: str) -> None:
    """Wait until the background sync of this process's last incremental save of ``path`` ends."""
    with _pending_lock:
        thread = _pending.get(os.path.realpath(path))
    if thread is not None:
        thread.join()


def _lock(fd: int, how: int) -> None:
    _locked_fds.add(fd)
    fcntl.flock(fd, how)


def _close(fd: int) -> None:
    _locked_fds.discard(fd)
    os.close(fd)


def _header_id(fd: int, path: str) -> str | None:
    try:
        with open(fd, "rb", buffering=0, closefd=False) as f:
            return read_header(f, path, os.fstat(fd).st_size).description.checkpoint_id
    except (FormatError, OSError):
        return None


def _recover_locked(path: str, fd: int) -> None:
    """With ``fd`` (the checkpoint, read-write) locked exclusively: settle its journal."""
    jpath = journal_path(path)
    if not is_file(jpath):
        return  # none, or something that is not a journal: never touched
    entry = _journal.read(jpath)
    if entry is not None:
        current = _header_id(fd, path)
        if current is None or current in (entry.base, entry.new):
            try:
                _journal.replay(entry, fd)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                    raise
                raise FormatError(
                    f"{path!r}: an interrupted incremental save left its committed journal "
                    f"{jpath!r}, and writing it into the file failed ({exc.strerror}); free "
                    f"space on the file system of {os.path.dirname(jpath)!r} (the journal "
                    "needs no more than its own size) and load again") from exc
    try:
        os.unlink(jpath)
    except FileNotFoundError:
        pass
    fsync_dir(os.path.dirname(jpath))


def recover(path: str) -> None:
    """Finish (or discard) the journal an interrupted incremental save of ``path`` left.

    Cheap when there is none (one ``stat``). Finishing needs write access.

    Raises:
        FormatError: there is a journal to finish but the file is not writable.
    """
    jpath = journal_path(path)
    if not is_file(jpath):
        return
    wait(path)
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return
    except PermissionError as exc:
        if _journal_outlives_saver(path, jpath):
            raise FormatError(f"{path!r}: an incremental save of it was interrupted and its "
                              "journal must be applied, which needs write access to the file "
                              "and its directory") from exc
        return
    try:
        _lock(fd, fcntl.LOCK_EX)
        _recover_locked(path, fd)
    finally:
        _close(fd)


def _journal_outlives_saver(path: str, jpath: str) -> bool:
    """Without write access: wait for a running saver to finish; is its journal still there?"""
    try:
        with open(path, "rb", buffering=0) as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
    except OSError:
        pass
    return bool(is_file(jpath))


# --------------------------------------------------------------------------
# Why a save was full
# --------------------------------------------------------------------------

def fallback_reason(path: str | os.PathLike[str]) -> str | None:
    """Why this process's last incremental-mode save of ``path`` wrote a full checkpoint.

    None when it was incremental, or when the reason is not known here (a
    save written by a snapshot child, a file saved for the first time).
    """
    return _fallbacks.get(os.path.realpath(os.fspath(path)))


def _note(real: str, reason: str | None) -> None:
    if reason is None:
        _fallbacks.pop(real, None)
    else:
        _fallbacks[real] = reason


def _logged(path: str, record: SaveRecord) -> SaveRecord:
    if _log.isEnabledFor(logging.DEBUG):
        why = _fallbacks.get(os.path.realpath(path)) if record.kind == "full" else None
        _log.debug("saved %s: %s, %d of %d data bytes written in %d ranges%s", path,
                   record.kind, record.bytes_written, record.data_bytes, record.ranges,
                   f" (not incremental: {why})" if why else "")
    return record


# --------------------------------------------------------------------------
# Full saves laid out for incremental ones
# --------------------------------------------------------------------------

def full_save(enc: EncodedGraph, plan: _storage.Layout, path: str, progress: bool) -> SaveRecord:
    """A full save laid out for incremental ones, recorded as the baseline of the next.

    Tracking is armed before any byte is read, so writes during the save are
    seen by the next one. (A background save's child runs this too.)
    """
    known = _tracking.arm_for_full_save(plan.sources, [b.nbytes for b in plan.blocks])
    written = _write.write(enc, plan, path, _write.PAGE_ALIGNED, progress=progress)
    saved = written.header.description.saved
    assert saved is not None  # PAGE_ALIGNED records the save
    real = os.path.realpath(path)
    try:
        now = os.stat(real)
    except OSError:
        return saved
    if (now.st_dev, now.st_ino) == (written.stat.st_dev, written.stat.st_ino):
        _tracking.record(real, now, written.header.description.checkpoint_id, known)
    return saved


# --------------------------------------------------------------------------
# Incremental saves
# --------------------------------------------------------------------------

def _match(old: Header, plan: _storage.Layout, enc: EncodedGraph) -> dict[str, TensorEntry] | None:
    """The new tensor table if ``plan`` can update ``old`` in place, else None."""
    has_pickle = enc.pickle_bytes is not None
    if (len(old.blocks) != len(plan.blocks) or (old.description.pickle is not None)
            != has_pickle or old.arrays != plan.arrays or any(b.table for b in old.blocks)):
        return None
    n_data = len(plan.blocks) - has_pickle
    for i in range(n_data):
        ob, nb = old.blocks[i], plan.blocks[i]
        ot, nt = old.tensors[ob.tensor], plan.tensors[nb.tensor]
        if (ob.tensor, ob.nbytes, ot.dtype, ot.shape) != (nb.tensor, nb.nbytes, nt.dtype,
                                                           nt.shape):
            return None
    table = dict(old.tensors)
    if enc.pickle_bytes is not None and old.description.pickle is not None:
        ob = old.blocks[-1]
        if old.description.pickle.block != len(old.blocks) - 1 or ob.tensor != \
                _storage.PICKLE_TENSOR:
            return None
        room = old.file_size - old.data_start - ob.start
        size = len(enc.pickle_bytes)
        tail = [n for n, t in table.items() if t.start >= ob.start + ob.nbytes]
        if size > room or any(not n.startswith("__pad__.") for n in tail):
            return None
        for n in tail:
            del table[n]
        table[ob.tensor] = TensorEntry("U8", (size,), ob.start, ob.start + size)
        if room > size:
            table[tail[0] if tail else "__pad__.tail"] = TensorEntry(
                "U8", (room - size,), ob.start + size, ob.start + room)
    return table


def save(obj: Any, path: str | os.PathLike[str], *, allow_pickle: bool = False,
         progress: bool = False, metadata: dict[str, str] | None = None) -> SaveRecord:
    """Save ``obj`` to ``path``, writing only what changed if ``path`` holds the same arrays.

    Returns the record of what was written (also stored in the file, see
    ``inspect``). Arguments as for :func:`namedschema.save`.
    """
    path = os.fspath(path)
    check_target(final_target(path), path)  # never open a FIFO or device read-write
    enc = encode_graph(obj, path, allow_pickle, metadata)
    plan = _storage.plan(enc.encoder.arrays.entries, enc.pickle_bytes)
    return save_encoded(enc, plan, path, progress)


def save_encoded(enc: EncodedGraph, plan: _storage.Layout, path: str,
                 progress: bool, compression: Compression | None = None) -> SaveRecord:
    """``save`` of a graph already encoded and laid out (background saves encode first).

    With ``compression``, a compressed file is updated chunk by chunk (``squeezed``).
    """
    wait(path)
    real = os.path.realpath(path)
    _note(real, None)

    def full_save_() -> SaveRecord:
        if compression is None:
            return full_save(enc, plan, path, progress)
        record: SaveRecord = _squeezed().full_save(enc, plan, path, progress, compression)
        return record
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        _note(real, None)
        return _logged(path, full_save_())
    handed_over = False
    try:
        _lock(fd, fcntl.LOCK_EX)
        st = os.fstat(fd)
        try:
            now = os.stat(path)
        except OSError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            _note(real, "the file was replaced while the save waited for it")
            return _logged(path, full_save_())
        _recover_locked(path, fd)
        try:
            record = _incremental(enc, plan, path, real, fd, progress, compression)
        except BaseException:
            _tracking.forget(real)  # tracking was re-armed for a save that did not happen
            raise
        if record is None:
            return _logged(path, full_save_())
        _note(real, None)
        handed_over = True
        return _logged(path, record)
    finally:
        if not handed_over:
            _close(fd)


def _squeezed() -> Any:
    """The module of compressed updates, imported only by saves that ask for them."""
    from . import _squeezed as squeezed
    return squeezed


def _incremental(enc: EncodedGraph, plan: _storage.Layout, path: str, real: str, fd: int,
                 progress: bool, compression: Compression | None = None
                 ) -> SaveRecord | None:
    saved: SaveRecord | None
    left: list[Callable[[], None]] = []      # the in-place writes, for the finishing thread
    if compression is not None:
        result: SaveRecord | str = _squeezed().update(enc, plan, path, real, fd, progress,
                                                      compression)
        saved = None if isinstance(result, str) else result
        if isinstance(result, str):
            _note(real, result)
    else:
        found = _scan(enc, plan, path, real, fd, defer=False)
        saved = None if found is None else _write_changes(enc, plan, path, real, fd, *found,
                                                          progress=progress, leave=left)
    if saved is not None:
        _finish_later(path, real, fd, journal_path(path), left)
    return saved


@dataclass(frozen=True)
class _Moved:
    """The blocks a relaid save writes whole, copied when it scanned (see ``relayout``)."""

    plan: Relayout
    contents: dict[int, bytes]      # new block index -> its bytes


_Found = tuple[os.stat_result, Header, dict[str, TensorEntry], _tracking.Scan, _Moved | None]


def _content(source: Any) -> bytes:
    return b"".join(bytes(chunk) for chunk, _copy in source.chunks())


def _scan(enc: EncodedGraph, layout_plan: _storage.Layout, path: str, real: str, fd: int,
          defer: bool) -> _Found | None:
    """Find what changed (``defer``: copy the candidates aside, compared later); None: full."""
    st = os.fstat(fd)
    try:
        with open(fd, "rb", buffering=0, closefd=False) as f:
            old = read_header(f, path, st.st_size)
    except FormatError:
        _note(real, "the file is not a checkpoint this save can update")
        return None
    budget = int(FULL_FRACTION * max(layout_plan.data_bytes, 1))
    table = _match(old, layout_plan, enc)
    moved: Relayout | None = None
    if table is None:   # arrays changed shape, came or went, or the pickle outgrew its room
        found = plan(old, layout_plan)
        if isinstance(found, str):
            _note(real, found)
            return None
        cost = 2 * (found.rewritten + found.zeroed_bytes)
        if cost > budget:
            _note(real, f"{found.reason}: rewriting {found.rewritten + found.zeroed_bytes:,} "
                  f"of {layout_plan.data_bytes:,} bytes is not worth an incremental save")
            return None
        budget -= cost
        moved, table = found, found.tensors
        old = replace(old, description=replace(old.description, blocks=tuple(
            old.blocks[k] if k is not None else b
            for k, b in zip(found.kept, found.blocks, strict=True))))
    scan = _tracking.Scan(fd, st, old, budget, real, defer,
                         origin=None if moved is None else moved.kept)
    has_pickle = enc.pickle_bytes is not None
    n_data = len(layout_plan.blocks) - has_pickle
    try:
        for i in range(n_data):
            if moved is not None and moved.kept[i] is None:
                continue
            source = layout_plan.sources[i]
            if isinstance(source, MemorySpan):
                scan.memory(i, source.lo, source.nbytes)
            else:
                scan.compact(i, source)
    except _tracking.TooMuch:
        scan.release()
        _note(real, "more changed than an incremental save is worth")
        return None
    spans = [(src.lo, src.lo + src.nbytes) for src in layout_plan.sources
             if isinstance(src, MemorySpan)]
    data = [(old.block_file_start(i), old.block_file_start(i) + old.blocks[i].nbytes)
            for i in range(n_data) if moved is None or moved.kept[i] is not None]
    contents: dict[int, bytes] = {}
    if moved is not None:
        base = old.data_start
        data += [(base + b.start, base + b.start + b.nbytes)
                 for b, k in zip(moved.blocks, moved.kept, strict=True) if k is None]
        data += [(base + lo, base + hi) for lo, hi in moved.zeroed]
        for i, k in enumerate(moved.kept):
            if k is None:   # armed before its bytes are copied: later writes are seen
                scan.blocks[i] = _tracking.arm_for_full_save([layout_plan.sources[i]],
                                                            [layout_plan.blocks[i].nbytes])[0]
                contents[i] = _content(layout_plan.sources[i])
    if (scan.changes or scan.deferred or moved is not None) and _tracking.others_map(
            scan.maps, scan.dev, scan.ino, spans, data):
        scan.release()
        _note(real, "another map of the file would see the change")
        return None  # another map of this file would see the change: write a new file
    if (moved is not None or defer) and not _header_fits(enc, layout_plan, old, table):
        scan.release()
        _note(real, "its header outgrew the room the file has for it")
        return None
    return st, old, table, scan, None if moved is None else _Moved(moved, contents)


def _header_fits(enc: EncodedGraph, plan: _storage.Layout, old: Header,
                 table: dict[str, TensorEntry]) -> bool:
    """Whether the new header fits the file's header room (its numbers at their widest)."""
    blocks = old.blocks
    if enc.pickle_bytes is not None and len(blocks) == len(plan.blocks):
        blocks = (*blocks[:-1], replace(blocks[-1], nbytes=len(enc.pickle_bytes)))
    widest = SaveRecord("incremental", 10**17, 10**13, plan.data_bytes)
    header = Header(_write.describe(enc, plan, tuple(blocks), widest), table)
    return len(header.encode()) <= old.data_start - 8


def _write_changes(enc: EncodedGraph, plan: _storage.Layout, path: str, real: str, fd: int,
                   st: os.stat_result, old: Header, table: dict[str, TensorEntry],
                   scan: _tracking.Scan, moved: _Moved | None, progress: bool,
                   leave: list[Callable[[], None]] | None = None) -> SaveRecord | None:
    """Journal and write what ``_scan`` found; None (nothing written): a full save instead.

    ``leave``: the in-place writes of the changed ranges and the baseline of the
    next save are appended there, for the finishing thread (the journal is then
    committed and the header written), instead of being done here.
    """
    scan.compare_deferred()
    data_bytes = plan.data_bytes
    crcs, pieces = _tracking.crc_updates(old, scan.changes)
    n_changes = len(pieces)
    blocks = [replace(b, crc32=crcs.get(i, b.crc32)) for i, b in enumerate(old.blocks)]
    written = scan.changed
    size = st.st_size
    new = enc.pickle_bytes
    if moved is not None:
        for i, data in moved.contents.items():
            crc = zlib.crc32(data)
            blocks[i] = replace(blocks[i], crc32=crc)
            pieces.append((old.data_start + blocks[i].start, data, crc))
            written += len(data)
        for lo, hi in moved.plan.zeroed:
            zeros = bytes(hi - lo)
            pieces.append((old.data_start + lo, zeros, zlib.crc32(zeros)))
            written += hi - lo
        size = max(size, old.data_start + moved.plan.data_end)
    elif new is not None:
        start = old.block_file_start(len(old.blocks) - 1)
        before = os.pread(fd, old.blocks[-1].nbytes, start)
        if before != new:
            piece = new + bytes(max(0, len(before) - len(new)))  # zero what it gave back
            pieces.append((start, piece, zlib.crc32(piece)))
            written += len(new)
        blocks[-1] = replace(blocks[-1], nbytes=len(new), crc32=zlib.crc32(new))
    saved = SaveRecord("incremental", written, len(pieces), data_bytes)
    header = Header(_write.describe(enc, plan, tuple(blocks), saved), table, name=path)
    length = old.data_start - 8
    if len(header.encode()) > length:
        _note(real, "its header outgrew the room the file has for it")
        return None
    head = struct.pack("<Q", length) + header.encode(length)
    pieces.append((0, head, zlib.crc32(head)))
    bar = Progress(written, "saving (incremental)", progress)
    _journal.reserve(fd, pieces, st.st_size)   # before the commit: a replay needs no space
    jpath = journal_path(path)
    try:
        _journal.write(jpath, old.description.checkpoint_id, header.description.checkpoint_id,
                      size, pieces)
    except _journal.Unusable:
        _note(real, "something that is not a journal is in the way of the journal")
        return None  # something else at the journal's path: a full save needs no journal
    _tracking.note(real, st, old.description.checkpoint_id, header.description.checkpoint_id,
                  pieces, st.st_size if size > st.st_size else None)   # before a byte changes
    if size > st.st_size:   # committed: the file may grow now (a replay grows it too)
        os.ftruncate(fd, size)

    def in_place() -> None:
        # Each range that dirties a clean page-cache folio costs the kernel ~20 us (random
        # 1% of 1 GiB: 2,600 ranges, ~35 ms), hence ``leave``: committed, the journal
        # makes them durable; whoever opens the file next waits for them (the lock).
        _tracking.write_in_place(fd, size, pieces[:n_changes])
        _tracking.record(real, os.fstat(fd), header.description.checkpoint_id, scan.blocks)

    if leave is None:
        _tracking.write_in_place(fd, size, pieces[:n_changes])
    bar.advance(scan.changed)
    for offset, data, _crc in pieces[n_changes:]:  # the rewritten blocks, then the header
        view = memoryview(data).cast("B")
        done = 0
        while done < view.nbytes:
            done += os.pwrite(fd, view[done:], offset + done)
        if offset:
            bar.advance(view.nbytes)
    if leave is not None:
        leave.append(in_place)
        return saved
    _tracking.record(real, os.fstat(fd), header.description.checkpoint_id, scan.blocks)
    return saved


# Background saves (background.py runs them) -----------------------------------

_outgrown: set[str] = set()      # real paths whose header outgrew its room in the background


def begin_background(enc: EncodedGraph, plan: _storage.Layout, path: str,
                     progress: bool, compression: Compression | None = None
                     ) -> Callable[[], SaveRecord] | None:
    """The caller's half of a background incremental save: lock, scan, copy the changes aside.

    Only with write protection (other tracking reads all memory: a fork is
    cheaper). Returns the other half (compare the copies with the file,
    journal, write in place, sync, unlock) for a thread, or None: a full save.
    """
    real = os.path.realpath(path)
    _note(real, None)
    if _tracking.mode() != "writeprotect" or real in _outgrown:
        _outgrown.discard(real)
        return None
    wait(path)
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    write: Callable[[], SaveRecord | None] | None = None
    try:
        _lock(fd, fcntl.LOCK_EX)
        if (os.stat(path).st_ino, os.stat(path).st_dev) != (os.fstat(fd).st_ino,
                                                          os.fstat(fd).st_dev):
            return None
        _recover_locked(path, fd)
        if is_file(journal_path(path)) is not False:  # junk: a full save
            try:
                write = _begin(enc, plan, path, real, fd, progress, compression)
            except BaseException:
                _tracking.forget(real)
                raise
    finally:
        if write is None:
            _close(fd)
    return None if write is None else functools.partial(
        _finish_background, path, real, fd, write)


def _begin(enc: EncodedGraph, plan: _storage.Layout, path: str, real: str, fd: int,
           progress: bool, compression: Compression | None
           ) -> Callable[[], SaveRecord | None] | None:
    """The scan of a background save, copies aside; the write for the writer thread."""
    if compression is None:
        found = _scan(enc, plan, path, real, fd, defer=True)
        return None if found is None else functools.partial(
            _write_changes, enc, plan, path, real, fd, *found, progress=progress)
    rest: Callable[[], SaveRecord | str] | str = _squeezed().begin(
        enc, plan, path, real, fd, progress, compression)
    if isinstance(rest, str):
        if rest:         # "": a snapshot child compares the chunks (no full save)
            _note(real, rest)
        return None

    def write() -> SaveRecord | None:
        result = rest()
        if isinstance(result, str):
            _note(real, result)
            return None
        return result
    return write


def _finish_background(path: str, real: str, fd: int,
                       write: Callable[[], SaveRecord | None]) -> SaveRecord:
    jpath = journal_path(path)
    try:
        saved = write()
        if saved is None:
            _outgrown.add(real)
            raise OSError(f"{path!r}: the incremental save was not made "
                          f"({_fallbacks.get(real, 'its header outgrew its room')}); nothing "
                          "was written, the next save of it writes a full checkpoint")
        os.fdatasync(fd) if hasattr(os, "fdatasync") else os.fsync(fd)
        os.unlink(jpath)
        fsync_dir(os.path.dirname(jpath))
        return _logged(path, saved)
    except BaseException:
        _tracking.forget(real)
        raise
    finally:
        _close(fd)


def _finish_later(path: str, real: str, fd: int, jpath: str,
                  in_place: list[Callable[[], None]]) -> None:
    """Write the changes in place, sync the checkpoint and remove the journal in the
    background, then unlock.

    Until then the journal makes the new state durable; the next save or load
    of ``path`` waits for this (in this process through the thread, in others
    through the lock).
    """
    def finish() -> None:
        try:
            for write in in_place:
                write()
            os.fdatasync(fd) if hasattr(os, "fdatasync") else os.fsync(fd)
            os.unlink(jpath)
            fsync_dir(os.path.dirname(jpath))
        except Exception as exc:  # the journal stays; the next open applies it again
            _tracking.forget(real)
            if os.path.lexists(jpath):
                _log.warning("%s: finishing an incremental save failed (%r); its committed "
                             "journal %s is applied by the next save or load", path, exc,
                             jpath)
        except BaseException:     # (run inline: no thread could be started)
            _tracking.forget(real)
            raise
        finally:
            try:
                _close(fd)
                with _pending_lock:
                    if _pending.get(key) is handle:
                        del _pending[key]
            finally:
                handle.done.set()

    key = os.path.realpath(path)
    handle = _Finishing()
    with _pending_lock:
        _pending[key] = handle
    # A non-daemon thread, which every way out of a process that runs Python's thread
    # shutdown waits for: the interpreter's exit, and a multiprocessing worker's, which ends
    # with os._exit and no atexit hooks (a bare thread, 2.5 ms faster to start on a loaded
    # machine, left those workers' journals behind: a read-only load then failed).
    thread = threading.Thread(target=finish, name="namedschema-finish-save")
    try:
        thread.start()
    except RuntimeError:   # no thread to be had: finish here
        finish()


def _finish_all() -> None:
    """At exit: wait for the saves still finishing (their journals then are gone)."""
    with _pending_lock:
        handles = list(_pending.values())
    for handle in handles:
        handle.join()


_process.at_exit("checkpoint._incremental", _finish_all)
