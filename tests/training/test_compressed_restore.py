"""Restores of compressed checkpoints decompress straight into the run's own arrays (issue 32).

A ``RunCheckpoint`` restore leaves the large compressed arrays of the rows that copy
(replay buffers, SB3 buffers, plain arrays) compressed when it loads the file, and
decompresses them chunk by chunk into the live arrays: bit-exact over dtypes, shapes
and chunk boundaries, with no second copy of the buffer, and a damaged chunk refused
before anything in the run changes. A plain ``load`` of a compressed file decompresses
into the array it returns, with no whole-array copy either.
"""

from __future__ import annotations

import contextlib
import os
import tracemalloc
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import namedschema
from namedschema.checkpoint import _compression as compression
from namedschema.checkpoint._header import read_header
from namedschema.checkpoint._read import open_checkpoint
from namedschema.errors import RunCheckpointError

pytest.importorskip("zstandard")

Step = namedschema.NamedArrayTupleSchema("CompressedRestoreStep", "obs action reward")


@contextlib.contextmanager
def small_chunks(chunk: int):
    """Chunks of ``chunk`` raw bytes; every block of 64 bytes or more compressed and, when
    a row copies it, left compressed by the restore's load."""
    with mock.patch.multiple(compression, CHUNK=chunk, MIN_BLOCK=64, MIN_DEFERRED=64):
        yield


class Counting:
    """Counts the compressed arrays decompressed into a run's arrays, and into new memory."""

    def __init__(self):
        self.into, self.materialized = 0, 0

    @contextlib.contextmanager
    def patched(self):
        copy_into, value = compression.Deferred.copy_into, compression.Deferred.value

        def counted_copy_into(deferred, target):
            self.into += 1
            return copy_into(deferred, target)

        def counted_value(deferred):
            self.materialized += 1
            return value(deferred)

        with mock.patch.object(compression.Deferred, "copy_into", counted_copy_into), \
                mock.patch.object(compression.Deferred, "value", counted_value):
            yield self


def _buffer(obs_shape, dtype, capacity, seed=None):
    rb = namedschema.ReplayBuffer(
        Step(np.zeros(obs_shape, dtype), np.int64(0), np.float32(0)), capacity, seed=0)
    if seed is not None:
        rng = np.random.default_rng(seed)
        n = capacity + capacity // 3          # the ring wraps
        obs = rng.integers(0, 3, (n, *obs_shape)).astype(dtype)
        rb.extend(Step(obs, rng.integers(0, 6, n), rng.random(n).astype(np.float32)))
    return rb


def _checkpoint(path, **options):
    return namedschema.RunCheckpoint(path, global_rngs=False, quiet=True, background=False,
                                     **options)


def _pair(tmp_path, obs_shape=(12, 10), dtype=np.uint8, capacity=40, compression="zstd",
          verify=True):
    """A run saved with ``compression``, and a fresh run of the same shape to restore."""
    path = tmp_path / "run.nsc"
    rb = _buffer(obs_shape, dtype, capacity, seed=1)
    extra = np.random.default_rng(2).integers(0, 4, (capacity, 7)).astype(dtype)
    ckpt = _checkpoint(path, compression=compression)
    ckpt.track(replay=rb, extra=extra)
    ckpt.save(5)
    fresh = _buffer(obs_shape, dtype, capacity)
    fresh_extra = np.zeros_like(extra)
    again = _checkpoint(path, compression=compression, verify=verify)
    again.track(replay=fresh, extra=fresh_extra)
    return path, (rb, extra), (fresh, fresh_extra), again


def _same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(dtype=st.sampled_from([np.uint8, np.int8, np.bool_, np.int16, np.float32,
                              np.float64, np.int64]),
       obs_shape=st.sampled_from([(1,), (3,), (12, 10), (5, 4, 3)]),
       capacity=st.integers(1, 60), chunk=st.sampled_from([64, 128, 192, 1024, 4096]))
def test_restore_into_live_buffer_is_bit_exact(tmp_path_factory, dtype, obs_shape, capacity,
                                               chunk):
    tmp_path = tmp_path_factory.mktemp("restore")
    with small_chunks(chunk):
        _path, (rb, extra), (fresh, fresh_extra), again = _pair(
            tmp_path, obs_shape, dtype, capacity)
        live = fresh.storage.obs
        with Counting().patched() as counts:
            assert again.restore()
    assert fresh.storage.obs is live                  # written in place
    for a, b in zip(rb.storage, fresh.storage, strict=True):
        assert _same(a, b)
    assert _same(extra, fresh_extra)
    assert counts.materialized == 0
    # every compressed array a row copies went straight into the run's own
    assert counts.into == sum(a.nbytes >= 64 for a in (*rb.storage, extra))
    for a, b in zip(fresh.sample(4), rb.sample(4), strict=True):
        assert _same(a, b)


