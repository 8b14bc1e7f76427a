"""Writing a checkpoint: atomic files, saves in flight, the one writer of new files.

The one full-file writer writes a temporary file and renames it into place; every
floor writes new files through it (``_save``'s plain saves, the incremental and
background saves). The per-path lock and the record of saves in flight are here too:
plain saves and loads wait on them without importing the incremental or background
machinery. ``save`` itself is in ``_save``, above this module.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import struct
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .. import _process
from ..errors import SaveError
from . import _storage
from ._graph import EncodedGraph, features_of
from ._header import (
    ALIGN,
    COMPRESSED_FEATURE,
    MAX_HEADER,
    PLACED_FEATURE,
    RAW_CRCS_FEATURE,
    BlockEntry,
    ChunkTable,
    Description,
    Header,
    PickleEntry,
    SaveRecord,
    TensorEntry,
)
from ._storage import PAGE, Progress, Source, write_all, write_blocks

if TYPE_CHECKING:
    from ._compression import Compression

__all__ = ["serialized", "register", "settle", "written", "handles",
           "Handle", "unwritable", "free_bytes", "state_bytes", "LayoutPolicy", "PLAIN",
           "PAGE_ALIGNED", "Written", "describe", "write", "HEADER_HEADROOM", "ROOM_CHUNKS",
           "chunked_blocks", "placed_capacity", "placed_tensors", "placed_description"]


# ---------------------------------------- atomic
#
# Atomic replacement of a file, and removal of temporary files that dead savers left.
#
# AtomicFile      write a temporary file next to the target, sync it, rename it over
#                 the target and sync the directory; on any error, remove it
# check_target    refuse a target that is not a regular file (before anything is written)
# file_kind       "a directory", "a FIFO", ... for a file mode, in messages
# temp_prefix     the start of every temporary file name for one target
# journal_path    where the redo journal of a checkpoint lives (``journal``)
# is_file         what is at a path: a regular file, nothing, something else
# host_tag        eight hex digits naming this host and pid namespace
#
# A temporary file is named ``.<name>.tmp-<host>-<pid>-<random>``. Before
# writing, ``AtomicFile`` removes the temporary files of the same target whose
# ``<host>`` is this one's and whose ``<pid>`` is no longer writing: no process
# has that pid, or it is a zombie, or it started more than STALE_SLACK seconds
# after the file was last modified (the pid was reused). Whatever cannot be
# decided is kept.

# A live process whose start time is this much after a temp file's mtime did
# not write it; the slack covers the 1 s resolution of the boot time and
# small clock adjustments, and errs towards keeping files.
STALE_SLACK = 10.0
TEMP_TAIL = re.compile(r"([0-9]{1,10})-[0-9a-f]{8}", re.ASCII)


class AtomicFile:
    """``with AtomicFile(path) as fd:`` -- write ``fd``; on success it replaces ``path``.

    The file is synced before the rename and the directory after it, so
    ``path`` always holds either its old content or the complete new one. On
    any exception (KeyboardInterrupt included) the temporary file is removed
    and ``path`` is left untouched.

    The new file keeps the permission bits of the file it replaces (and its
    owner and group where this process may set them); a new file gets
    ``0o666`` less the umask, as ``open`` gives. When ``path`` is a symbolic
    link (to a link, or dangling), the file it finally points to is
    replaced, atomically in that file's directory, and the link stays a link:
    ``latest.nsb -> run3.nsb`` keeps pointing at the new ``run3.nsb``.

    Only a regular file (or nothing) at the target is ever replaced: a
    directory, FIFO, socket or device node there raises
    :class:`~namedschema.errors.SaveError` before the temporary
    file is made, and again (the temporary file removed) if one appeared
    there while it was written. Errors name ``path`` as given, not the
    temporary file.
    """

    def __init__(self, path: str) -> None:
        self.user_path = path
        self.path = final_target(path)
        self.directory = os.path.dirname(os.path.abspath(path))
        self.prefix = temp_prefix(os.path.basename(path), host_tag())
        self.tmp = ""
        self.fd = -1

    def __enter__(self) -> int:
        check_target(self.path, self.user_path)
        remove_stale_temps(self.directory, self.prefix)
        self.tmp = os.path.join(self.directory,
                                f"{self.prefix}{os.getpid()}-{secrets.token_hex(4)}")
        try:
            self.fd = os.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL
                              | getattr(os, "O_CLOEXEC", 0), 0o666)
        except OSError as exc:
            self._name_user_path(exc)
            raise
        try:
            _copy_mode(self.path, self.fd)
        except BaseException as exc:
            os.close(self.fd)
            _unlink_quietly(self.tmp)
            self._name_user_path(exc)
            raise
        return self.fd

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            try:
                if kind is None:
                    os.fsync(self.fd)
            finally:
                os.close(self.fd)
            if kind is None:
                check_target(self.path, self.user_path)  # nothing appeared there meanwhile
                os.replace(self.tmp, self.path)
        except BaseException as error:
            _unlink_quietly(self.tmp)
            self._name_user_path(error)
            raise
        if kind is not None:
            _unlink_quietly(self.tmp)
            if exc is not None:
                self._name_user_path(exc)
            return
        fsync_dir(self.directory)

    def _name_user_path(self, exc: BaseException) -> None:
        """Make an OSError about the temporary file name the user's path instead."""
        if not isinstance(exc, OSError) or isinstance(exc, SaveError):
            return
        if exc.filename in (None, self.tmp) or exc.filename2 == self.tmp:
            if exc.errno is not None and exc.strerror is not None:  # else str() has no name
                exc.filename = self.user_path
                if exc.filename2 is not None:
                    del exc.filename2   # (None would print as "... -> None")
            exc.add_note(f"while writing {self.tmp!r}, the temporary file that replaces "
                         f"{self.user_path!r} once it is complete")


