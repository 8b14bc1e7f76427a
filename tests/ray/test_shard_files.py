"""A ShardedReplay checkpoint's manifest and shard files, checked against each other (no Ray).

Issue 34, items 14-16: a restore sizes nothing by the manifest alone (a tiny
manifest must not make shards allocate what it claims), refuses a manifest that
disagrees with its files (a file listed twice, ``prioritized=false`` over a
prioritized replay), and a shard verifies its file's checksums as it loads it.
The Ray side (restore raising before any actor starts) is in test_ray_sharded.py.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import namedschema as ns
from namedschema.errors import FormatError
from namedschema.ray._files import (
    Manifest,
    check_shard_files,
    expected_shard,
    read_manifest,
    shard_file,
    write_manifest,
)
from namedschema.ray.shard import ReplayShard
from tests.bounds import bounded
from tests.figures import record
from tests.helpers import examples

Step = ns.NamedArrayTupleSchema("ShardFileStep", "obs action")
EXAMPLE = Step(np.zeros(3, np.float32), np.int64(0))
MARK = 123456.0     # the value of every obs element: findable in the file's bytes


def make_checkpoint(directory, prioritized, capacities=(20, 20), rows=(10, 6)):
    """A committed generation-1 checkpoint written by plain ReplayShards."""
    n = len(capacities)
    os.makedirs(os.path.join(directory, "slot1"), exist_ok=True)
    for i, (capacity, k) in enumerate(zip(capacities, rows, strict=True)):
        spec = {"example": EXAMPLE, "capacity": capacity, "prioritized": prioritized,
                "alpha": 0.6, "beta": 0.4}
        shard = ReplayShard(spec, i, n, seed=i)
        shard.extend(Step(np.full((k, 3), MARK, np.float32), np.arange(k) + 100 * i), i, 0)
        ns.save(shard.state(), os.path.join(directory, shard_file(1, i, n)))
    m = Manifest(generation=1, capacities=tuple(capacities), prioritized=prioritized,
                 alpha=0.6, beta=0.4, files=tuple(shard_file(1, i, n) for i in range(n)),
                 rng=(1, 2, 3, 4, 0, 0), seed_entropy=7, writer=0, seq=1, rows=tuple(rows),
                 cut={})
    write_manifest(directory, m)
    return m


def edit_manifest(directory, **changes):
    path = os.path.join(directory, "manifest.json")
    with open(path) as f:
        doc = json.load(f)
    doc.update(changes)
    with open(path, "w") as f:
        json.dump(doc, f)
    return read_manifest(directory)


@pytest.fixture(params=[False, True], ids=["uniform", "prioritized"])
def checkpoint(request, tmp_path):
    make_checkpoint(str(tmp_path), request.param)
    return str(tmp_path), request.param


def test_files_that_agree_give_the_example(checkpoint):
    directory, _ = checkpoint
    example = check_shard_files(directory, read_manifest(directory))
    assert type(example) is Step and example.obs.shape == (3,)


def test_capacities_the_files_do_not_hold_are_refused(checkpoint):
    # issue 34 item 14: a 521-byte manifest made the shards allocate 703 MiB
    directory, _ = checkpoint
    m = edit_manifest(directory, capacities=[2**40, 2**40])
    assert os.path.getsize(os.path.join(directory, "manifest.json")) < 1024
    with pytest.raises(FormatError, match=r"gives the shard 1099511627776 rows; the file "
                                          r"\(\d+ bytes\) holds \[20\]"):
        check_shard_files(directory, m)


def test_a_file_listed_twice_or_out_of_place_is_refused(checkpoint):
    directory, _ = checkpoint
    first = shard_file(1, 0, 2)
    m = edit_manifest(directory, files=[first, first])
    with pytest.raises(FormatError, match="listed twice or out of place"):
        check_shard_files(directory, m)
    m = edit_manifest(directory, files=[shard_file(1, 1, 2), first])
    with pytest.raises(FormatError, match="out of place"):
        check_shard_files(directory, m)
    # a file renamed into place is refused by what it holds: shard 1, not 0
    os.replace(os.path.join(directory, first), os.path.join(directory, "kept.nsb"))
    shutil.copy(os.path.join(directory, shard_file(1, 1, 2)), os.path.join(directory, first))
    m = edit_manifest(directory, files=[first, shard_file(1, 1, 2)])
    with pytest.raises(FormatError, match="the file is shard 1 of 2, the manifest lists it as "
                                          "shard 0 of 2"):
        check_shard_files(directory, m)


def test_a_manifest_of_the_other_kind_is_refused(checkpoint):
    directory, prioritized = checkpoint
    m = edit_manifest(directory, prioritized=not prioritized)
    match = ("prioritized=false, the file holds a prioritized buffer \\(restoring it as "
             "uniform would drop its priorities\\)" if prioritized else
             "prioritized=true, the file holds a uniform buffer")
    with pytest.raises(FormatError, match=match):
        check_shard_files(directory, m)


def test_rows_alpha_and_missing_files_are_checked(checkpoint):
    directory, prioritized = checkpoint
    with pytest.raises(FormatError, match="holds 10 rows, the manifest says 11"):
        check_shard_files(directory, edit_manifest(directory, rows=[11, 6]))
    edit_manifest(directory, rows=[10, 6])
    if prioritized:
        with pytest.raises(FormatError, match="alpha 0.6 is not the manifest's 0.9"):
            check_shard_files(directory, edit_manifest(directory, alpha=0.9))
        edit_manifest(directory, alpha=0.6)
    os.unlink(os.path.join(directory, shard_file(1, 1, 2)))
    with pytest.raises(FormatError, match="missing"):
        check_shard_files(directory, read_manifest(directory))


def test_shards_of_another_schema_are_refused(tmp_path):
    directory = str(tmp_path)
    make_checkpoint(directory, False)
    Other = ns.NamedArrayTupleSchema("ShardFileOther", "obs action")
    spec = {"example": Other(np.zeros(3, np.float64), np.int64(0)), "capacity": 20,
            "prioritized": False, "alpha": 0.6, "beta": 0.4}
    shard = ReplayShard(spec, 1, 2, seed=0)
    shard.extend(Other(np.zeros((6, 3)), np.arange(6)), 1, 0)
    ns.save(shard.state(), os.path.join(directory, shard_file(1, 1, 2)))
    with pytest.raises(FormatError, match="shard 0 stores"):
        check_shard_files(directory, read_manifest(directory))


def _corrupt_a_row(path):
    """Flip one byte inside the rows of obs (found by their value)."""
    with open(path, "r+b") as f:
        data = f.read()
        at = data.index(np.full(3, MARK, np.float32).tobytes())
        f.seek(at + 5)
        f.write(bytes([data[at + 5] ^ 0x40]))


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_shard_verifies_its_file_as_it_loads_it(tmp_path, prioritized):
    # issue 34 item 16: restore loaded without verification and sample() served the row
    directory = str(tmp_path)
    m = make_checkpoint(directory, prioritized)
    spec = {"example": None, "capacity": None, "prioritized": prioritized, "alpha": 0.6,
            "beta": 0.4}
    path = os.path.join(directory, m.files[0])
    good = ReplayShard(spec, 0, 2, seed=0)
    assert good.load(path, expected_shard(m, 0)) == 10
    assert good.buffer.storage.obs[:10].tolist() == [[MARK] * 3] * 10
    _corrupt_a_row(path)
    check_shard_files(directory, m)       # the structure still agrees: the rows do not
    shard = ReplayShard(spec, 0, 2, seed=0)
    with pytest.raises(FormatError, match="(?i)checksum|crc"):
        shard.load(path, expected_shard(m, 0))
    assert shard.capacity == 0 and not hasattr(shard, "buffer")   # nothing was made


def test_a_shard_checks_the_whole_buffer_state_it_loads(tmp_path):
    directory = str(tmp_path)
    m = make_checkpoint(directory, True)
    path = os.path.join(directory, m.files[1])
    saved = ns.load(path)
    tree = saved["buffer"]["sum_tree"]
    tree[tree.shape[0] // 2 + 12] = 1.0       # a priority for a row that does not exist
    ns.save(saved, path)
    spec = {"example": None, "capacity": None, "prioritized": True, "alpha": 0.6,
            "beta": 0.4}
    with pytest.raises(FormatError, match="trees do not hold together"):
        ReplayShard(spec, 1, 2, seed=0).load(path, expected_shard(m, 1))


# -- a tiny-file fuzz: bounded memory whatever the manifest says ------------------------

MEMORY_BOUND = 8 << 20    # bytes the reader and the checks may allocate (tracemalloc peak)

_values = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=30), st.booleans(), st.none(),
                    st.lists(st.integers(-2**64, 2**64), max_size=6),
                    st.lists(st.text(max_size=40), max_size=4),
                    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
_KEYS = ["format", "version", "generation", "capacities", "prioritized", "alpha", "beta",
         "files", "rng", "seed_entropy", "writer", "seq", "rows", "cut", "missing_writers"]


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(changes=st.dictionaries(st.sampled_from(_KEYS), _values, max_size=4),
       capacity=st.one_of(st.none(), st.integers(0, 2**60)),
       raw=st.one_of(st.none(), st.binary(max_size=600)),
       truncate=st.one_of(st.none(), st.integers(0, 4000)))
def test_tiny_files_never_make_the_reader_allocate_beyond_a_bound(tmp_path_factory, changes,
                                                                  capacity, raw, truncate):
    directory = str(tmp_path_factory.mktemp("fuzz"))
    m = make_checkpoint(directory, True)
    doc = json.loads(m.to_json())
    doc.update(changes)
    if capacity is not None:
        doc["capacities"] = [capacity, capacity]
    data = json.dumps(doc).encode() if raw is None else raw
    with open(os.path.join(directory, "manifest.json"), "wb") as f:
        f.write(data)
    if truncate is not None:
        with open(os.path.join(directory, m.files[0]), "r+b") as f:
            f.truncate(truncate)
    record("round4.manifest_fuzz")
    with bounded(MEMORY_BOUND):                 # memory and CPU time (tests/bounds.py)
        try:
            example = check_shard_files(directory, read_manifest(directory))
        except (FormatError, FileNotFoundError):
            example = None
    if example is not None:   # what was accepted agrees with the files
        assert read_manifest(directory).capacities == (20, 20)
