"""Whether a checkpoint can be written at a path, asked when a run starts, not hours later.

A run that checkpoints every 250,000 steps would otherwise learn at its first
checkpoint that the folder is missing, read-only or full. These checks write
nothing that stays: the writability probe is a temporary file (named like the
save's own temporary files, so a crash leaves nothing a later save does not
clean up) that is removed at once.

unwritable   why a checkpoint cannot be written at a path, or None
free_bytes   bytes a checkpoint at a path may use: free space plus the file it replaces
state_bytes  bytes of the arrays and tensors in a nested state (what its checkpoint holds;
             with a compression, those it stores raw for sure)
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from typing import TYPE_CHECKING, Any

import numpy as np

from .atomic import file_kind, final_target, host_tag, temp_prefix

if TYPE_CHECKING:
    from .compression import Compression

__all__ = ["unwritable", "free_bytes", "state_bytes"]

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
