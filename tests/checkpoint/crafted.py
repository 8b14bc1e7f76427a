"""Helpers for the file hardening tests: seed checkpoints, header surgery, outcomes.

seed_files        a few small, varied checkpoints written once per process
split / join      take a checkpoint apart into (header, description, data) and
                  put it back with a correct length prefix and header checksum,
                  so mutations reach the validator behind the checksum
attempt           run load/inspect on a file with a time limit and classify it
KNOWN_BUGS        failure signatures of open bugs, each with its own xfail test
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import tempfile
import zlib

import numpy as np

from namedschema import NamedArrayTupleSchema, NamedTupleSchema
from namedschema.errors import FormatError

TIME_LIMIT = 5.0  # seconds per load/inspect call; generous for a loaded 2-core CI box

# (name, exception type, message pattern). The fuzz tests tolerate these and
# count them; the dedicated xfail tests in test_fuzz_files.py fail loudly
# once they are fixed, and then the entry here should go.
KNOWN_BUGS: list = []

_seed_dir = None
_seeds: list = []


def seed_files() -> list:
    """Paths of small checkpoints covering each feature of the format."""
    global _seed_dir
    if _seeds:
        return _seeds
    from namedschema.checkpoint import save
    _seed_dir = tempfile.mkdtemp(prefix="namedschema-fuzz-seeds-")
    Obs = NamedArrayTupleSchema("Obs", "pos vel", defaults=(None,))
    Step = NamedArrayTupleSchema("Step", "obs reward done")
    P = NamedTupleSchema("P", "x y", defaults=(1.5,))
    base = np.arange(48, dtype=np.float32).reshape(6, 8)
    objects = {
        "plain": {"a": np.arange(10, dtype=np.int64), "b": np.ones((3, 4), np.float16)},
        "nested": Step(Obs(np.zeros((4, 2)), np.ones((4, 2), np.float32)),
                       np.arange(4.0), np.zeros(4, bool)),
        "views": {"base": base, "row": base[2], "cols": base[:, ::3], "t": base.T,
                  "rev": base[::-1]},
        "values": [P(1, None), (True, "text", 2**62, float("inf")), np.float64(2.5),
                   np.zeros((0, 3)), {"schema": Obs}],
        "pickled": {"set": {1, 2}, "arr": np.arange(5, dtype=np.uint8)},
        "empty": [],
    }
    for name, obj in objects.items():
        path = os.path.join(_seed_dir, f"{name}.nsb")
        save(obj, path, allow_pickle=(name == "pickled"))
        _seeds.append(path)
    return _seeds


def split(data: bytes):
    """(header dict, description dict, bytes after the header) of a checkpoint."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    desc = json.loads(header["__metadata__"]["namedschema"])
    return header, desc, data[8 + n:]


def join(header: dict, desc, body: bytes, *, fix_crc: bool = True) -> bytes:
    """A checkpoint from parts, with a correct length prefix and (optionally) checksum."""
    header = dict(header)
    meta = dict(header.get("__metadata__") or {})
    meta["namedschema"] = json.dumps(desc, separators=(",", ":"))
    meta["header_crc32"] = "00000000"
    header["__metadata__"] = meta
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % 64)
    if fix_crc:
        crc = zlib.crc32(raw)
        raw = raw.replace(b'"header_crc32":"00000000"', b'"header_crc32":"%08x"' % crc, 1)
    return struct.pack("<Q", len(raw)) + raw + body


class CaseTimeout(Exception):
    """A load or inspect call ran past TIME_LIMIT."""


def _on_alarm(signum, frame):
    raise CaseTimeout(f"no result within {TIME_LIMIT} s")


def known_bug(exc: BaseException) -> str | None:
    """The KNOWN_BUGS name matching ``exc``, or None."""
    for name, kind, pattern in KNOWN_BUGS:
        if type(exc) is kind and re.search(pattern, str(exc)):
            return name
    return None


def attempt(fn, path, **kwargs) -> str:
    """Call ``fn(path, **kwargs)`` under an alarm; return 'ok', 'format' or 'known:<bug>'.

    Any other exception (including a timeout) propagates, failing the test.
    """
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    try:
        fn(path, **kwargs)
        return "ok"
    except FormatError:
        return "format"
    except (TypeError, ValueError, OverflowError) as exc:
        name = known_bug(exc)
        if name is None:
            raise
        return f"known:{name}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
