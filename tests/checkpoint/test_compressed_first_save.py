"""The first incremental compressed save of a process that did not write the file (issue 32).

A resumed run loads a compressed checkpoint and saves it again: the save compares
every chunk of memory with the raw CRC-32 the file's chunk table lists for it
(``raw_crc32``, feature ``"zstd-chunk-raw-crcs"``) and rewrites only the chunks that
differ. Nothing is assumed about the memory (it is read whole), so writes that no
tracking saw are saved too; raw checksums that disagree with the rest of the file
are not trusted (a full save); forged ones are refused by ``verify``.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _squeezed as squeezed
from namedschema.checkpoint import verify
from namedschema.errors import FormatError
from tests.checkpoint.crafted import split
from tests.checkpoint.test_compressed_incremental import (
    desc_of,
    equal,
    frames,
    save,
    small_chunks,
    table_of,
)
from tests.helpers import REPO_ROOT

pytest.importorskip("zstandard")

CHUNK = 65536

#: The child: load the file, change rows as the test says, save it incrementally.
CHILD = r"""
import json, sys, numpy as np, namedschema
from namedschema.checkpoint import _compression as compression
from namedschema.checkpoint import _incremental as incremental
compression.CHUNK, compression.MIN_BLOCK = {chunk}, 256
path, how, background = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
obj = namedschema.load(path, verify=True)
obs = obj["obs"]
if how == "ring":                    # 1% of the rows, as a ring buffer writes them
    obs[700:720] = 7
    obj["reward"][700:720] = 1.0
elif how == "kernel":                # written by the kernel (read(2)) and through ctypes
    import ctypes
    with open(sys.argv[4], "rb", buffering=0) as f:
        f.readinto(memoryview(obs[300:310]).cast("B"))
    ctypes.memset(obs[1500:].ctypes.data, 9, 84 * 84)
if background:
    namedschema.save(obj, path, incremental=True, compression="zstd", background=True).wait()
else:
    namedschema.save(obj, path, incremental=True, compression="zstd")
incremental.wait(path)
np.save(sys.argv[-1], obs)
print(json.dumps([namedschema.inspect(path).last_save.kind,
                  namedschema.inspect(path).last_save.bytes_written,
                  incremental.fallback_reason(path)]))