def test_restore_of_auto_file_defers_only_compressed_arrays(tmp_path):
    with small_chunks(128):
        _path, (rb, extra), (fresh, fresh_extra), again = _pair(
            tmp_path, compression="auto")
        with Counting().patched() as counts:
            assert again.restore()
    assert counts.into == 2 and counts.materialized == 0     # obs and extra: uint8
    for a, b in zip(rb.storage, fresh.storage, strict=True):
        assert _same(a, b)
    assert _same(extra, fresh_extra)


def _last_chunk_offset(path, field: str, compressed: bool) -> int:
    """Where the stored bytes of the last chunk of ``field``'s block (the last compressed
    one, if ``compressed``) start in the file."""
    with open_checkpoint(str(path)) as f:
        header = read_header(f, str(path), os.path.getsize(path))
    entry = next(a for a in header.arrays if a.path == field)
    block = header.blocks[entry.block]
    table = block.table
    assert table is not None and len(table.chunks) > 1
    last = max(k for k in range(len(table.chunks))
               if not compressed or table.chunks[k][0] < table.raw_size(k, block.nbytes))
    assert last >= len(table.chunks) - 2
    return header.block_file_start(entry.block) + table.starts()[last]


def _flip(path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


@pytest.mark.parametrize("verify", [True, False])
def test_corrupt_last_chunk_refused_before_anything_changes(tmp_path, verify):
    with small_chunks(128):
        path, _saved, (fresh, fresh_extra), again = _pair(tmp_path, verify=verify)
        # without verify, raw chunks go unchecked (as uncompressed blocks do)
        _flip(path, _last_chunk_offset(path, "components.replay.state.storage.obs",
                                       compressed=not verify))
        fresh.storage.obs[:] = 9
        before = [a.copy() for a in fresh.storage]
        with pytest.raises(RunCheckpointError, match=r"chunk \d+ checksum .*nothing in the "
                                                     r"run changed"):
            again.restore()
    for a, b in zip(before, fresh.storage, strict=True):
        assert _same(a, b)
    assert not fresh_extra.any()
    assert len(fresh) == 0


def test_chunk_failing_during_the_copy_says_the_buffer_was_partly_overwritten(tmp_path):
    """A chunk whose stored bytes are intact but decompress wrong (a file written wrong)
    is found only while it is written: the error says the array was partly overwritten."""
    with small_chunks(128):
        _path, _saved, (fresh, _fresh_extra), again = _pair(tmp_path)
        decompress = compression._decompress_into

        def last_fails(header, index, k, frame, out):
            decompress(header, index, k, frame, out)
            if k == len(header.blocks[index].table.chunks) - 1:
                compression.fail(header.name, f"chunk {k} decompresses wrong")
        with mock.patch.object(compression, "_decompress_into", last_fails), \
                pytest.raises(RunCheckpointError, match="partly overwritten"):
            again.restore()


def test_restore_memory_bounded(tmp_path):
    """The extra memory a compressed restore allocates (traced: numpy's arrays, Python's
    buffers) stays a small part of the buffer, where a load then copy takes all of it."""
    # 5.4 MiB of frames in 64 KiB chunks: the chunk tables (a checksum and offsets per
    # chunk) are a few KiB, so the peak measures the copy, not the metadata
    capacity, shape = 800, (84, 84)
    with small_chunks(65536):
        path = tmp_path / "run.nsc"
        rb = _buffer(shape, np.uint8, capacity, seed=3)
        ckpt = _checkpoint(path, compression="zstd")
        ckpt.track(replay=rb)
        ckpt.save(1)
        fresh = _buffer(shape, np.uint8, capacity)
        again = _checkpoint(path, compression="zstd")
        again.track(replay=fresh)
        tracemalloc.start()
        try:
            assert again.restore()
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert _same(rb.storage.obs, fresh.storage.obs)
    assert peak < rb.storage.obs.nbytes / 8, peak


def test_plain_load_decompresses_into_the_array_it_returns(tmp_path):
    """No whole-array copy in a plain load: the traced peak is the array, plus a little."""
    data = np.random.default_rng(4).integers(0, 3, (1500, 84, 84)).astype(np.uint8)
    path = tmp_path / "plain.nsb"
    with small_chunks(2**16):
        namedschema.save({"frames": data}, path, compression="zstd")
        tracemalloc.start()
        try:
            loaded = namedschema.load(path)["frames"]
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert _same(loaded, data)
    assert peak < data.nbytes * 1.1, (peak, data.nbytes)
