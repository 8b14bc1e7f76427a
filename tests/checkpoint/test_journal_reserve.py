"""``journal.reserve``: blocks under a journal's pieces, allocated only where the file has holes.

A first save leaves zero stretches as holes; the pieces an incremental save writes
there get their blocks before the commit (so a full disk fails the save, not the
journal's replay). Elsewhere nothing is allocated: a ``posix_fallocate`` per piece
was a measurable part of a save of many scattered ranges (issue 33).
"""

from __future__ import annotations

import os

import pytest

from namedschema.checkpoint import _journal as journal

PAGE = 4096
pytestmark = pytest.mark.skipif(not hasattr(os, "SEEK_HOLE"), reason="needs SEEK_HOLE")


def _sparse(path, size, data_ranges):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, size)
    for lo, hi in data_ranges:
        os.pwrite(fd, b"\1" * (hi - lo), lo)
    os.fsync(fd)
    return fd


def _calls(monkeypatch):
    calls = []
    real = os.posix_fallocate

    def counted(fd, offset, length):
        calls.append((offset, length))
        return real(fd, offset, length)
    monkeypatch.setattr(os, "posix_fallocate", counted)
    return calls


def test_a_file_without_holes_allocates_nothing(tmp_path, monkeypatch):
    size = 64 * PAGE
    fd = _sparse(tmp_path / "f", size, [(0, size)])
    try:
        calls = _calls(monkeypatch)
        pieces = [(k * PAGE + 10, b"x" * 100, 0) for k in range(0, 64, 3)]
        journal.reserve(fd, pieces, size)
        assert calls == []
    finally:
        os.close(fd)


def test_only_pieces_over_holes_are_allocated(tmp_path, monkeypatch):
    size = 64 * PAGE
    fd = _sparse(tmp_path / "f", size, [(0, 16 * PAGE), (32 * PAGE, 48 * PAGE)])
    try:
        if os.lseek(fd, 0, os.SEEK_HOLE) != 16 * PAGE:
            pytest.skip("this file system does not report holes")
        before = os.fstat(fd).st_blocks
        calls = _calls(monkeypatch)
        pieces = [(PAGE, b"a" * 10, 0),                    # in data
                  (16 * PAGE - 5, b"b" * 10, 0),           # straddles data and a hole
                  (20 * PAGE, b"c" * 10, 0),               # inside a hole
                  (40 * PAGE, b"d" * 10, 0),               # in data
                  (47 * PAGE, b"e" * 2 * PAGE, 0),         # runs into the last hole
                  (63 * PAGE, b"f" * 2 * PAGE, 0)]         # past the end: clipped
        journal.reserve(fd, pieces, size)
        assert calls == [(16 * PAGE - 5, 10), (20 * PAGE, 10), (47 * PAGE, 2 * PAGE),
                         (63 * PAGE, PAGE)]
        # the blocks are there now (fallocated: ext4 still reports them as holes)
        assert (os.fstat(fd).st_blocks - before) * 512 >= 4 * PAGE
    finally:
        os.close(fd)


def test_many_holes_allocate_under_every_piece(tmp_path, monkeypatch):
    size = 64 * PAGE
    fd = _sparse(tmp_path / "f", size, [(k * PAGE, k * PAGE + 1) for k in range(0, 64, 2)])
    try:
        monkeypatch.setattr(journal, "_MAX_HOLES", 4)
        calls = _calls(monkeypatch)
        pieces = [(k * PAGE, b"x", 0) for k in range(0, 64, 2)]   # all in data
        journal.reserve(fd, pieces, size)
        assert len(calls) == len(pieces)
    finally:
        os.close(fd)
