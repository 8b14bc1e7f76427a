"""Check a whole checkpoint against its checksums without loading (or unpickling) it.

``inspect`` reads only the header, so a flipped data byte goes unnoticed there; ``load(...,
verify=True)`` checks every block but also builds the object (and unpickles, for files that
need it). ``verify`` reads every block through a read-only map and checks each CRC-32, and
never unpickles: it is safe on untrusted files. ``namedschema verify FILE`` runs it.

verify   every block's checksum; the file's description as ``inspect`` returns it
"""

from __future__ import annotations

import os

from .blocks import Progress, map_blocks
from .blocks import verify as verify_blocks
from .compression import verify_blocks as verify_compressed
from .header import read_header
from .inflight import reading, recover, written
from .inspector import CheckpointInfo, inspect
from .opening import file_errors, open_checkpoint

__all__ = ["verify"]


def verify(path: str | os.PathLike[str], *, progress: bool = False) -> CheckpointInfo:
    """Check every data block of the checkpoint at ``path`` against its stored CRC-32.

    A compressed block is checked chunk by chunk: each chunk's CRC-32, what it
    decompresses to (its size) and the CRC-32 of the whole decompressed block.

    Like :func:`namedschema.load`, it first finishes an incremental save that was
    interrupted (its journal), then checks the file as ``load`` would read it.

    Args:
        path: the checkpoint file.
        progress: show a progress bar on stderr (counting the bytes checked).

    Returns:
        The file's :class:`CheckpointInfo` (as :func:`namedschema.inspect` gives).

    Raises:
        FormatError: the file is not a checkpoint, is truncated, or a block's checksum
            does not match (the message names the first field of that block).
        OSError: the file cannot be read.

    >>> import numpy as np, tempfile, os, namedschema
    >>> from namedschema.checkpoint import verify
    >>> path = os.path.join(tempfile.mkdtemp(), 'a.nsb')
    >>> namedschema.save({'x': np.arange(1000)}, path)
    >>> verify(path).data_bytes
    8000
    >>> with open(path, 'r+b') as f:
    ...     _ = f.seek(-3, os.SEEK_END); _ = f.write(b'!')
    >>> verify(path)
    Traceback (most recent call last):
        ...
    namedschema.errors.FormatError: '...a.nsb': field 'x' is corrupt: checksum ... does not match the stored ...
    """
    name = os.fspath(path)
    written(name)   # this process's background save of it, if one is running
    recover(name)
    with file_errors(name), open_checkpoint(name) as f, reading(f, name):
        header = read_header(f, name, os.fstat(f.fileno()).st_size)
        blocks = map_blocks(f, header, "r", stored=True)
        bar = Progress(sum(int(b.nbytes) for b in header.blocks), "verifying", progress)
        verify_blocks(header, blocks, bar)
        verify_compressed(header, blocks, bar)
        del blocks
    return inspect(name)
