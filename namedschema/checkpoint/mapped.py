"""Copying arrays out of a read-only map of a checkpoint in bounded memory.

The pages of a mapped file that a process has read count in its resident set
for as long as they stay mapped. Copying a mapped array of B bytes into memory
of the process (a resume writing a loaded checkpoint into a freshly built
replay buffer) would therefore peak at 2B resident: B of new memory plus B of
mapped file. :func:`copy_from_map` never holds more than about one ``PIECE``
of the map:

* where source and target are both contiguous and the loader said which file
  the map shows (:func:`remember_file`), it reads the source's bytes from that
  file straight into the target (``preadv``, ``PIECE`` at a time): the map is
  not touched, and the reads go at the speed of a plain read of the file;
* otherwise it copies ``PIECE`` pieces out of the map and drops the map's
  pages behind each piece (``MADV_DONTNEED``; the data stays in the file and
  in the page cache, and a later read of the map faults it back in), asking
  the kernel to read the next piece ahead (``MADV_WILLNEED``).

A shared read-only map shows exactly the file's bytes, so both ways copy the
same bytes as ``np.copyto``. Only read-only maps (``load(mmap_mode="r")``) are
handled so: copy-on-write maps may hold writes that the file does not, and
arrays that view no map are copied by ``np.copyto``. A large compressed array of a
file a restore loaded (``compression.Deferred``) is decompressed straight into the
target, chunk by chunk.

copy_from_map   ``np.copyto(target, source)`` holding at most a piece of the map
read_only_map   the read-only ``mmap`` a numpy array views, and its start address
remember_file   the file a map shows (the loader calls it), for direct reads
"""

from __future__ import annotations

import mmap
import os
import weakref
from typing import Any

import numpy as np

from .._core.tree import byte_span

# Bytes copied between two releases of the mapped pages: the most mapped file a
# copy holds resident at once.
PIECE = 4 * 2**20

__all__ = ["copy_from_map", "read_only_map", "remember_file", "PIECE"]

_CAN_RELEASE = hasattr(mmap.mmap, "madvise") and hasattr(mmap, "MADV_DONTNEED")
_CAN_PREAD = hasattr(os, "preadv")

# id(map) -> (a weak reference to the map, a descriptor of the file it shows
# from offset 0); the descriptor is closed when the map goes.
_FILES: dict[int, tuple[weakref.ref[Any], int]] = {}


def remember_file(mapped: mmap.mmap, fd: int) -> None:
    """Note that ``mapped`` maps the file open as ``fd`` from its offset 0.

    A duplicate of ``fd`` is kept for as long as the map lives (it names the
    same file even if the path is replaced by a new save meanwhile).
    """
    if not _CAN_PREAD:
        return
    key, dup = id(mapped), os.dup(fd)

    def forget(_ref: weakref.ref[Any], key: int = key, dup: int = dup) -> None:
        _FILES.pop(key, None)
        os.close(dup)
    _FILES[key] = (weakref.ref(mapped, forget), dup)


def _file_of(mapped: mmap.mmap) -> int | None:
    entry = _FILES.get(id(mapped))
    if entry is None or entry[0]() is not mapped:
        return None
    return entry[1]


def read_only_map(array: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """``(the map, its start address)`` if ``array`` views a read-only ``mmap``, else None."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    if not isinstance(base, memoryview) or not base.readonly:
        return None
    mapped = base.obj
    if not isinstance(mapped, mmap.mmap) or mapped.closed or len(mapped) == 0:
        return None
    start = np.frombuffer(mapped, np.uint8, 1).__array_interface__["data"][0]
    return mapped, start


def copy_from_map(target: np.ndarray, source: Any) -> None:
    """``np.copyto(target, source, casting="no")``, in bounded resident memory.

    When ``source`` views a read-only map (of a checkpoint loaded with
    ``mmap_mode="r"``), at most about ``PIECE`` bytes of the map are resident
    at any time (see the module's docstring). Shapes and dtypes must already
    match (callers check them, naming what differs).

    A ``source`` that is a compressed array a restore left compressed
    (``compression.Deferred``) is decompressed straight into ``target``.
    """
    if not isinstance(source, np.ndarray):
        copy_into = getattr(type(source), "copy_into", None)
        if copy_into is not None:
            copy_into(source, target)
            return
    found = read_only_map(source) if source.nbytes > PIECE else None
    if found is None:
        np.copyto(target, source, casting="no")
        return
    mapped, start = found
    fd = _file_of(mapped)
    if fd is not None and target.dtype == source.dtype and target.shape == source.shape \
            and target.flags.c_contiguous and source.flags.c_contiguous:
        offset = source.__array_interface__["data"][0] - start
        _read_into(fd, target.reshape(-1).view(np.uint8), offset)
    elif _CAN_RELEASE:
        _copy_pieces(target, source, mapped, start)
    else:
        np.copyto(target, source, casting="no")


def _read_into(fd: int, target: np.ndarray, offset: int) -> None:
    """Fill the bytes ``target`` from the file at ``offset``, ``PIECE`` at a time."""
    view = target.data
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:done + PIECE]], offset + done)
        if got <= 0:
            raise OSError(f"the mapped checkpoint ended at byte {offset + done} while "
                          "copying out of it (was the file truncated?)")
        done += got


def _copy_pieces(target: np.ndarray, source: np.ndarray, mapped: mmap.mmap,
                 start: int) -> None:
    if source.ndim == 0 or source.nbytes <= PIECE:
        np.copyto(target, source, casting="no")
        _advise(mapped, start, source, mmap.MADV_DONTNEED)
        return
    row = source.nbytes // source.shape[0]
    if row > PIECE:
        for i in range(source.shape[0]):
            _copy_pieces(target[i], source[i], mapped, start)
        return
    step = max(1, PIECE // row)
    n = source.shape[0]
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        if hi < n and hasattr(mmap, "MADV_WILLNEED"):
            _advise(mapped, start, source[hi:min(n, hi + step)], mmap.MADV_WILLNEED)
        piece = source[lo:hi]
        np.copyto(target[lo:hi], piece, casting="no")
        _advise(mapped, start, piece, mmap.MADV_DONTNEED)


def _advise(mapped: mmap.mmap, start: int, view: np.ndarray, advice: int) -> None:
    """``madvise`` the whole pages of ``mapped`` holding ``view``'s bytes."""
    if view.size == 0:
        return
    address = view.__array_interface__["data"][0]
    lo, hi = byte_span(address - start, view.shape, view.strides)
    hi += view.itemsize
    page = mmap.PAGESIZE
    lo -= lo % page
    hi = min(len(mapped), hi + -hi % page)
    mapped.madvise(advice, lo, hi - lo)
