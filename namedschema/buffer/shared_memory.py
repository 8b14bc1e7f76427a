"""Anonymous shared memory for numpy arrays that multiprocessing can hand on.

Each allocation is a ``memfd`` (an anonymous in-memory file with no name in
``/dev/shm``) mapped ``MAP_SHARED`` into this process. The kernel frees it when
the last file descriptor and the last mapping are gone, so nothing outlives
the processes using it, whatever way they exit. Arrays are plain
``np.ndarray`` views of the mapping (no subclass, so indexing stays fast).

Sharing across processes works through ``multiprocessing``'s own pickler
only: a reducer for ``np.ndarray`` registered with ``ForkingPickler`` sends an
array whose memory lies in a live segment as (segment file descriptor, offset,
shape, strides, dtype). The descriptor travels with
``multiprocessing.reduction.DupFd``, which passes it to a child being started
with ``spawn`` / ``forkserver`` and, at run time (queues, pipes), through the
resource-sharer socket. ``fork`` children simply inherit the mapping. Every
other array, and every array pickled by plain ``pickle``, is pickled as usual
(data included), so checkpoints never hold a handle.

allocate        a zero-filled shared array of a shape and dtype
allocate_many   several shared arrays carved from one segment
is_shared       whether an array's memory lies in a live shared segment
segment_count   how many segments this process has mapped (for tests)
"""

from __future__ import annotations

import bisect
import mmap
import os
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, SupportsInt

import numpy as np

from .. import _process
from .._core.tree import extent

if TYPE_CHECKING:
    import numpy.typing as npt

    # A shape: one dimension, or a sequence of them.
    _ShapeLike = int | np.integer[Any] | Iterable[SupportsInt]

__all__ = ["allocate", "allocate_many", "is_shared", "segment_count"]

# Alignment of each array inside a multi-array segment: a cache line, which
# also satisfies every numpy dtype's alignment.
_ALIGN = 64

_lock = threading.Lock()
# Sorted start addresses and, at the same index, (end, weakref to segment).
_starts: list[int] = []
_entries: list[tuple[int, weakref.ref[_Segment]]] = []
# (st_dev, st_ino) of the memfd -> segment, so that a process receiving many
# arrays of one segment maps it once and keeps their aliasing.
_by_inode: weakref.WeakValueDictionary[tuple[int, int], _Segment] = (
    weakref.WeakValueDictionary())
_reducer_installed = False


def _reset_lock_in_child() -> None:
    # Another thread may have held the lock when this process forked.
    global _lock
    _lock = threading.Lock()


_process.on_fork_child("buffer.shared_memory", _reset_lock_in_child)


class _Segment(mmap.mmap):
    """A mapped memfd that remembers its descriptor (closed when unmapped)."""

    fd: int
    length: int  # bytes mapped (mmap.size() would ask the kernel for the file size)
    address: int
    inode: tuple[Any, ...]

    def __reduce__(self) -> NoReturn:
        # Only multiprocessing may send a segment (see _install_reducer);
        # plain pickle has no way to carry a file descriptor.
        raise TypeError("a shared-memory segment can only be sent to another "
                        "process by multiprocessing (Process arguments, Queue, "
                        "Pipe); plain pickle stores the arrays' data instead")


_forgotten: list[tuple[int, weakref.ref[_Segment]]] = []


def _purge() -> None:
    """Drop the entries of collected segments (called with _lock held)."""
    while _forgotten:
        start, ref = _forgotten.pop()
        i = bisect.bisect_left(_starts, start)
        if i < len(_starts) and _starts[i] == start and _entries[i][1] is ref:
            del _starts[i], _entries[i]


def _register(seg: _Segment) -> None:
    end = seg.address + seg.length

    def forget(_ref: weakref.ref[_Segment], start: int = seg.address) -> None:
        # A weakref callback may run inside any allocation, also while this thread
        # holds _lock (registering another segment): taking the lock here deadlocked.
        # It only queues the removal (list.append is atomic); _purge applies it.
        _forgotten.append((start, _ref))

    ref = weakref.ref(seg, forget)
    with _lock:
        _purge()
        i = bisect.bisect_left(_starts, seg.address)
        _starts.insert(i, seg.address)
        _entries.insert(i, (end, ref))
        _by_inode[seg.inode] = seg


