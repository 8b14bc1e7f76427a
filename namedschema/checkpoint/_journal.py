"""The redo journal of in-place incremental saves: what makes an update atomic.

An incremental save (``_incremental``, ``_squeezed``) writes every byte it will change
into a journal next to the checkpoint, commits it, then writes the bytes in place; a
crash leaves a committed journal (replayed at the next save or load) or none (the old
checkpoint stands).
"""

from __future__ import annotations

import bisect
import errno
import io
import json
import os
import stat
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import FormatError
from ._header import MAX_HEADER, read_header
from ._storage import write_all
from ._write import fsync_dir, is_file, journal_path

__all__ = ["journal_path", "is_file", "Unusable", "Journal", "write", "read", "replay",
           "growth_problem", "reserve"]


# ---------------------------------------- journal
#
# The redo journal that makes an in-place incremental save all-or-nothing.
#
# An incremental save first writes every byte range it will change in the
# checkpoint (the new header included) to ``.<name>.journal`` next to it and
# syncs that file: that is the commit. Only then does it write the ranges in
# place. Whoever opens the checkpoint next (a save or a load) and finds a
# complete journal for it writes the ranges again (the same bytes, so doing it
# twice is harmless), syncs the checkpoint and removes the journal; an
# incomplete journal was never committed, the checkpoint was not touched, and
# the journal is removed. So the checkpoint reads as the old or the new state,
# never a mix, and loads never layer a journal on top of the file.
#
# A journal is untrusted input (a file next to the checkpoint). A complete
# journal must name the size the checkpoint has now, and its ranges must lie
# inside it: ``replay`` refuses (:class:`~namedschema.FormatError`, nothing
# written, the journal kept) a journal that says otherwise, and never truncates
# the checkpoint. The one exception: a save that relays blocks past the end
# grows the file after its commit, so a kill in between leaves the file short of
# its journal's size; ``replay`` grows it only when the journal writes a
# consistent file of that size (its header describes exactly that size, its
# ranges write every block byte past the old end; ``growth_problem``), checked
# before anything is written.
#
# Journal file::
#
#     8 bytes   b"NSJRNL01"
#     8 bytes   little-endian length L of the index
#     L bytes   JSON index {"base", "new", "file_size", "ranges": [[offset, length, crc32]]}
#     4 bytes   CRC-32 of the index
#     data      the bytes of every range, in index order
#     8 bytes   b"NSJEND01", written last: the journal is complete
#
# The journal is named after the real file (symbolic links resolved), so a
# save through ``latest.nsb -> run3.nsb`` and a load of ``run3.nsb`` find the
# same journal. Anything at the journal's path that is not a regular file (a
# directory, a link, a FIFO) is never read, written through or removed: saves
# then write a new file instead (no journal needed), loads ignore it.
#
# journal_path   where the journal of a checkpoint lives
# Unusable       something other than a journal occupies the journal's path
# Journal        a complete journal read back
# write          write and sync a journal (the commit point)
# read           read a journal; None if absent or not complete
# replay         write a journal's ranges into the checkpoint and sync it
#                  (refused, FormatError, unless they fit the file as it is or
#                  grow it into a consistent file)
# growth_problem why a journal would not grow the file into a consistent one

_MAGIC = b"NSJRNL01"
_END = b"NSJEND01"
_MAX_INDEX = 64 * 2**20
_MAX_FILE = 2**50          # (a checkpoint's size in a journal; replay checks the real one)
_CHUNK = 16 * 2**20
_IOV = min(getattr(os, "sysconf", lambda _n: 1024)("SC_IOV_MAX"), 1024)


class Unusable(OSError):
    """The journal's path holds something that is not a regular file."""


@dataclass(frozen=True)
class Journal:
    """A complete journal: take the checkpoint from ``base`` to ``new``."""

    path: str
    base: str
    new: str
    file_size: int
    ranges: tuple[tuple[int, int, int], ...]   # (file offset, length, crc32)
    data_start: int                            # where the first range's bytes start


