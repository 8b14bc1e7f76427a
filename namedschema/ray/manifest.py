"""The manifest of a sharded replay checkpoint: which shard files make one generation.

A checkpoint directory holds ``manifest.json`` and two slots of shard files,
``slot0/`` and ``slot1/``. Generation ``g`` writes its shard files into slot
``g % 2`` and then replaces ``manifest.json`` atomically; so while ``g`` is
being written, the files the manifest names (those of ``g - 1``) are not
touched, and a kill at any moment leaves the last committed generation whole.

The manifest is untrusted input when read: its size, every count and every
file name are checked before anything is done with them.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..checkpoint.atomic import AtomicFile
from ..errors import FormatError

__all__ = ["Manifest", "MANIFEST_NAME", "FORMAT", "read_manifest", "write_manifest",
           "shard_file"]

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
