"""check-resume's audit digests stay exact while costing only what changed (issue 31).

The audit record of a checkpoint digests every array of the file; piece
digests are kept between saves of a file and only the pieces that an
incremental save rewrote are digested again. Each test compares the record
with the digest of a fresh load of the file (nothing kept) and checks how
many bytes were digested: a stale piece digest would show as a record that
differs from the fresh one, a lost rewrite list as a whole-file digest.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import namedschema
from namedschema.checkpoint import _background as background
from namedschema.checkpoint import _tracking as tracking
from namedschema.checkpoint import _tracking as writelog
from namedschema.testing.compare import first_difference, reference_records
from namedschema.testing.runs import Event, Life
from namedschema.training import audit
from tests.helpers import examples, run_fresh

CHUNK = audit.CHUNK


def _named(data):
    return {"replay": data["replay"], "small": data["small"]}


class Audited:
    """Saves ``{"step", "replay", "small"}`` to one file and records each checkpoint."""

    def __init__(self, tmp_path, route):
        self.route = route
        self.path = str(tmp_path / "run.nsc")
        self.log = str(tmp_path / "audit.jsonl")
        self.rec = audit.Recorder(self.log)

    def save(self, step, replay, small, incremental=True):
        self.rec.save_begin(step)
        state = {"step": step, "replay": replay, "small": small}
        if self.route == "foreground":
            namedschema.save(state, self.path, incremental=incremental)
        else:
            namedschema.save(state, self.path, incremental=incremental, background=True)
        return self.record(step)

    def record(self, step):
        self.rec.record_file(step, self.path, _named, lambda d: int(d["step"]))
        self.rec.flush()
        with open(self.log) as f:
            last = json.loads(f.readlines()[-1])
        assert last["event"] == "checkpoint" and last["step"] == step, last
        return last

    def fresh(self):
        """The digests of the file as it is, computed from nothing kept."""
        data = namedschema.load(self.path, mmap_mode="r")
        try:
            return audit.digest_objects(_named(data))
        finally:
            del data


# The writer-thread and snapshot-child routes take seconds each: the quick run keeps the
# small and foreground ones, CI runs all four.
ROUTES = [pytest.param("thread", marks=pytest.mark.slow),
          pytest.param("fork", marks=pytest.mark.slow), "small", "foreground"]


@pytest.fixture(params=ROUTES)
def route(request, monkeypatch):
    if request.param == "thread" and tracking.mode() != "writeprotect":
        pytest.skip("write protection is not available here (the writer-thread route)")
    if request.param == "fork":     # incremental saves under checksums: a snapshot child
        monkeypatch.setattr(tracking, "_forced", "checksums")
    return request.param


def _buffer(route, rows=None):
    rows = rows or (256 if route == "small" else 4096)   # 1 MiB or 16 MiB of float32
    assert (rows * 1024 * 4 <= background.SMALL_STATE) == (route == "small")
    return np.random.default_rng(0).standard_normal((rows, 1024)).astype(np.float32)


def test_an_incremental_save_that_changes_one_row_digests_only_its_pieces(tmp_path, route):
    """One byte of one row changes: the record names the leaf, equals a fresh digest of
    the file, and only the piece holding the row was digested again."""
    run = Audited(tmp_path, route)
    replay = {"obs": _buffer(route), "done": np.zeros(4096, np.bool_)}
    small = {"w": np.arange(10.0)}
    first = run.save(0, replay, small)
    assert first["objects"] == run.fresh()
    assert first["digested"] >= replay["obs"].nbytes          # all of it, once
    row = len(replay["obs"]) // 2
    replay["obs"].view(np.uint8)[row, 1000] ^= 0x10             # one byte, in the middle
    changed = run.save(1, replay, small)
    assert changed["objects"] == run.fresh()
    leaves, before = changed["objects"]["replay"]["leaves"], first["objects"]["replay"]["leaves"]
    assert [p for p in leaves if leaves[p] != before[p]] == ["obs"]
    assert changed["objects"]["small"] == first["objects"]["small"]
    assert 0 < changed["digested"] <= 2 * CHUNK, changed["digested"]
    same = run.save(2, replay, small)                         # nothing changed
    assert same["objects"] == changed["objects"] and same["digested"] == 0
    replay["obs"].view(np.uint8)[row, 1000] ^= 0x10             # back as it was at step 0
    back = run.save(3, replay, small)
    assert back["objects"] == first["objects"] == run.fresh()
    assert 0 < back["digested"] <= 2 * CHUNK


@pytest.mark.parametrize("how", ["plain", "too-much"])
def test_a_full_save_between_records_is_digested_whole(tmp_path, route, how):
    """A full save (a new file) breaks the chain: everything is digested again. (Too
    much changed: the new file has the same layout, so the same offsets.)"""
    run = Audited(tmp_path, route)
    replay = {"obs": _buffer(route)}
    run.save(0, replay, {})
    replay["obs"][3, 3] += 1.0
    if how == "too-much":
        replay["obs"][len(replay["obs"]) // 2:] += 1.0
    full = run.save(1, replay, {}, incremental=how == "too-much")
    assert full["objects"] == run.fresh()
    assert full["digested"] >= replay["obs"].nbytes


@pytest.mark.subprocess
def test_a_change_by_another_process_is_not_missed(tmp_path, route):
    """Another process rewrites a piece in place (its save is not in this process's
    rewrites): the chain of checkpoint ids breaks and the record shows the change."""
    run = Audited(tmp_path, route)
    replay = {"obs": _buffer(route)}
    first = run.save(0, replay, {})
    run_fresh(f"""
        import numpy as np, namedschema
        data = namedschema.load({run.path!r})
        data["replay"]["obs"][7, 7] += 1.0
        namedschema.save(data, {run.path!r}, incremental=True)
        from namedschema.checkpoint._incremental import fallback_reason
        assert fallback_reason({run.path!r}) is None
        """)
    again = run.record(0)
    assert again["objects"] == run.fresh() != first["objects"]
    assert again["digested"] >= replay["obs"].nbytes


def test_a_save_to_a_resized_buffer_is_digested_right(tmp_path):
    """Arrays that move in the file (a relaid incremental save) are digested where they
    now are."""
    run = Audited(tmp_path, "foreground")
    replay = {"obs": _buffer("thread"), "extra": np.ones(3 * CHUNK // 8)}
    run.save(0, replay, {})
    replay["extra"] = np.ones(5 * CHUNK // 8)
    moved = run.save(1, replay, {})
    assert moved["objects"] == run.fresh()


@settings(max_examples=examples(12), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["bytes", "rows", "none", "full", "grow"]),
                              st.lists(st.integers(0, 2**20 - 1), min_size=1, max_size=6)),
                    min_size=1, max_size=6),
       background_save=st.booleans())
def test_every_record_equals_a_fresh_digest(tmp_path_factory, ops, background_save):
    """Random changes and saves (in place, full, arrays growing): each record equals the
    digest of the file computed from nothing kept."""
    tmp = tmp_path_factory.mktemp("audit")
    run = Audited(tmp, "thread" if background_save else "foreground")
    replay = {"obs": np.zeros((256, 1024), np.float32), "tail": np.zeros(CHUNK + 7, np.uint8)}
    small = {"w": np.zeros(3)}
    run.save(0, replay, small)
    for step, (kind, positions) in enumerate(ops, start=1):
        flat = replay["obs"].reshape(-1).view(np.uint8)
        if kind == "bytes":
            for p in positions:
                flat[p] ^= 0xFF
        elif kind == "rows":
            replay["obs"][[p % 256 for p in positions]] += 1.0
            replay["tail"][positions[0] % replay["tail"].size] += 1
        elif kind == "grow":
            replay["tail"] = np.concatenate([replay["tail"], np.ones(positions[0] % 4096,
                                                                      np.uint8)])
        got = run.save(step, replay, small, incremental=kind != "full")
        assert got["objects"] == run.fresh()


@given(size=st.sampled_from([CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5]),
       where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
@settings(max_examples=examples(40), deadline=None)
def test_a_difference_in_any_byte_changes_the_digest(size, where, bit):
    """Piece by piece or whole, any one flipped bit changes the array's digest; equal
    bytes with another dtype or shape differ too."""
    data = np.random.default_rng(size).integers(0, 256, size, np.uint8)
    before = audit.digest_objects({"a": {"x": data}})
    for position in {p for p in (int(where * size), 0, CHUNK - 1, CHUNK, size - 1) if p < size}:
        flipped = data.copy()
        flipped[position] ^= 1 << bit
        after = audit.digest_objects({"a": {"x": flipped}})
        assert after["a"]["leaves"]["x"] != before["a"]["leaves"]["x"], position
        assert after["a"]["digest"] != before["a"]["digest"]
    assert audit.digest_objects({"a": {"x": data.copy()}}) == before
    if size % 2 == 0:
        assert audit.digest_objects({"a": {"x": data.view(np.uint16)}}) != before
        assert audit.digest_objects({"a": {"x": data.reshape(2, -1)}}) != before


TWIN = r"""
import json, os, random
import numpy as np
import namedschema