def write(path: str, base: str, new: str, file_size: int,
          pieces: Sequence[tuple[int, Any, int]]) -> int:
    """Write the journal for ``pieces`` = ``(file offset, buffer, crc32)`` and sync it.

    Returns the journal's size. When this returns, the new state is committed.
    """
    index = json.dumps({"base": base, "new": new, "file_size": file_size,
                        "ranges": [[off, memoryview(buf).nbytes, crc]
                                   for off, buf, crc in pieces]},
                       separators=(",", ":")).encode()
    if is_file(path) is False:
        raise Unusable(f"{path!r} is in the way of the journal (not a regular file)")
    if is_file(path):
        os.unlink(path)  # a stale or incomplete journal: never write through what is there
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o666)
    committed = False
    try:
        write_all(fd, _MAGIC + struct.pack("<Q", len(index)) + index
                  + struct.pack("<I", zlib.crc32(index)))
        views = [memoryview(buf).cast("B") for _off, buf, _crc in pieces]
        for start in range(0, len(views), _IOV):  # few system calls for many ranges
            batch = views[start:start + _IOV]
            done, total = os.writev(fd, batch), sum(v.nbytes for v in batch)
            if done < total:  # a short write: finish it piece by piece
                for v in batch:
                    if done >= v.nbytes:
                        done -= v.nbytes
                        continue
                    write_all(fd, v[done:])
                    done = 0
        write_all(fd, _END)
        size = os.lseek(fd, 0, os.SEEK_CUR)
        os.fsync(fd)
        fsync_dir(os.path.dirname(path))
        committed = True
    finally:
        os.close(fd)
        if not committed:  # not committed (disk full, say): leave nothing behind
            try:
                os.unlink(path)
            except OSError:
                pass
    return size


def read(path: str) -> Journal | None:
    """The complete journal at ``path``, or None if there is none or it is incomplete.

    A journal is untrusted input: every length is bounded by the journal's
    size and every range by the checkpoint size it names (which ``replay``
    checks against the file), and each range's checksum is checked, before
    anything is written from it. A journal cut short, or whose data does not
    match its checksums (a crash before its sync), was never committed: None.

    Raises:
        FormatError: a journal that is whole (its index's checksum holds and it
            ends with the end marker) but says something no save writes
            (fields of the wrong type, negative or overlapping-the-end ranges,
            a size that is not its ranges' sum): refused, never applied nor
            removed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None  # absent, a link, or unreadable: not a journal to apply
    with open(fd, "rb", buffering=0) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        size = os.fstat(f.fileno()).st_size
        head = f.read(16)
        if len(head) != 16 or head[:8] != _MAGIC:
            return None
        (length,) = struct.unpack("<Q", head[8:])
        if length > min(_MAX_INDEX, size - 28):
            return None
        raw = f.read(length + 4)
        if len(raw) != length + 4 or struct.unpack("<I", raw[length:])[0] != zlib.crc32(
                raw[:length]):
            return None
        f.seek(size - len(_END))
        if f.read(len(_END)) != _END:
            return None
        data_start = 16 + length + 4
        base, new, file_size, ranges = _index(raw[:length], path, size - data_start - len(_END))
        f.seek(data_start)
        for _o, n, crc in ranges:
            value, left = 0, n
            while left:
                chunk = f.read(min(left, _CHUNK))
                if not chunk:
                    return None
                value = zlib.crc32(chunk, value)
                left -= len(chunk)
            if value != crc:
                return None
    return Journal(path, base, new, file_size, ranges, data_start)


def _index(raw: bytes, path: str, data_bytes: int
           ) -> tuple[str, str, int, tuple[tuple[int, int, int], ...]]:
    """The fields of a whole journal's index; FormatError if they are not what a save writes."""
    def refuse(what: str) -> FormatError:
        return FormatError(f"the incremental-save journal {path!r} is whole but malformed "
                           f"({what}); it was neither applied nor removed: the checkpoint "
                           "next to it is as it was. Remove the journal to use the file as "
                           "it is")
    try:
        index = json.loads(raw)
        base, new, file_size, listed = (index["base"], index["new"], index["file_size"],
                                        index["ranges"])
    except (ValueError, KeyError, TypeError) as exc:
        raise refuse(f"its index is not a journal index: {exc}") from None
    if not isinstance(base, str) or not isinstance(new, str) or not isinstance(listed, list):
        raise refuse("base, new or ranges of the wrong type")
    if type(file_size) is not int or not 0 <= file_size <= _MAX_FILE:
        raise refuse(f"file_size {file_size!r} is not a size")
    ranges = []
    for item in listed:
        if not (isinstance(item, list) and len(item) == 3
                and all(type(v) is int for v in item)):
            raise refuse(f"a range {item!r} is not [offset, length, crc32]")
        o, n, c = item
        if o < 0 or n < 0 or o + n > file_size or not 0 <= c < 2**32:
            raise refuse(f"the range {item!r} does not lie in a file of {file_size} bytes")
        ranges.append((o, n, c))
    if sum(n for _o, n, _c in ranges) != data_bytes:
        raise refuse(f"its ranges hold {sum(n for _o, n, _c in ranges)} bytes, its data "
                     f"{data_bytes}")
    return base, new, file_size, tuple(ranges)


