"""Tiny hostile files for the newer readers: bounded memory and time, one typed error.

Issue 34 asked for a tiny-file fuzz over the readers added since round 3. Here: the
RunCheckpoint reader (``RunCheckpoint.restore``) and evolution while loading
(``load(path, schemas=...)``). Each example is a small valid file of the reader's
kind, damaged: random bytes, bytes flipped, cut short, or its header's numbers
replaced (a shape, a size, an offset made huge, negative or zero) with the header's
checksum made to match again, so that the structural checks, not the checksum, have
to refuse it. Whatever the file says, reading it stays under a memory bound and a
CPU-time bound measured by the test (``tests/bounds.py``) and ends in the reader's
result or one typed error. The journal and Ray-manifest fuzzers
(test_journal_hostile.py, tests/ray/test_shard_files.py) use the same bounds.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import namedschema
from namedschema import NamedArrayTupleSchema
from namedschema.errors import NamedSchemaError, RunCheckpointError
from tests.bounds import bounded
from tests.figures import record
from tests.helpers import examples

pytestmark = pytest.mark.slow

_SETTINGS = settings(max_examples=examples(150), deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow])
_MARKER = re.compile(rb'"header_crc32":"([0-9a-f]{8})"')
_NUMBER = re.compile(rb"(?<![0-9a-f\"])[0-9]+")
_HOSTILE = [b"0", b"1", b"-1", b"7", b"4294967296", b"1099511627776", b"9" * 25]


def _recrc(header: bytes) -> bytes:
    """``header`` with its checksum field set to what it now is (as the writer does)."""
    zeroed = _MARKER.sub(b'"header_crc32":"00000000"', header, count=1)
    return zeroed.replace(b'"header_crc32":"00000000"',
                          f'"header_crc32":"{zlib.crc32(zeroed):08x}"'.encode(), 1)


def _spread(lo: int, hi: int):
    return st.integers(0, 2**32).map(lambda x: lo + x % max(1, hi - lo))


@st.composite
def _tiny(draw, content: bytes) -> bytes:
    """``content`` (a whole small file) damaged one way or several."""
    kind = draw(st.sampled_from(["random", "flip", "cut", "numbers", "numbers+cut"]))
    if kind == "random":
        return draw(st.binary(max_size=600))
    raw = bytearray(content)
    length = int.from_bytes(content[:8], "little")
    if kind == "flip":
        for at in draw(st.lists(_spread(0, len(raw)), min_size=1, max_size=6)):
            raw[at] ^= draw(st.integers(1, 255))
    if kind.startswith("numbers"):
        header = bytes(raw[8:8 + length])
        spots = [m.span() for m in _NUMBER.finditer(header)]
        for _ in range(draw(st.integers(1, 3))):
            a, b = spots[draw(_spread(0, len(spots)))]
            header = header[:a] + draw(st.sampled_from(_HOSTILE)) + header[b:]
            spots = [m.span() for m in _NUMBER.finditer(header)]
        header = _recrc(header)
        raw = bytearray(len(header).to_bytes(8, "little") + header + content[8 + length:])
    if kind.endswith("cut") or kind == "cut":
        raw = raw[:draw(_spread(0, len(raw)))]
    return bytes(raw)


def _bound(content: bytes) -> int:
    return 4 * 2**20 + 64 * len(content)


# -- RunCheckpoint ----------------------------------------------------------------------

Step = NamedArrayTupleSchema("FuzzStep", "obs reward")


def _run():
    return {"counters": {"n": 3, "name": "run"}, "arr": np.arange(6.0).reshape(2, 3),
            "rng": np.random.default_rng(5),
            "rb": namedschema.ReplayBuffer(Step(np.zeros(3, np.float32), np.float32(0)), 4)}


def _checkpoint(path, run):
    return namedschema.RunCheckpoint(path, global_rngs=False, background=False,
                                     quiet=True).track(**run)


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("run") / "run.nsc"
    run = _run()
    run["rb"].add(Step(np.ones(3, np.float32), np.float32(1)))
    _checkpoint(path, run).save(12, obs=np.arange(3.0))
    return path, path.read_bytes()


@_SETTINGS
@given(data=st.data())
def test_tiny_run_checkpoints_restore_or_raise_one_typed_error_in_bounded_time(run_file,
                                                                              data):
    path, content = run_file
    blob = data.draw(_tiny(content))
    tiny = path.with_name("tiny.nsc")
    tiny.write_bytes(blob)
    ckpt = _checkpoint(tiny, _run())
    record("round4.tiny_run")
    with bounded(_bound(content)):
        try:
            ckpt.restore()
        except RunCheckpointError as exc:
            assert type(exc) is RunCheckpointError, repr(exc)


# -- evolution while loading -------------------------------------------------------------

Old = NamedArrayTupleSchema("FuzzSamples", "observation action reward")
New = NamedArrayTupleSchema("FuzzSamples", "observation action reward timeout",
                            defaults=(np.bool_(False),))
Wide = NamedArrayTupleSchema("FuzzSamples", "observation action reward",
                             defaults=(np.float64(0),))


@pytest.fixture(scope="module")
def samples_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("evolution") / "old.nsb"
    rng = np.random.default_rng(0)
    old = Old(rng.integers(0, 255, (4, 2, 8), dtype=np.uint8), rng.integers(0, 4, (4, 2)),
              rng.standard_normal((4, 2)).astype(np.float32))
    namedschema.save({"samples": old, "t": 7}, path)
    return path, path.read_bytes()


@_SETTINGS
@given(data=st.data(), schema=st.sampled_from(["added", "widened"]),
       mmap_mode=st.sampled_from([None, "r"]))
def test_tiny_files_loaded_into_another_schema_load_or_raise_one_typed_error(
        samples_file, data, schema, mmap_mode):
    path, content = samples_file
    blob = data.draw(_tiny(content))
    tiny = path.with_name("tiny.nsb")
    tiny.write_bytes(blob)
    schemas, casting = ([New], "no") if schema == "added" else ([Wide], "safe")
    record("round4.tiny_evolution")
    with bounded(_bound(content)):
        try:
            state = namedschema.load(tiny, mmap_mode=mmap_mode, schemas=schemas,
                                     casting=casting)
        except NamedSchemaError:
            state = None
    if state is not None and isinstance(state, dict) and "samples" in state:
        samples = state["samples"]
        assert type(samples) is schemas[0]
        del samples, state         # a mapped file is released before the next example