def final_target(path: str) -> str:
    """The file a save of ``path`` replaces: ``path``, or what its symbolic links end at."""
    if os.path.islink(path):
        try:  # the file the link finally points to; a loop raises OSError
            return os.path.realpath(path, strict=True)
        except FileNotFoundError:  # dangling: create what it points to
            return os.path.realpath(path)
    return path


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, for messages: "a directory", "a FIFO", ..."""
    return ("a regular file" if stat.S_ISREG(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "not a regular file")


def check_target(path: str, shown: str | None = None) -> None:
    """Refuse to replace ``path`` unless it is absent or a regular file (symlinks followed).

    A save must never turn a directory, FIFO, socket or device node (say
    ``/dev/null``, run as root) into a regular file; ``shown`` is the path as
    the user gave it, for the message.
    """
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        _check_folder(path, path if shown is None else shown)
        return  # nothing there yet: the save makes it
    except OSError:
        return  # cannot tell (a link loop, no permission): the write itself reports it
    if stat.S_ISREG(mode):
        return
    shown = path if shown is None else shown
    raise SaveError(
        errno.EISDIR if stat.S_ISDIR(mode) else errno.EEXIST,
        f"refusing to save to {shown!r}: it is {file_kind(mode)}, not a regular file; "
        "save only ever replaces regular files (give the path of a file"
        + (" inside that directory)" if stat.S_ISDIR(mode) else ")"), shown)


def _check_folder(path: str, shown: str) -> None:
    """Refuse a new file whose folder is missing (or not a folder), naming that folder."""
    folder = os.path.dirname(os.path.abspath(path))
    named = os.path.dirname(shown) if path == shown and os.path.dirname(shown) else folder
    try:
        mode = os.stat(folder).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"cannot save there: its folder {named!r} "
                                "does not exist (create it first)", shown) from None
    except OSError:
        return  # cannot tell (no permission to look): the write itself reports it
    if not stat.S_ISDIR(mode):
        raise NotADirectoryError(errno.ENOTDIR, f"cannot save there: {named!r} is "
                                 f"{file_kind(mode)}, not a folder", shown) from None


def _copy_mode(target: str, fd: int) -> None:
    """Give the file ``fd`` the permission bits (and, if allowed, owner) of ``target``."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return  # a new file: 0o666 less the umask
    if not stat.S_ISREG(st.st_mode):
        return
    os.fchmod(fd, stat.S_IMODE(st.st_mode))
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid):
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except OSError:
            pass  # not ours to give away: the new file keeps this process's owner