def replay(journal: Journal, fd: int) -> None:
    """Write every range of ``journal`` into the checkpoint open as ``fd``, then sync it.

    Raises:
        FormatError: the journal names another size than the checkpoint's (the
            journal does not describe this file, or the file was cut or extended
            since); nothing is written and the journal is kept. The one resize: a
            file short of the journal's size (a relaying save killed between its
            commit and growing the file) is grown to it when the journal writes a
            consistent file of that size (see :func:`growth_problem`); otherwise
            refused like any other size.
    """
    size = os.fstat(fd).st_size
    problem = ""
    if size < journal.file_size:
        problem = growth_problem(journal, fd, size) or ""
        if not problem:
            # A save that relaid blocks grows the file once its journal is committed; a
            # kill before it grew leaves it short: grown as the save would have (the new
            # bytes read as zeros until the ranges write them).
            os.ftruncate(fd, journal.file_size)
            size = journal.file_size
    if journal.file_size != size:
        raise FormatError(
            f"the incremental-save journal {journal.path!r} is for a checkpoint of "
            f"{journal.file_size} bytes, but the checkpoint next to it has {size}"
            + (f", and it does not write a consistent file of that size ({problem})"
               if problem else "")
            + ": it does not describe this file (or the file was cut or extended since); "
            "nothing was written and the journal was kept. Remove the journal to use the "
            "file as it is, or restore the file the journal belongs to")
    with open(journal.path, "rb", buffering=0) as f:
        f.seek(journal.data_start)
        for offset, n, _crc in journal.ranges:
            left = n
            while left:
                chunk = f.read(min(left, _CHUNK))
                if not chunk:
                    raise OSError(f"{journal.path!r} shrank while it was replayed")
                done = 0
                while done < len(chunk):
                    done += os.pwrite(fd, chunk[done:], offset + n - left + done)
                left -= len(chunk)
    os.fsync(fd)


