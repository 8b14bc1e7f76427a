"""Atomic replacement of a file, and removal of temporary files that dead savers left.

AtomicFile      write a temporary file next to the target, sync it, rename it over
                the target and sync the directory; on any error, remove it
check_target    refuse a target that is not a regular file (before anything is written)
file_kind       "a directory", "a FIFO", ... for a file mode, in messages
temp_prefix     the start of every temporary file name for one target
journal_path    where the redo journal of a checkpoint lives (``journal``)
is_file         what is at a path: a regular file, nothing, something else
host_tag        eight hex digits naming this host and pid namespace

A temporary file is named ``.<name>.tmp-<host>-<pid>-<random>``. Before
writing, ``AtomicFile`` removes the temporary files of the same target whose
``<host>`` is this one's and whose ``<pid>`` is no longer writing: no process
has that pid, or it is a zombie, or it started more than STALE_SLACK seconds
after the file was last modified (the pid was reused). Whatever cannot be
decided is kept.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import re
import secrets
import socket
import stat
from types import TracebackType

from ..errors import SaveError

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