def _unlink_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def fsync_dir(directory: str) -> None:
    """Sync a directory, so that a file created, renamed or removed in it stays so."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dfd)


def temp_prefix(basename: str, tag: str) -> str:
    """``.<basename>.tmp-<tag>-``: the start of every temp file name for one target.

    Very long target names are shortened (with a hash of the full name, so
    the prefix still belongs to exactly one target) to keep the temp name
    within the usual 255-byte limit.
    """
    return f".{_short(basename)}.tmp-{tag}-"


def _short(basename: str) -> str:
    """``basename``, or its first 40 characters, ``~`` and a hash when over 200 bytes."""
    if len(os.fsencode(basename)) > 200:
        digest = hashlib.blake2b(os.fsencode(basename), digest_size=8).hexdigest()
        basename = f"{basename[:40]}~{digest}"
    return basename


def journal_path(path: str) -> str:
    """``.<name>.journal`` next to the real checkpoint file (long names shortened, with a hash)."""
    directory, base = os.path.split(os.path.realpath(path))
    return os.path.join(directory, f".{_short(base)}.journal")


def is_file(path: str) -> bool | None:
    """True: a regular file is at ``path``; None: nothing; False: something else."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


def host_tag() -> str:
    """Eight hex digits naming this host and pid namespace, where pids mean something."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return hashlib.blake2b(f"{socket.gethostname()}\0{namespace}".encode(),
                           digest_size=4).hexdigest()


@functools.cache
def _boot_time() -> int:
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return int(line.split()[1])
    raise OSError("no btime in /proc/stat")


def process_state(pid: int) -> tuple[str, float]:
    """(state letter, start time in seconds since the epoch) of a process, from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        text = f.read()
    # The command name (field 2) is in parentheses and may hold spaces or ')'.
    fields = text[text.rindex(b")") + 2:].split()
    start_ticks = int(fields[19])
    return (fields[0].decode("ascii", "replace"),
            _boot_time() + start_ticks / os.sysconf("SC_CLK_TCK"))


def _writer_may_be_alive(pid: int, mtime: float) -> bool:
    """Whether process ``pid`` may still be writing a file last modified at ``mtime``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    except (OverflowError, ValueError):
        return False  # no process can have that pid
    try:
        state, started = process_state(pid)
    except (OSError, ValueError, IndexError):
        return True  # cannot tell whether the pid was reused: keep the file
    if state in ("Z", "X"):
        return False  # dead, not yet reaped: it will write nothing more
    return started <= mtime + STALE_SLACK


def remove_stale_temps(directory: str, prefix: str) -> None:
    """Remove temp files of this target left by savers of this host that are dead."""
    if os.name != "posix":  # os.kill(pid, 0) only probes on POSIX
        return
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if e.name.startswith(prefix)]
    except OSError:
        return
    for name in names:
        match = TEMP_TAIL.fullmatch(name, len(prefix))
        if match is None or int(match[1]) <= 0:
            continue
        full = os.path.join(directory, name)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and not _writer_may_be_alive(int(match[1]), st.st_mtime):
            _unlink_quietly(full)


# ---------------------------------------- inflight
#
# Saves in flight: what a save or a read of a path waits for before touching the file.
#
# Every save and read of a path goes through here, plain ones included, so the
# plain format needs nothing of the incremental or background machinery:
#
# * **This process's background save of the path** (``background``): a save
#   holds the path's lock (``serialized``) from its start to its snapshot and
#   first waits for the background save before it (``settle``, which raises
#   that save's unreported error); readers wait for it without raising
#   (``written``), so a program reads what it saved.
# * **An incremental save of another process** changing the file in place: it
#   holds an exclusive ``flock``; readers hold a shared one (``reading``).
# * **The journal of an interrupted incremental save** (``.<name>.journal``
#   next to the real file): readers and saves look for it with one ``lstat``
#   (``recover``) and only when one is there load ``incremental``, which
#   finishes or discards it. A process that never saved incrementally and
#   opens files without a journal never imports it.
#
# recover       settle the journal an interrupted incremental save left, if any
# reading       hold off incremental saves of an open file while reading it
# serialized    the per-path lock a save holds until its snapshot exists
# register      record a background save of a path (``background``)
# settle        wait for the background save of a path; raise its unreported error
# written       wait for the background save of a path, raising nothing
# handles       the background saves registered (for the exit hook)
#
# A fork child of this process starts with no background save: the parent's
# handles and locks are dropped in it (saves, loads and exit there never wait
# for the parent's writers).

# --------------------------------------------------------------------------
# This process's saves of a path: one at a time
# --------------------------------------------------------------------------

class Handle(Protocol):
    """What ``register`` keeps of a background save (``_background.BackgroundSave``)."""

    path: str

    def wait(self, timeout: float | None = None) -> Any:
        """Wait for the save to end; raise its error once."""


# (the registries below are guarded by _process.LOCK; each path's save lock is its own)
_path_locks: dict[str, threading.Lock] = {}
_latest: dict[str, tuple[Handle, threading.Event]] = {}


def _key(path: str) -> str:
    return os.path.realpath(path)


@contextlib.contextmanager
def serialized(path: str) -> Iterator[None]:
    """Hold ``path``'s save lock: the previous background save of it has ended (see settle)."""
    key = _key(path)
    with _process.LOCK:
        lock = _path_locks.setdefault(key, threading.Lock())
    with lock:
        settle(path)
        yield


