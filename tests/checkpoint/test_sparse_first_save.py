"""The first save of an empty buffer costs what is in it (issue 35, item 4).

A replay buffer is allocated at its full size and filled as training goes, so the
first checkpoint (at step 0 in ``examples/dqn_pong.py``) holds gigabytes of zeros.
Aligned all-zero stretches are left as holes: the file takes the disk space of its
data, and reads back byte for byte as the file written in full.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _storage as blocks
from namedschema.checkpoint import verify

MiB = 2**20
pytestmark = pytest.mark.slow   # writes files of 64 MiB


def _on_disk(path) -> int:
    return os.stat(path).st_blocks * 512


def _buffer(filled_rows: int = 0):
    obs = np.zeros((1024, 64, 1024), np.uint8)            # 64 MiB of frames
    obs[:filled_rows] = 7
    return {"observation": obs, "reward": np.zeros(1024, np.float32), "cursor": filled_rows}


def _data_section(path) -> bytes:
    """The file's bytes after its header (two saves' headers differ in their random id)."""
    data = open(path, "rb").read()
    return data[8 + int.from_bytes(data[:8], "little"):]


@pytest.mark.parametrize("incremental", [False, True])
def test_first_save_of_an_empty_buffer_takes_almost_no_disk(tmp_path, incremental):
    path = tmp_path / "empty.nsb"
    namedschema.save(_buffer(), path, incremental=incremental)
    assert os.path.getsize(path) > 64 * MiB
    assert _on_disk(path) < 1 * MiB, f"{_on_disk(path):,} bytes on disk for an empty buffer"
    back = namedschema.load(path)
    assert not back["observation"].any() and back["observation"].shape == (1024, 64, 1024)
    verify(path)


@pytest.mark.parametrize("incremental", [False, True])
def test_a_partly_filled_buffer_takes_the_disk_of_its_rows(tmp_path, incremental):
    path = tmp_path / "part.nsb"
    namedschema.save(_buffer(filled_rows=128), path, incremental=incremental)   # 8 MiB
    assert 8 * MiB <= _on_disk(path) < 10 * MiB
    back = namedschema.load(path)
    assert (back["observation"][:128] == 7).all() and not back["observation"][128:].any()


@pytest.mark.parametrize("incremental", [False, True])
def test_the_holes_read_back_as_the_file_written_in_full(tmp_path, monkeypatch, incremental):
    obj = _buffer(filled_rows=100)
    obj["observation"][500, 3, 5] = 1                 # one byte inside a zero stretch
    sparse, full = tmp_path / "sparse.nsb", tmp_path / "full.nsb"
    namedschema.save(obj, sparse, incremental=incremental)
    monkeypatch.setattr(blocks, "write_new", blocks.write_all)   # every byte written
    namedschema.save(obj, full, incremental=incremental)
    assert _on_disk(full) > 64 * MiB > 16 * MiB > _on_disk(sparse)
    assert os.path.getsize(sparse) == os.path.getsize(full)
    assert _data_section(sparse) == _data_section(full)