random.seed(0)
np.random.seed(0)

flip = int(os.environ["FLIP"])          # the step at which one byte is flipped (-1: none)
rng = np.random.default_rng(0)
replay = rng.standard_normal((16384, 1024)).astype(np.float32)      # 64 MiB
weights = np.zeros(256)
ckpt = namedschema.RunCheckpoint("run.nsc", every_steps=4, quiet=True)
ckpt.track(replay=replay, weights=weights, rng=rng)
for step in range(20):
    weights += rng.standard_normal(256)
    replay[step] = weights[0]
    if step == flip:
        replay.view(np.uint8)[8192, 2048] ^= 0x01                # the middle of the buffer
    if ckpt.maybe_save(step):
        ckpt.wait()                     # ... and its audit record
        with open(os.environ["NAMEDSCHEMA_AUDIT"]) as f:
            last = json.loads(f.readlines()[-1])
        assert last["event"] == "checkpoint" and last["step"] == step, last
        if step >= 4:                   # after the first: only what changed
            assert last["digested"] <= 4 * 65536, last["digested"]
"""


def _life(log):
    with open(log) as f:
        raw = [json.loads(line) for line in f]
    events = [Event(r["event"], r.get("step"), r["pid"], r["t"], r.get("objects"))
              for r in raw]
    return Life(pid=raw[0]["pid"], events=events)


@pytest.mark.subprocess
def test_one_byte_in_the_middle_of_a_large_buffer_is_named(tmp_path):
    """Two runs of a RunCheckpoint loop (fresh interpreters) that differ in one byte of
    a 64 MiB buffer from step 9 on: the first differing record is step 12's, naming
    the buffer; the other objects are equal."""
    logs = {}
    for name, flip in (("same", -1), ("flipped", 9)):
        folder = tmp_path / name
        folder.mkdir()
        logs[name] = str(folder / "audit.jsonl")
        run_fresh(f"import os; os.chdir({str(folder)!r})\n" + TWIN + "\n",
                  env={"NAMEDSCHEMA_AUDIT": logs[name], "FLIP": str(flip)}, timeout=300)
    ref = reference_records(_life(logs["same"]))
    assert sorted(ref.by_step) == [0, 4, 8, 12, 16] and ref.end is not None
    assert first_difference(ref, [_life(logs["same"])])[0] is None
    diff, _compared, _ = first_difference(ref, [_life(logs["flipped"])])
    assert diff is not None and diff.step == 12 and diff.record == "checkpoint"
    assert diff.objects == ["replay"] and diff.equal == ["weights", "rng", "global_rngs"]
    assert diff.describe().startswith("step 12 in `replay` (array")


# --------------------------------------------------------------------------
# The rewrites log
# --------------------------------------------------------------------------

def _stat(path):
    return os.stat(path)


def test_rewrites_are_kept_only_for_watched_files(tmp_path):
    path = str(tmp_path / "f.nsc")
    open(path, "wb").close()
    st_ = _stat(path)
    writelog.note(os.path.realpath(path), st_, "a", "b", [(0, b"xx")])
    assert writelog.take(path) is None                      # not watched: unknown
    writelog.watch(path)
    try:
        assert writelog.take(path) == []
        writelog.note(os.path.realpath(path), st_, "a", "b", [(10, b"xyz"), (0, b"h")], 20)
        (r,) = writelog.take(path)
        assert (r.before, r.after) == ("a", "b")
        assert r.ranges == ((0, 1), (10, 13), (20, 1 << 62))
        assert r.identity == (st_.st_dev, st_.st_ino)
        assert writelog.take(path) == []
        for i in range(writelog.MAX_PENDING + 1):
            writelog.note(os.path.realpath(path), st_, str(i), str(i + 1), [(0, b"h")])
        assert writelog.take(path) is None                   # too many: unknown
        assert writelog.take(path) == []
        writelog.add(path, None)                             # a save that could not say
        assert writelog.take(path) is None
        pid = os.fork()
        if pid == 0:                      # a fork child starts with nothing noted
            writelog.note(os.path.realpath(path), st_, "c", "d", [(0, b"h")])
            os._exit(0 if len(writelog.take(path) or ()) == 1 else 1)
        writelog.note(os.path.realpath(path), st_, "x", "y", [(0, b"h")])
        assert os.waitpid(pid, 0)[1] == 0
        assert [r.after for r in writelog.take(path)] == ["y"]
    finally:
        writelog.unwatch(path)


def test_kept_digests_follow_only_an_unbroken_chain(tmp_path):
    """FileDigests keeps piece digests across rewrites that chain from the state it
    digested to the state found; any gap drops them."""
    files = audit.FileDigests(str(tmp_path / "f.nsc"))
    ident = (1, 2)

    def rw(before, after, *ranges):
        return writelog.Rewrite(ident, before, after, tuple(ranges))

    def kept():
        pieces = files.pieces(1000, 4 * CHUNK)
        pieces.current[:] = True
        return pieces
    files.settle(ident, "a", [])
    pieces = kept()
    files.settle(ident, "c", [rw("a", "b", (1000 + CHUNK, 1001 + CHUNK)),
                              rw("b", "c", (0, 1001))])
    assert pieces.current.tolist() == [False, False, True, True]
    pieces = kept()
    files.settle(ident, "c", [])
    assert files.pieces(1000, 4 * CHUNK) is pieces and pieces.current.all()
    for broken in ([rw("x", "d")], None, [rw("c", "d")]):   # a gap; unknown; not there
        kept()
        files.settle(ident, "e", broken)
        assert not files.pieces(1000, 4 * CHUNK).current.any()
        files.settle(ident, "c", [])
    kept()
    files.settle((1, 3), "c", [])                           # another file
    assert not files.pieces(1000, 4 * CHUNK).current.any()
    writelog.unwatch(files.path)