def growth_problem(journal: Journal, fd: int, size: int) -> str | None:
    """Why growing the ``size``-byte checkpoint ``fd`` to ``journal``'s size would not
    give a consistent file, or None if it would.

    Checked before anything is written, on what the file would hold (the journal's
    ranges over the file, zeros past its end): the journal writes the header, that
    header is the journal's new checkpoint and describes exactly ``journal.file_size``
    bytes, and the journal's ranges write every byte of every block that lies past
    the file's end (what else the header declares there is padding, zeros as the
    growth leaves it). And the growth is bounded by what is there (twice the file
    plus the bytes the journal carries): a small forged journal cannot make a large
    file, nor a large read.
    """
    carried = sum(n for _o, n, _c in journal.ranges)
    if journal.file_size > 2 * size + carried:
        return (f"more than twice the file plus the {carried} bytes the journal carries")
    if not any(o == 0 and n >= 8 for o, n, _c in journal.ranges):
        return "it does not write the file's header"
    with open(journal.path, "rb", buffering=0) as f:
        def result(lo: int, hi: int) -> bytes:
            """Bytes ``lo:hi`` of the file once grown and replayed."""
            out = bytearray(hi - lo)
            if lo < size:
                have = os.pread(fd, min(hi, size) - lo, lo)
                out[:len(have)] = have
            at = journal.data_start
            for o, n, _c in journal.ranges:
                a, b = max(o, lo), min(o + n, hi)
                if a < b:
                    f.seek(at + a - o)
                    piece = f.read(b - a)
                    out[a - lo:a - lo + len(piece)] = piece
                at += n
            return bytes(out)
        (length,) = struct.unpack("<Q", result(0, 8))
        if length > min(MAX_HEADER, journal.file_size - 8):
            return f"its header's length {length} does not fit the file"
        try:
            header = read_header(io.BytesIO(result(0, 8 + length)), journal.path,
                                 journal.file_size)
        except FormatError as exc:
            return f"the header it writes is refused: {exc}"
    if header.description.checkpoint_id != journal.new:
        return "the header it writes is not its new checkpoint's"
    covered = sorted((o, o + n) for o, n, _c in journal.ranges if n)
    for b in header.description.blocks:
        at = header.data_start + b.start
        # a compressed block's bytes are its chunks (what else its tensor holds is free)
        spans = [(at, at + b.nbytes)] if b.table is None else [
            (at + s, at + s + n) for s, (n, _crc) in zip(b.table.starts(), b.table.chunks,
                                                         strict=True)]
        for lo, hi in spans:
            lo = max(lo, size)
            for a, c in covered:
                if a <= lo < c:
                    lo = c
            if lo < hi:
                return (f"its ranges do not write bytes {lo}..{hi} of block {b.tensor!r}, "
                        "past the file's end")
    return None


def reserve(fd: int, pieces: Any, end: int) -> None:
    """Give the file blocks under every piece a journal will write, up to ``end``.

    A first save leaves all-zero stretches as holes (a sparse file); writing into a
    hole needs free space. Allocating before the journal is committed makes a full
    disk fail the save with the old checkpoint intact, and lets a replay of a
    committed journal finish on a full disk.
    """
    holes = _holes(fd, end)
    if not holes:
        return
    starts = [lo for lo, _hi in holes]
    for offset, data, _crc in pieces:
        stop = min(offset + memoryview(data).nbytes, end)
        k = bisect.bisect_right(starts, offset) - 1   # the last hole starting at or before
        if stop > offset and (k >= 0 and holes[k][1] > offset
                              or k + 1 < len(holes) and starts[k + 1] < stop):
            os.posix_fallocate(fd, offset, stop - offset)


#: Above this many holes, ``reserve`` allocates under every piece instead of listing them.
_MAX_HOLES = 4096


def _holes(fd: int, end: int) -> list[tuple[int, int]]:
    """The holes of the file in ``[0, end)``, sorted; ``[(0, end)]`` when not known.

    One ``lseek(SEEK_HOLE)`` when the file has none (the usual case after the
    first incremental save: a per-piece ``posix_fallocate`` cost 1.5 us a range,
    4 ms for a random 1% of 1 GiB). A file system that cannot tell holes from
    data (it reports none) is trusted only when the file's blocks cover its size.
    """
    everything = [(0, end)]
    seek_hole, seek_data = getattr(os, "SEEK_HOLE", None), getattr(os, "SEEK_DATA", None)
    if seek_hole is None or seek_data is None or end <= 0:
        return everything if end > 0 else []
    try:
        first = os.lseek(fd, 0, seek_hole)
        if first >= end:
            st = os.fstat(fd)
            return [] if st.st_blocks * 512 >= st.st_size else everything
        holes: list[tuple[int, int]] = []
        at = first
        while at < end:
            if len(holes) >= _MAX_HOLES:
                return everything
            try:
                data = os.lseek(fd, at, seek_data)
            except OSError as exc:   # ENXIO: a hole up to the end of the file
                if exc.errno != errno.ENXIO:
                    raise
                data = end
            holes.append((at, min(data, end)))
            if data >= end:
                break
            at = os.lseek(fd, data, seek_hole)
        return holes
    except OSError:
        return everything
