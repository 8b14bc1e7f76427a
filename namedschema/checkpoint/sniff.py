"""What a file that is not a checkpoint looks like, for the message that refuses it.

``load("weights.pt")`` should say "a zip archive (torch.save)", not "header
length 4824827008 is implausible". Only the first bytes are read; nothing in
them is parsed or run.

looks_like   "; it looks like a Python pickle (protocol 4): ..." or ""
"""

from __future__ import annotations

import os
from typing import BinaryIO

__all__ = ["looks_like"]

_SIGNATURES = (
    (b"\x93NUMPY", "a NumPy .npy file: read it with numpy.load"),
    (b"PK\x03\x04", "a zip archive, as torch.save and numpy.savez write: read it with "
                    "torch.load or numpy.load"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file: read it with h5py"),
    (b"\x1f\x8b", "a gzip-compressed file"),
    (b"BZh", "a bzip2-compressed file"),
    (b"\xfd7zXZ\x00", "an xz-compressed file"),
)


def _kind(head: bytes) -> str | None:
    if not head:
        return "an empty file"
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return (f"a Python pickle (protocol {head[1]}): unpickling runs code chosen by its "
                "writer; use pickle.load only if you trust it")
    for magic, what in _SIGNATURES:
        if head.startswith(magic):
            return what
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text and all(c.isprintable() or c in "\t\r\n" for c in text):
        return f"a text file (it starts with {text[:40]!r})"
    return None


def looks_like(f: BinaryIO) -> str:
    """``"; it looks like ..."`` for the file ``f`` (from its first bytes), or ``""``."""
    try:
        f.seek(0, os.SEEK_SET)
        head = f.read(64)
    except (OSError, ValueError):
        return ""
    kind = _kind(head)
    return "" if kind is None else f"; it looks like {kind}"