def register(handle: Handle, finished: threading.Event) -> None:
    """Record ``handle`` as the latest background save of its path; ``finished`` is set at its end."""
    with _process.LOCK:
        _latest[_key(handle.path)] = (handle, finished)


def settle(path: str) -> None:
    """Wait for this process's background save of ``path``; raise its error if unreported."""
    with _process.LOCK:
        entry = _latest.get(_key(path))
    if entry is not None:
        entry[0].wait()


def written(path: str) -> None:
    """Wait until this process's background save of ``path`` (if any) has ended.

    ``load``, ``inspect`` and ``verify`` call it, so a program reads what it
    saved, not the file as it was before. A failed save's error is left for
    ``wait()`` or the next save to raise: the file still holds the last
    complete checkpoint, which the reader gets.
    """
    with _process.LOCK:
        entry = _latest.get(_key(path))
    if entry is not None:
        entry[1].wait()


def handles() -> list[Handle]:
    """Every background save registered in this process (the latest of each path)."""
    with _process.LOCK:
        return [handle for handle, _finished in _latest.values()]


def _forget_in_child() -> None:
    """A fork child has no background save of its own: start it with none.

    The parent's handles are finished by the parent's threads, which the child
    does not have: waiting on them (``load`` via ``written``, the next save,
    exit) would hang for ever; a path's lock held by another of the parent's
    threads at the fork is never released here. (The child reads the file as its
    writer leaves it: a full save renames it whole, an incremental one holds
    the file's lock.)
    """
    _path_locks.clear()
    _latest.clear()


_process.on_fork_child("checkpoint._write", _forget_in_child)


# ---------------------------------------- destination
#
# Whether a checkpoint can be written at a path, asked when a run starts, not hours later.
#
# A run that checkpoints every 250,000 steps would otherwise learn at its first
# checkpoint that the folder is missing, read-only or full. These checks write
# nothing that stays: the writability probe is a temporary file (named like the
# save's own temporary files, so a crash leaves nothing a later save does not
# clean up) that is removed at once.
#
# unwritable   why a checkpoint cannot be written at a path, or None
# free_bytes   bytes a checkpoint at a path may use: free space plus the file it replaces
# state_bytes  bytes of the arrays and tensors in a nested state (what its checkpoint holds;
#              with a compression, those it stores raw for sure)

_MAX_ITEMS = 1_000_000      # state_bytes looks at no more values than this
_MAX_DEPTH = 200


