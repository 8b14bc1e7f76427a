"""The shard files a ``ShardedReplay`` manifest names, checked against it before a shard is built.

A restore sizes its shards from the files, never from the manifest alone: the
manifest's capacities, row counts, flags and file names must agree with what the
files hold, read through memory maps (headers and a few scalars, no row data),
before any shard actor exists. What is checked, per shard ``i`` of ``n``:

* the manifest names the file generation ``g`` writes for shard ``i``
  (``slot{g % 2}/shard-{i}-of-{n}.nsb``): no file listed twice or out of place;
* the file is a namedschema checkpoint of one shard: ``shard == i``,
  ``num_shards == n``, a replay buffer state;
* its storage holds the manifest's capacity (every field that many rows, no more
  rows than the file has bytes) and its ``size`` is the manifest's row count;
* it is prioritized exactly when the manifest says so (with the manifest's
  ``alpha``): a prioritized replay never comes back uniform, its priorities lost;
* every shard stores the same schema (names, dtypes, element shapes) as shard 0.

The rows themselves are verified (checksums) by each shard as it loads its file
(:meth:`namedschema.ray.shard.ReplayShard.load`), in parallel.

check_shard_files   the example step of the replay, once the files agree with the manifest
expected_shard      what shard ``i`` must find in its file (passed to its ``load``)
check_loaded_shard  the same checks on a shard file loaded in full, for the shard itself
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._core.tree import is_named
from ..errors import FormatError
from .manifest import Manifest, shard_file

__all__ = ["check_shard_files", "expected_shard", "check_loaded_shard"]


def expected_shard(m: Manifest, index: int) -> dict[str, Any]:
    """What the file of shard ``index`` must hold, as the manifest says."""
    return {"shard": index, "num_shards": m.num_shards, "capacity": m.capacities[index],
            "rows": m.rows[index], "prioritized": m.prioritized, "alpha": m.alpha}


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, np.integer | int) or (isinstance(value, np.ndarray) and value.shape == ()
                                               and value.dtype.kind in "iu"):
        return int(value)
    return None


def _layout(storage: Any) -> Any:
    """Field names, dtypes and element shapes of a storage (what the shards must share)."""
    if is_named(storage):
        return (getattr(storage, "_typename", type(storage).__name__), type(storage)._fields,
                tuple(_layout(v) for v in storage))
    if storage is None:
        return None
    return (storage.dtype.str, storage.shape[1:])


def _arrays(storage: Any) -> list[Any]:
    if is_named(storage):
        return [a for v in storage for a in _arrays(v)]
    return [] if storage is None else [storage]


def check_loaded_shard(saved: Any, expect: dict[str, Any], where: str,
                       file_bytes: int) -> Any:
    """The buffer state of a loaded shard file, once it agrees with ``expect``.

    ``file_bytes`` bounds the capacity (a row takes at least a byte). Raises
    FormatError naming what disagrees.
    """
    if not isinstance(saved, dict) or not isinstance(saved.get("buffer"), dict):
        raise FormatError(f"{where}: not a ShardedReplay shard file (no buffer state)")
    if _int(saved.get("shard")) != expect["shard"] or \
            _int(saved.get("num_shards")) != expect["num_shards"]:
        raise FormatError(f"{where}: the file is shard {saved.get('shard')!r:.40} of "
                          f"{saved.get('num_shards')!r:.40}, the manifest lists it as shard "
                          f"{expect['shard']} of {expect['num_shards']}")
    if not isinstance(saved.get("applied"), dict):
        raise FormatError(f"{where}: the file has no record of the calls applied")
    buffer = saved["buffer"]
    storage = buffer.get("storage")
    arrays = _arrays(storage) if is_named(storage) else []
    if not arrays or not all(isinstance(a, np.ndarray) and a.ndim >= 1 for a in arrays):
        raise FormatError(f"{where}: the buffer state holds no storage of arrays")
    capacity = expect["capacity"]
    if capacity > file_bytes or any(a.shape[0] != capacity for a in arrays):
        raise FormatError(f"{where}: the manifest gives the shard {capacity} rows; the file "
                          f"({file_bytes} bytes) holds {sorted({a.shape[0] for a in arrays})}")
    if _int(buffer.get("size")) != expect["rows"]:
        raise FormatError(f"{where}: the file holds {buffer.get('size')!r:.40} rows, the "
                          f"manifest says {expect['rows']}")
    prioritized = "sum_tree" in buffer
    if prioritized != expect["prioritized"]:
        raise FormatError(
            f"{where}: the manifest says prioritized={str(expect['prioritized']).lower()}, "
            f"the file holds a {'prioritized' if prioritized else 'uniform'} buffer"
            + (" (restoring it as uniform would drop its priorities)" if prioritized else ""))
    if prioritized:
        alpha = buffer.get("alpha")
        if isinstance(alpha, bool) or not isinstance(alpha, float | int | np.floating) or \
                float(alpha) != expect["alpha"]:
            raise FormatError(f"{where}: the file's alpha {alpha!r:.40} is not the "
                              f"manifest's {expect['alpha']!r}")
    return buffer


def check_shard_files(directory: str, m: Manifest) -> Any:
    """One step of the replay's storage (a copy: the example to build shards from), once
    every shard file agrees with the manifest ``m``; FormatError otherwise.

    The files are memory-mapped, so this reads headers and scalars only, and
    allocates nothing in proportion to what the manifest claims (compressed
    files, which cannot be mapped, are read and checked whole).
    """
    from ..checkpoint import load
    from ..checkpoint.inspector import mappable
    n = m.num_shards
    layout = example = None
    for i, name in enumerate(m.files):
        where = f"sharded replay checkpoint {directory!r}, shard file {name!r}"
        if name != shard_file(m.generation, i, n):
            raise FormatError(
                f"{where}: generation {m.generation} writes shard {i} of {n} as "
                f"{shard_file(m.generation, i, n)!r}, the manifest lists {name!r} (a file "
                "listed twice or out of place)")
        path = os.path.join(directory, name)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise FormatError(f"{where}: the manifest names a shard file that is "
                              "missing") from None
        saved = load(path, mmap_mode=mappable(path))
        buffer = check_loaded_shard(saved, expected_shard(m, i), where, size)
        shape = _layout(buffer["storage"])
        if layout is None:
            layout, example = shape, _first_step(buffer["storage"])
        elif shape != layout:
            raise FormatError(f"{where}: stores {shape!r:.200}, shard 0 stores "
                              f"{layout!r:.200}")
    return example


def _first_step(storage: Any) -> Any:
    """One step (a copy) of a buffer's storage."""
    if is_named(storage):
        return type(storage)(*(_first_step(v) for v in storage))
    return None if storage is None else np.array(storage[0])