def _map(fd: int, size: int) -> _Segment:
    """Map ``fd`` (taking ownership of it) and register the segment."""
    try:
        seg = _Segment(fd, size, flags=mmap.MAP_SHARED,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.close(fd)
        raise
    seg.fd, seg.length = fd, size
    st = os.fstat(fd)
    seg.inode = (st.st_dev, st.st_ino)
    # The address of the mapping, through a one-byte view released at once.
    probe = np.frombuffer(seg, dtype=np.uint8, count=1)
    seg.address = probe.__array_interface__["data"][0]
    del probe
    # At interpreter exit the kernel closes it; closing it earlier from the
    # atexit hook could race with queue feeder threads still pickling.
    weakref.finalize(seg, os.close, fd).atexit = False
    _install_reducer()
    _register(seg)
    return seg


def _new_segment(nbytes: int) -> _Segment:
    size = max(int(nbytes), 1)  # mmap refuses empty mappings
    fd = os.memfd_create(f"namedschema-{os.getpid()}", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return _map(fd, size)


def _normalize(shape: _ShapeLike, dtype: npt.DTypeLike
               ) -> tuple[tuple[int, ...], np.dtype[Any]]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError(f"dtype {dtype} holds Python objects, which cannot live "
                        "in shared memory")
    return shape, dtype


def allocate(shape: _ShapeLike, dtype: npt.DTypeLike) -> np.ndarray:
    """A zero-filled array in a new shared-memory segment of its own.

    Args:
        shape: int or tuple of ints.
        dtype: anything ``np.dtype`` accepts, except object dtypes.

    Returns:
        A plain, writable, C-contiguous ``np.ndarray``.

    Raises:
        ValueError: a dimension is negative.
        TypeError: the dtype holds Python objects.
    """
    return allocate_many([(shape, dtype)])[0]


def allocate_many(specs: Iterable[tuple[_ShapeLike, npt.DTypeLike]]) -> list[np.ndarray]:
    """Zero-filled arrays for ``(shape, dtype)`` pairs, all in one segment.

    One segment costs one file descriptor and one mapping however many arrays
    it holds, so a buffer with many fields allocates this way.

    Args:
        specs: iterable of ``(shape, dtype)`` pairs.

    Returns:
        A list of plain ``np.ndarray`` in the order of ``specs``.

    Raises:
        ValueError: a dimension is negative.
        TypeError: a dtype holds Python objects.
    """
    normalized = [_normalize(shape, dtype) for shape, dtype in specs]
    if not normalized:
        return []
    offsets: list[int] = []
    total = 0
    for shape, dtype in normalized:
        total = -(-total // _ALIGN) * _ALIGN
        offsets.append(total)
        total += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    seg = _new_segment(total)
    return [np.ndarray(shape, dtype=dtype, buffer=seg, offset=offset)
            for (shape, dtype), offset in zip(normalized, offsets, strict=True)]


def _segment_of(a: np.ndarray) -> tuple[_Segment, int] | None:
    """(segment, offset of a's data pointer) if ``a`` lies in a live segment."""
    if not _starts:
        return None
    data = a.__array_interface__["data"][0]
    low, high = extent(a) or (data, data)  # an empty array: just its start
    with _lock:
        _purge()
        i = bisect.bisect_right(_starts, low) - 1
        if i < 0:
            return None
        end, ref = _entries[i]
        start = _starts[i]
    seg = ref()
    if seg is None or high > end:
        return None
    return seg, data - start


def is_shared(a: object) -> bool:
    """True if ``a`` is an ndarray whose memory lies in a live shared segment."""
    return isinstance(a, np.ndarray) and _segment_of(a) is not None


def segment_count() -> int:
    """Number of shared segments currently mapped by this process."""
    with _lock:
        _purge()
        return sum(ref() is not None for _end, ref in _entries)


# --- multiprocessing ------------------------------------------------------

class _Detachable(Protocol):
    """What ``DupFd`` gives the receiving process: ``detach()`` returns the descriptor."""

    def detach(self) -> int: ...


def _reduce_segment(seg: _Segment
                    ) -> tuple[Callable[[_Detachable, int], _Segment], tuple[_Detachable, int]]:
    from multiprocessing.reduction import DupFd

    return _rebuild_segment, (DupFd(seg.fd), seg.length)


def _rebuild_segment(dupfd: _Detachable, size: int) -> _Segment:
    fd = dupfd.detach()
    st = os.fstat(fd)
    with _lock:
        _purge()
        seg = _by_inode.get((st.st_dev, st.st_ino))
    if seg is not None:  # already mapped here (e.g. sent back to its owner)
        os.close(fd)
        return seg
    return _map(fd, size)


def _reduce_ndarray(a: np.ndarray) -> str | tuple[Any, ...]:
    found = _segment_of(a)
    if found is None:
        # Not ours: exactly what ForkingPickler would have done without us
        # (it pickles with the default protocol).
        import pickle

        return a.__reduce_ex__(pickle.DEFAULT_PROTOCOL)
    seg, offset = found
    return _rebuild_ndarray, (seg, offset, a.shape, a.strides, a.dtype)


def _rebuild_ndarray(seg: _Segment, offset: int, shape: tuple[int, ...],
                     strides: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    return np.ndarray(shape, dtype=dtype, buffer=seg, offset=offset,
                      strides=strides)


def _install_reducer() -> None:
    """Teach multiprocessing's pickler to send shared arrays by handle."""
    global _reducer_installed
    if _reducer_installed:
        return
    from multiprocessing.reduction import ForkingPickler

    # Registered for the exact types only: ndarray subclasses (np.memmap,
    # np.matrix) keep their own pickling.
    ForkingPickler.register(_Segment, _reduce_segment)
    ForkingPickler.register(np.ndarray, _reduce_ndarray)
    _reducer_installed = True