def unwritable(path: str) -> str | None:
    """Why a checkpoint cannot be written at ``path`` (its folder missing, not a folder,
    read-only, the path a directory), or None if a probe file could be made there."""
    target = final_target(path)
    folder = os.path.dirname(os.path.abspath(target))
    try:
        mode = os.stat(folder).st_mode
    except FileNotFoundError:
        return f"its folder {folder!r} does not exist (create it first)"
    except OSError as exc:
        return f"its folder {folder!r} cannot be read ({exc.strerror or exc})"
    if not stat.S_ISDIR(mode):
        return f"{folder!r} is {file_kind(mode)}, not a folder"
    try:
        mode = os.stat(target).st_mode
    except OSError:
        pass
    else:
        if not stat.S_ISREG(mode):
            return f"it is {file_kind(mode)}, not a regular file"
    probe = os.path.join(folder, f"{temp_prefix(os.path.basename(target), host_tag())}"
                                 f"{os.getpid()}-{secrets.token_hex(4)}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o600)
    except OSError as exc:
        return f"no file can be created in {folder!r} ({exc.strerror or exc})"
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return None


def free_bytes(path: str) -> int:
    """Bytes a checkpoint at ``path`` may take: the file system's free space (for this
    user) plus what the file it replaces holds now."""
    target = final_target(path)
    usage = shutil.disk_usage(os.path.dirname(os.path.abspath(target)))
    try:
        held = os.stat(target).st_blocks * 512
    except OSError:
        held = 0
    return int(usage.free) + held


def state_bytes(state: Any, compression: Compression | None = None) -> int:
    """Bytes of the numpy arrays and torch tensors in ``state`` (dicts, lists, tuples and
    objects' ``__dict__`` walked), each memory counted once (views of one base too).

    With ``compression``, the memory it would compress is not counted: its stored size
    is known only once written (from a 32,768th of it to its own size, where it does
    not shrink), so what is left is the least the file needs. A space check on this
    refuses only a state that cannot fit; a compressed save that does not fit fails as
    it writes, the file it would replace untouched.
    """
    seen: set[int] = set()
    total = 0
    stack = [(state, 0)]
    items = 0
    while stack and items < _MAX_ITEMS:
        obj, depth = stack.pop()
        items += 1
        if depth > _MAX_DEPTH or id(obj) in seen:
            continue
        seen.add(id(obj))
        size = _array_bytes(obj, seen, compression)
        if size is not None:
            total += size
        elif isinstance(obj, dict):
            stack.extend((v, depth + 1) for v in obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend((v, depth + 1) for v in obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            stack.extend((v, depth + 1) for v in vars(obj).values())
    return total


#: torch's one-byte dtypes as numpy's ``dtype.str`` (what ``compression="auto"`` selects)
_TORCH_DTYPES = {"torch.uint8": "|u1", "torch.int8": "|i1", "torch.bool": "|b1"}


def _compressed(obj: Any, nbytes: int, compression: Compression | None) -> bool:
    """Whether ``compression`` would store the memory of ``obj`` (``nbytes``) compressed."""
    if compression is None or nbytes < compression.min_block:
        return False
    if compression.dtypes is None:
        return True
    dtype = getattr(obj, "dtype", None)
    name = _TORCH_DTYPES.get(str(dtype))
    if name is None:
        try:
            name = np.dtype(dtype).str
        except TypeError:
            return False
    return name in compression.dtypes


def _array_bytes(obj: Any, seen: set[int], compression: Compression | None = None
                 ) -> int | None:
    """The bytes of an array or tensor not counted yet (0 if its base was, or if
    ``compression`` compresses it), or None."""
    nbytes = getattr(obj, "nbytes", None)
    if not isinstance(nbytes, int) or not hasattr(obj, "shape"):
        return None
    base = obj
    while getattr(base, "base", None) is not None and hasattr(base.base, "nbytes"):
        base = base.base
    if base is not obj:
        if id(base) in seen:
            return 0
        seen.add(id(base))
        nbytes = getattr(base, "nbytes", nbytes)
    if not isinstance(nbytes, int):
        return None
    return 0 if _compressed(base, nbytes, compression) else int(nbytes)


# ---------------------------------------- writer
#
# The one full-file writer: header room, blocks and checksums, then the header, atomically.
#
# Every save that writes a whole file goes through :func:`write`: plain saves,
# and the full saves of incremental mode (in the caller or in a background
# save's child). They differ only in the layout policy, which says where the
# blocks go and how much room the header gets:
#
# PLAIN         blocks back to back, each 64-byte aligned; the header as short as it can be
# PAGE_ALIGNED  what later in-place updates need: large blocks at the page offset their
#               memory has, header room to grow (as much again as the header, at least
#               64 KiB), room for a pickle block to grow, and a ``saved`` record
#
# Both leave aligned all-zero stretches of the data as holes (``_storage.HOLE``): the
# file's content is the same, an empty buffer takes no disk space.
#
# With ``compression`` and ``PLAIN`` the blocks it selects (``_compression.compressed_blocks``:
# at least ``compression.min_block`` bytes, of its dtypes) are written as chunk tables (``_compression.write_block``); their stored sizes
# are known only once written, so the header's room is that of the largest header
# they could need (every chunk at its raw size, padding after every block), and the
# header written is padded with spaces to it. With ``compression`` and ``PAGE_ALIGNED``
# (a full incremental compressed save) the file is the one ``squeezed`` updates in place:
# chunk tables that place their chunks and list their raw CRC-32s, each block's tensor
# with room for its chunks to grow, the header with room as ``PAGE_ALIGNED`` gives it, and
# a ``saved`` record (the package docstring, "Placed chunks").
#
# LayoutPolicy    what a policy is: ``place``, ``header_length``, ``finish``
# Written         what ``write`` returns: the header written and the file's ``stat``
# describe        the header description of an encoded graph (in-place updates use it too)
# write           write an encoded, planned graph to a file, atomically
# chunked_blocks, placed_capacity, placed_tensors, placed_description
#                 the layout of placed compressed files (``squeezed``'s updates use it too)

#: The least room for the header to grow in files laid out for incremental saves (they
#: get as much again as their header when that is more).
HEADER_HEADROOM = 64 * 1024


class LayoutPolicy(Protocol):
    """Where a full save puts the blocks and how much room the header gets."""

    #: whether the header records the save (``"saved"``), as incremental mode's files do
    records_save: bool

    def place(self, plan: _storage.Layout,
              pickled: bool) -> tuple[dict[str, TensorEntry], tuple[BlockEntry, ...]]:
        """The tensor table (padding included) and the blocks at their file offsets."""

    def header_length(self, header: Header) -> int:
        """The bytes reserved for ``header`` (its checksums not yet set)."""

    def finish(self, fd: int, size: int) -> None:
        """After the data is written: give the file its full ``size`` (data section end)."""


class _Plain:
    """Blocks back to back, each 64-byte aligned; the header as short as it can be."""

    records_save = False

    def place(self, plan: _storage.Layout,
              pickled: bool) -> tuple[dict[str, TensorEntry], tuple[BlockEntry, ...]]:
        return plan.tensors, plan.blocks

    def header_length(self, header: Header) -> int:
        return len(header.encode())

    def finish(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)  # the blocks and their padding fill it, a last hole included


class _PageAligned:
    """Laid out for in-place updates (see the package docstring, "Incremental saves")."""

    records_save = True

    def place(self, plan: _storage.Layout,
              pickled: bool) -> tuple[dict[str, TensorEntry], tuple[BlockEntry, ...]]:
        """Large blocks at their memory's page offset; a pickle block (last) gets room to grow."""
        table: dict[str, TensorEntry] = {}
        blocks = []
        offset = pads = 0
        for block, source in zip(plan.blocks, plan.sources, strict=True):
            want = _storage.congruence(source, block.nbytes)
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


def describe(graph: EncodedGraph, plan: _storage.Layout, blocks: tuple[BlockEntry, ...],
             saved: SaveRecord | None) -> Description:
    """The header description of ``graph`` with these blocks, under a new checkpoint id."""
    pickle_entry = None if graph.not_data is None else PickleEntry(len(blocks) - 1,
                                                                   str(graph.not_data))
    return Description(blocks=blocks, arrays=plan.arrays,
                       schemas=tuple(graph.encoder.schemas), structure=graph.structure,
                       pickle=pickle_entry, checkpoint_id=uuid.uuid4().hex, saved=saved,
                       features=features_of(graph.encoder.schemas), metadata=graph.metadata)


def write(graph: EncodedGraph, plan: _storage.Layout, path: str, policy: LayoutPolicy, *,
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


def _compressed_layout(plan: _storage.Layout, tables: list[ChunkTable | None], crcs: list[int],
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


def _write_compressed(graph: EncodedGraph, plan: _storage.Layout, path: str,
                      compression: Compression, shown: str, progress: bool) -> Written:
    """``write`` with large blocks compressed (see the module docstring)."""
    from . import _compression  # only saves that compress load the codec
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


def chunked_blocks(plan: _storage.Layout, graph: EncodedGraph,
                   compression: Compression) -> list[bool]:
    """Which blocks a placed file stores as chunk tables: those ``compression``
    compresses (the large ones; with ``"auto"``, of one-byte dtypes only), and the
    pickle."""
    from . import _compression  # only saves that compress load the codec
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


def placed_description(graph: EncodedGraph, plan: _storage.Layout,
                       blocks: tuple[BlockEntry, ...], saved: SaveRecord) -> Description:
    """``describe`` for a placed file: its features listed."""
    desc = describe(graph, plan, blocks, saved)
    return replace(desc, features=(*desc.features, COMPRESSED_FEATURE, PLACED_FEATURE,
                                   RAW_CRCS_FEATURE))


def _write_placed(graph: EncodedGraph, plan: _storage.Layout, path: str,
                  compression: Compression, shown: str, progress: bool) -> Written:
    """A full compressed save laid out for incremental ones (the package docstring,
    "Placed chunks"): chunk tables with offsets and raw checksums, tensors with room
    to spare, the header with room to grow, a ``saved`` record."""
    from . import _compression  # only saves that compress load the codec
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