"""


def _child(path: str, how: str, background: bool, *extra: str) -> tuple[str, int, str | None]:
    want = os.path.join(os.path.dirname(path), "want.npy")
    out = subprocess.run([sys.executable, "-c", CHILD.format(chunk=CHUNK), path, how,
                          "1" if background else "0", *extra, want],
                         env=dict(os.environ, PYTHONPATH=REPO_ROOT), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    kind, written, why = json.loads(out.stdout.strip().splitlines()[-1])
    return kind, written, why


def _start(tmp_path) -> tuple[str, dict]:
    path = str(tmp_path / "run.nsb")
    obj = {"obs": frames(2000), "reward": np.zeros(2000, np.float32)}
    with small_chunks(CHUNK):
        assert save(obj, path).kind == "full"
    return path, obj


@pytest.mark.parametrize("background", [False, True])
def test_a_resumed_process_rewrites_only_the_changed_chunks(tmp_path, background):
    path, obj = _start(tmp_path)
    before = table_of(path)
    assert "zstd-chunk-raw-crcs" in desc_of(path)["features"]
    assert len(before["raw_crc32"]) == len(before["chunks"])
    kind, written, why = _child(path, "ring", background)
    assert kind == "incremental" and why is None, why
    obj["obs"][700:720] = 7
    obj["reward"][700:720] = 1.0
    after = table_of(path)
    first, last = 700 * 84 * 84 // CHUNK, (720 * 84 * 84 - 1) // CHUNK
    changed = {k for k, (a, b) in enumerate(zip(before["chunks"], after["chunks"],
                                                strict=True)) if a != b}
    assert changed and changed <= set(range(first, last + 1))
    assert written < 0.02 * os.path.getsize(path) + 8192      # the chunks and the reward
    assert equal(namedschema.load(path, verify=True), obj)
    assert np.array_equal(np.load(str(tmp_path / "want.npy")), obj["obs"])
    verify(path)


def test_writes_no_tracking_saw_are_saved(tmp_path):
    """Rows written by read(2) and by ctypes between the load and the save: every chunk
    is compared, so they are in the file."""
    path, obj = _start(tmp_path)
    noise = np.random.default_rng(3).integers(0, 256, (10, 84, 84), np.uint8)
    source = str(tmp_path / "rows.bin")
    noise.tofile(source)
    kind, _written, why = _child(path, "kernel", False, source)
    assert kind == "incremental", why
    obj["obs"][300:310] = noise
    obj["obs"][1500] = 9
    assert equal(namedschema.load(path, verify=True), obj)


def _rewrite_header(path: str, change) -> None:
    """Change the description in place, the header keeping its length (and room)."""
    with open(path, "r+b") as f:
        data = f.read()
        (n,) = struct.unpack("<Q", data[:8])
        header, desc, _body = split(data)
        change(desc)
        header["__metadata__"]["namedschema"] = json.dumps(desc, separators=(",", ":"))
        header["__metadata__"]["header_crc32"] = "00000000"
        raw = json.dumps(header, separators=(",", ":")).encode()
        assert len(raw) <= n
        raw += b" " * (n - len(raw))
        raw = raw.replace(b'"header_crc32":"00000000"',
                          b'"header_crc32":"%08x"' % zlib.crc32(raw), 1)
        f.seek(8)
        f.write(raw)


def test_raw_checksums_that_disagree_with_the_file_are_not_trusted(tmp_path):
    """A table whose raw checksum of a chunk is not the chunk's (an editor that changed
    the data, or the list, alone): the save must not skip the chunk on its word."""
    path, obj = _start(tmp_path)
    squeezed.forget(os.path.realpath(path))
    k = 3
    new_rows = obj["obs"].reshape(-1).copy()
    new_rows[k * CHUNK:(k + 1) * CHUNK] = 42

    def forge(desc):   # chunk k "holds" what memory will hold: a save that trusts it skips k
        crc = zlib.crc32(new_rows[k * CHUNK:(k + 1) * CHUNK].tobytes())
        desc["blocks"][0]["raw_crc32"][k] = f"{crc:08x}"
    _rewrite_header(path, forge)
    with pytest.raises(FormatError, match=f"chunk {k} holds raw bytes of checksum"):
        verify(path)
    obj["obs"].reshape(-1)[:] = new_rows
    with small_chunks(CHUNK):
        assert save(obj, path).kind == "full"
    assert "no raw checksums" in incremental.fallback_reason(path)
    assert equal(namedschema.load(path, verify=True), obj)


def test_a_file_without_raw_checksums_is_saved_in_full(tmp_path):
    path, obj = _start(tmp_path)
    squeezed.forget(os.path.realpath(path))

    def drop(desc):
        for b in desc["blocks"]:
            b.pop("raw_crc32", None)
        desc["features"].remove("zstd-chunk-raw-crcs")
    _rewrite_header(path, drop)
    obj["obs"][5] = 5
    with small_chunks(CHUNK):
        assert save(obj, path).kind == "full"
        assert "no raw checksums" in incremental.fallback_reason(path)
        obj["obs"][6] = 6
        assert save(obj, path).kind == "incremental"      # its own baseline now
    assert equal(namedschema.load(path, verify=True), obj)


def _count(desc):
    desc["blocks"][0]["raw_crc32"] = desc["blocks"][0]["raw_crc32"][:-1]


def _not_hex(desc):
    desc["blocks"][0]["raw_crc32"][0] = "0x123456"


def _no_feature(desc):
    desc["features"].remove("zstd-chunk-raw-crcs")


@pytest.mark.parametrize("change, message", [
    (_count, "raw checksums for"),
    (_not_hex, "raw checksum is not 8 hex digits"),
    (_no_feature, "does not list the feature 'zstd-chunk-raw-crcs'"),
])
def test_hostile_raw_checksums_are_refused(tmp_path, change, message):
    path, _obj = _start(tmp_path)
    _rewrite_header(path, change)
    for reader in (namedschema.load, namedschema.inspect, verify):
        with pytest.raises(FormatError, match=message):
            reader(path)
