"""The files of a sharded replay's checkpoint: its manifest and its shard files."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core.tree import is_named
from ..checkpoint._write import AtomicFile
from ..errors import FormatError

__all__ = ["Manifest", "MANIFEST_NAME", "FORMAT", "read_manifest", "write_manifest", "shard_file",
           "check_shard_files", "expected_shard", "check_loaded_shard"]


# ---------------------------------------- manifest
#
# The manifest of a sharded replay checkpoint: which shard files make one generation.
#
# A checkpoint directory holds ``manifest.json`` and two slots of shard files,
# ``slot0/`` and ``slot1/``. Generation ``g`` writes its shard files into slot
# ``g % 2`` and then replaces ``manifest.json`` atomically; so while ``g`` is
# being written, the files the manifest names (those of ``g - 1``) are not
# touched, and a kill at any moment leaves the last committed generation whole.
#
# The manifest is untrusted input when read: its size, every count and every
# file name are checked before anything is done with them.

FORMAT = "namedschema.ray.ShardedReplay"
VERSION = 1
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 4 << 20
MAX_SHARDS = 4096
_FILE = re.compile(r"slot[01]/shard-[0-9]{4}-of-[0-9]{4}\.nsb", re.ASCII)


def shard_file(generation: int, index: int, num_shards: int) -> str:
    """The shard file of ``index`` in ``generation``, relative to the directory."""
    return f"slot{generation % 2}/shard-{index:04d}-of-{num_shards:04d}.nsb"


@dataclass(frozen=True)
class Manifest:
    """One committed generation of a sharded replay checkpoint."""

    generation: int
    capacities: tuple[int, ...]          # rows per shard
    prioritized: bool
    alpha: float
    beta: float
    files: tuple[str, ...]               # relative to the checkpoint directory
    rng: tuple[int, ...]                 # the owner's generator (6 words)
    seed_entropy: int                    # of the SeedSequence the shards were seeded from
    writer: int                          # the owner's writer id and last call number
    seq: int
    rows: tuple[int, ...]                # rows held by each shard at the cut
    cut: dict[str, int] = field(default_factory=dict)
    missing_writers: tuple[int, ...] = ()

    @property
    def num_shards(self) -> int:
        """How many shards the manifest lists."""
        return len(self.capacities)

    def to_json(self) -> bytes:
        """The manifest as UTF-8 JSON bytes."""
        doc = {"format": FORMAT, "version": VERSION, "generation": self.generation,
               "capacities": list(self.capacities), "prioritized": self.prioritized,
               "alpha": self.alpha, "beta": self.beta, "files": list(self.files),
               "rng": [str(w) for w in self.rng], "seed_entropy": str(self.seed_entropy),
               "writer": str(self.writer), "seq": self.seq, "rows": list(self.rows),
               "cut": self.cut, "missing_writers": [str(w) for w in self.missing_writers]}
        return json.dumps(doc, indent=1).encode()


def write_manifest(directory: str, manifest: Manifest) -> None:
    """Replace ``directory/manifest.json`` atomically (synced, then renamed)."""
    data = manifest.to_json()
    with AtomicFile(os.path.join(directory, MANIFEST_NAME)) as fd:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]


def _int(doc: dict[str, Any], key: str, where: str, low: int = 0, high: int | None = None) -> int:
    value = doc.get(key)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,40}", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
            high is not None and value > high):
        raise FormatError(f"{where}: {key!r} is not an integer in range: {value!r:.80}")
    return value


def _number(doc: dict[str, Any], key: str, where: str) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            0 <= value < float("inf")):
        raise FormatError(f"{where}: {key!r} is not a finite number >= 0: {value!r:.80}")
    return float(value)


def _list(doc: dict[str, Any], key: str, where: str, length: int | None = None) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list) or len(value) > MAX_SHARDS or (
            length is not None and len(value) != length):
        raise FormatError(f"{where}: {key!r} is not a list of the expected length")
    return value


def read_manifest(directory: str) -> Manifest:
    """The committed generation in ``directory``; FormatError for anything else."""
    path = os.path.join(directory, MANIFEST_NAME)
    where = f"sharded replay checkpoint {path!r}"
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise FileNotFoundError(f"{where}: no manifest (not a ShardedReplay checkpoint "
                                "directory, or none was committed yet)") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise FormatError(f"{where}: the manifest is over {MAX_MANIFEST_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"{where}: the manifest is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FormatError(f"{where}: not a {FORMAT} manifest")
    if doc.get("version") != VERSION:
        raise FormatError(f"{where}: manifest version {doc.get('version')!r:.40}; this "
                          f"namedschema reads version {VERSION}")
    capacities = _list(doc, "capacities", where)
    n = len(capacities)
    if n == 0:
        raise FormatError(f"{where}: no shards")
    caps = tuple(_int({"c": c}, "c", where, 1, 2**48) for c in capacities)
    files = tuple(_list(doc, "files", where, n))
    for i, name in enumerate(files):
        if not isinstance(name, str) or not _FILE.fullmatch(name):
            raise FormatError(f"{where}: shard file {i} has a malformed name {name!r:.80}")
    rng = tuple(_int({"w": w}, "w", where, 0, 2**64 - 1) for w in _list(doc, "rng", where, 6))
    rows = tuple(_int({"r": r}, "r", where, 0, caps[i])
                 for i, r in enumerate(_list(doc, "rows", where, n)))
    cut = doc.get("cut")
    if not isinstance(cut, dict) or len(cut) > 1_000_000:
        raise FormatError(f"{where}: 'cut' is not a mapping")
    if not isinstance(doc.get("prioritized"), bool):
        raise FormatError(f"{where}: 'prioritized' is not true or false")
    return Manifest(
        generation=_int(doc, "generation", where, 1), capacities=caps,
        prioritized=doc["prioritized"], alpha=_number(doc, "alpha", where),
        beta=_number(doc, "beta", where), files=files, rng=rng,
        seed_entropy=_int(doc, "seed_entropy", where, 0, 2**1024),
        writer=_int(doc, "writer", where, 0, 2**63), seq=_int(doc, "seq", where, -1),
        rows=rows, cut={str(k): v for k, v in cut.items()},
        missing_writers=tuple(_int({"w": w}, "w", where, 0, 2**63)
                              for w in _list(doc, "missing_writers", where)))


# ---------------------------------------- shard_files
#
# The shard files a ``ShardedReplay`` manifest names, checked against it before a shard is built.
#
# A restore sizes its shards from the files, never from the manifest alone: the
# manifest's capacities, row counts, flags and file names must agree with what the
# files hold, read through memory maps (headers and a few scalars, no row data),
# before any shard actor exists. What is checked, per shard ``i`` of ``n``:
#
# * the manifest names the file generation ``g`` writes for shard ``i``
#   (``slot{g % 2}/shard-{i}-of-{n}.nsb``): no file listed twice or out of place;
# * the file is a namedschema checkpoint of one shard: ``shard == i``,
#   ``num_shards == n``, a replay buffer state;
# * its storage holds the manifest's capacity (every field that many rows, no more
#   rows than the file has bytes) and its ``size`` is the manifest's row count;
# * it is prioritized exactly when the manifest says so (with the manifest's
#   ``alpha``): a prioritized replay never comes back uniform, its priorities lost;
# * every shard stores the same schema (names, dtypes, element shapes) as shard 0.
#
# The rows themselves are verified (checksums) by each shard as it loads its file
# (:meth:`namedschema.ray.shard.ReplayShard.load`), in parallel.
#
# check_shard_files   the example step of the replay, once the files agree with the manifest
# expected_shard      what shard ``i`` must find in its file (passed to its ``load``)
# check_loaded_shard  the same checks on a shard file loaded in full, for the shard itself

def expected_shard(m: Manifest, index: int) -> dict[str, Any]:
    """What the file of shard ``index`` must hold, as the manifest says."""
    return {"shard": index, "num_shards": m.num_shards, "capacity": m.capacities[index],
            "rows": m.rows[index], "prioritized": m.prioritized, "alpha": m.alpha}


def _int_value(value: Any) -> int | None:
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
    if _int_value(saved.get("shard")) != expect["shard"] or \
            _int_value(saved.get("num_shards")) != expect["num_shards"]:
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
    if _int_value(buffer.get("size")) != expect["rows"]:
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
    from ..checkpoint._read import mappable
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
