"""Property: whatever route writes the memory between incremental saves, every load equals memory.

Routes: numpy assignment, torch in-place operations, ``ctypes.memmove`` and
``memset``, ``readinto`` and ``os.preadv`` from a file (the kernel writes),
another thread, ``madvise(MADV_DONTNEED)`` (private anonymous pages read zero
again: the kernel "writes" zeros), and a fork child writing through shared
memory. Each example runs under one tracking mode (write protection, the
page-checksum fallback, plain comparison) on one kind of memory, saves after
random writes, and loads (verified, plain and memory-mapped) after each save.
"""

from __future__ import annotations

import ctypes
import importlib.util
import mmap
import os
import tempfile
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import namedschema
from namedschema.buffer import buffer_from_example
from namedschema.checkpoint import _incremental as incremental
from namedschema.checkpoint import _storage as pages
from namedschema.checkpoint import _tracking as tracking_module
from tests.helpers import examples

pytestmark = [pytest.mark.skipif(not pages.available(), reason="needs Linux"), pytest.mark.slow]

S = namedschema.NamedArrayTupleSchema("S", "obs reward")
ROWS = 400                    # obs: 400 x 3000 bytes = 1.2 MB (owned memory from 1 MiB)
ROW = 3000
ROUTES = ("numpy", "torch", "ctypes", "memset", "readinto", "preadv", "thread", "dontneed",
          "fork_shared")
# torch is optional: without it the torch route is skipped (parametrized) or not drawn.
HAS_TORCH = importlib.util.find_spec("torch") is not None
DRAWN_ROUTES = ROUTES if HAS_TORCH else tuple(r for r in ROUTES if r != "torch")
SOURCES = ("buffer_from_example", "np_zeros", "shared", "mmap_c")


def _make(source: str, path: str):
    example = S(np.zeros(ROW, np.uint8), np.float32(0))
    if source == "buffer_from_example":
        return buffer_from_example(example, ROWS)
    if source == "shared":
        return buffer_from_example(example, ROWS, share_memory=True)
    buf = S(np.zeros((ROWS, ROW), np.uint8), np.zeros(ROWS, np.float32))
    if source == "mmap_c":
        namedschema.save(buf, path)
        return namedschema.load(path, mmap_mode="c")
    return buf


def _write(buf, route: str, row: int, value: int, scratch: str, source: str) -> None:
    obs = buf.obs
    n = int(value % 7 + 1) * 500          # bytes, within one row or across two
    start = row * ROW + (value * 37) % ROW
    n = min(n, obs.size - start)
    flat = obs.reshape(-1)
    address = flat.__array_interface__["data"][0] + start
    data = np.full(n, value, np.uint8)
    if route == "numpy":
        flat[start:start + n] = value
        buf.reward[row] += 1
    elif route == "torch":
        import torch
        torch.from_numpy(flat[start:start + n]).add_(value or 1)
    elif route == "ctypes":
        ctypes.memmove(address, data.ctypes.data, n)
    elif route == "memset":
        ctypes.memset(address, value, n)
    elif route in ("readinto", "preadv"):
        with open(scratch, "wb") as f:
            f.write(data.tobytes())
        with open(scratch, "rb", buffering=0) as f:
            if route == "readinto":
                f.readinto(memoryview(flat[start:start + n]))
            else:
                os.preadv(f.fileno(), [memoryview(flat[start:start + n])], 0)
    elif route == "thread":
        t = threading.Thread(target=np.copyto, args=(flat[start:start + n], data))
        t.start()
        t.join()
    elif route == "dontneed":
        if source != "buffer_from_example":
            return  # only our own anonymous mappings may be dropped: they read zero again
        lo = address + (-address % mmap.PAGESIZE)
        hi = min(lo + 3 * mmap.PAGESIZE, flat.__array_interface__["data"][0] + flat.size)
        hi = hi // mmap.PAGESIZE * mmap.PAGESIZE
        if hi > lo:
            libc = ctypes.CDLL(None)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            assert libc.madvise(lo, hi - lo, 4) == 0
    elif route == "fork_shared":
        before = flat.copy()
        pid = os.fork()
        if pid == 0:
            try:
                flat[start:start + n] = value
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        if source != "shared":  # a private buffer: the child's write stays the child's
            assert np.array_equal(flat, before)


def _check(buf, path: str) -> None:
    back = namedschema.load(path, verify=True)
    assert np.array_equal(back.obs, buf.obs) and np.array_equal(back.reward, buf.reward)
    mapped = namedschema.load(path, mmap_mode="r")
    assert np.array_equal(mapped.obs, buf.obs)


steps = st.lists(st.one_of(
    st.tuples(st.sampled_from(DRAWN_ROUTES), st.integers(0, ROWS - 1), st.integers(0, 255)),
    st.just(("save", 0, 0))), min_size=1, max_size=14)


@pytest.mark.parametrize("tracking", ["auto", "checksums", "compare"])
@settings(max_examples=examples(12), deadline=None)
@given(source=st.sampled_from(SOURCES), plan=steps)
def test_every_route_is_seen_by_the_next_save(tracking, source, plan):
    old = tracking_module._forced
    tracking_module._forced = None if tracking == "auto" else tracking
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "ckpt.nsb")
            buf = _make(source, path)
            buf.obs[:] = np.arange(buf.obs.size, dtype=np.uint64).reshape(buf.obs.shape) % 251
            namedschema.save(buf, path, incremental=True)
            for route, row, value in [*plan, ("save", 0, 0)]:
                if route == "save":
                    namedschema.save(buf, path, incremental=True)
                    incremental.wait(path)
                    _check(buf, path)
                else:
                    _write(buf, route, row, value, os.path.join(tmp, "scratch"), source)
            del buf
    finally:
        tracking_module._forced = old


@pytest.mark.parametrize("tracking", ["auto", "checksums"])
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("route", ROUTES)
def test_each_route_alone_is_seen(tmp_path, monkeypatch, tracking, source, route):
    """One write by one route between two incremental saves (no read in between)."""
    if route == "torch":
        pytest.importorskip("torch")
    monkeypatch.setattr(tracking_module, "_forced", None if tracking == "auto" else tracking)
    path = str(tmp_path / "ckpt.nsb")
    buf = _make(source, path)
    buf.obs[:] = 9
    namedschema.save(buf, path, incremental=True)
    namedschema.save(buf, path, incremental=True)   # tracking armed by an incremental save too
    _write(buf, route, 123, 200, str(tmp_path / "scratch"), source)
    namedschema.save(buf, path, incremental=True)
    incremental.wait(path)
    assert namedschema.inspect(path).last_save.kind == "incremental"
    _check(buf, path)
