"""``load``: read and check the header, read or map the blocks, rebuild the graph."""

from __future__ import annotations

import os
from typing import Any, Literal

from .._printable import printable
from ..errors import (
    MissingClassError,
    MissingModuleError,
    SchemaEvolutionError,
    UnsafeLoadError,
)
from ..evolution import upgrader
from . import pickled
from .arrays import make_arrays
from .blocks import MMAP_ACCESS, map_blocks, read_blocks, verify
from .header import fail, read_header
from .incremental import reading, recover
from .nodes import Decoder
from .opening import file_errors, open_checkpoint


def load(path: str | os.PathLike[str], *, mmap_mode: Literal["r", "r+", "c"] | None = None,
         allow_pickle: bool = False, verify: bool = False, schemas: Any = None,
         extra: str = "error", casting: str = "no", defaults: Any = None,
         report: bool = False) -> Any:
    """Load a checkpoint written by :func:`save`.

    Arrays that were views of one another come back as views of one block.
    With ``mmap_mode`` the blocks are memory-mapped instead of read, so
    opening takes milliseconds whatever the size and reads nothing until
    used; the arrays stay valid after the file is replaced by a new save.

    Args:
        path: the checkpoint file.
        mmap_mode: None to read everything into memory, or as in ``np.load``:
            ``'r'`` read-only, ``'r+'`` writes go to the file, ``'c'``
            copy-on-write (writes stay in memory). Torch tensors cannot be
            read-only, so with ``'r'`` their blocks are mapped copy-on-write.
        allow_pickle: allow files whose structure was pickled. Unpickling
            runs code chosen by whoever wrote the file: only allow it for
            files you trust.
        verify: check every block's CRC-32 (reads all data, even when mapped).
        schemas: today's schemas (a module, classes, a mapping of saved
            typename to schema, or a list of these): every saved schema
            instance is then rebuilt as an instance of its current schema by
            the rules of :func:`namedschema.upgrade` (docs: "Schema
            evolution"). With ``mmap_mode`` the unchanged fields stay mapped
            and only new (and cast) fields are made in memory.
        extra, casting, defaults, report: as for :func:`namedschema.upgrade`;
            used only with ``schemas``.

    Returns:
        The saved object graph; with ``report=True`` (and ``schemas``)
        ``(graph, UpgradeReport)``.

    Raises:
        FormatError: (a ValueError) the file is not a checkpoint, is
            truncated, corrupt or of an unknown version.
        UnsafeLoadError: the file needs pickle and ``allow_pickle`` is false.
        OSError: the file cannot be read.
        SchemaEvolutionError: with ``schemas``, the saved data does not map
            onto today's schemas (``MissingFieldError``, ``ExtraFieldError``,
            ``FieldMismatchError``); nothing is returned.
    """
    if schemas is None:
        if report:
            raise TypeError("load: report=True needs schemas=")
        return _load(os.fspath(path), mmap_mode, allow_pickle, verify)
    evolve = upgrader(schemas, extra=extra, casting=casting, defaults=defaults)
    graph = _load(os.fspath(path), mmap_mode, allow_pickle, verify)
    try:
        return evolve(graph, report=report)
    except SchemaEvolutionError as exc:
        exc.add_note(f"while loading {os.fspath(path)!r} into today's schemas")
        raise


def _load(name: str, mmap_mode: str | None, allow_pickle: bool, check: bool) -> Any:
    if mmap_mode is not None and mmap_mode not in MMAP_ACCESS:
        raise ValueError(f"mmap_mode must be None, 'r', 'r+' or 'c', got {mmap_mode!r}")
    recover(name)  # an incremental save that was interrupted is finished first
    with file_errors(name), open_checkpoint(name, writable=mmap_mode == "r+") as f, \
            reading(f, name):
        header = read_header(f, name, os.fstat(f.fileno()).st_size)
        if header.description.pickle is not None and not allow_pickle:
            reason = printable(header.description.pickle.reason[:200])
            raise UnsafeLoadError(
                printable(f"{name!r} holds pickled objects ({reason} is not plain "
                          "data); loading it runs code chosen by whoever wrote the "
                          "file. Pass allow_pickle=True only if you trust it."))
        if mmap_mode is None:
            blocks_data = read_blocks(f, header, check)
        else:
            blocks_data = map_blocks(f, header, mmap_mode)
            if check:
                verify(header, blocks_data)
    with file_errors(name):
        arrays = make_arrays(header.arrays, blocks_data, name)
        if header.description.pickle is not None:
            try:
                return pickled.loads(blocks_data[header.description.pickle.block], arrays)
            except (MissingModuleError, MissingClassError) as exc:  # this process, not the file
                exc.file = name
                exc.add_note(f"while loading {name!r}")
                raise
            except Exception as exc:  # noqa: BLE001 - anything a bad pickle raises
                fail(name, f"pickled structure cannot be loaded: {type(exc).__name__}: "
                     f"{exc}", exc)
        decoder = Decoder(name, header.description.schemas, header.arrays, arrays)
        return decoder.decode(header.description.structure)
