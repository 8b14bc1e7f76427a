"""namedschema.ray.ShardedReplay on a real local Ray cluster (2 CPUs).

Sharding, sampling across shards, consistent checkpoints while writers run,
kills of a shard and of the driver, and restores onto other shard counts.
The cut protocol itself is tested without Ray in tests/ray/test_ray_shard.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import namedschema as ns  # noqa: E402
from namedschema.errors import FormatError  # noqa: E402
from namedschema.ray import ShardedReplay, ShardedReplayError  # noqa: E402

from . import ray_scenario  # noqa: E402

pytestmark = pytest.mark.subprocess  # a local Ray cluster: raylet and worker processes
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

Step = ns.NamedArrayTupleSchema("Step", "obs action reward")
EXAMPLE = Step(np.zeros(4, np.float32), np.int64(0), np.float32(0))


def batch(k, n=10, writer=0):
    """Rows whose ``action`` names (writer, call k, row)."""
    return Step(np.full((n, 4), k, np.float32), writer * 10**9 + k * 1000 + np.arange(n),
                np.full(n, k, np.float32))


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             object_store_memory=256 * 2**20, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()


def all_actions(replay):
    """Every stored row's action, through a restore-independent path: a huge sample."""
    shards = replay._shards
    out = []
    for s in shards:
        rows, _ = ray.get(s.rows.remote(0, 10**9))
        out.extend(rows.action.tolist())
    return sorted(out)


@pytest.mark.parametrize(("num_shards", "prioritized"), [(2, False), (4, True)])
def test_extend_sample_update(cluster, num_shards, prioritized):
    with ShardedReplay(EXAMPLE, 200, num_shards=num_shards, prioritized=prioritized,
                       seed=1) as r:
        assert r.capacity == 200 and r.num_shards == num_shards
        for k in range(12):
            r.extend(batch(k))
        r.add(Step(np.ones(4, np.float32), 7, 1.0))
        assert len(r) == 121
        got = r.sample(64)
        if prioritized:
            b, idx, w = got
            assert idx.shape == (64,) and w.dtype == np.float32 and w.max() <= 1.0
            r.update_priorities(idx, np.full(64, 3.0))
            with pytest.raises(IndexError):
                r.update_priorities(np.array([10**9]), np.array([1.0]))
        else:
            b = got
            with pytest.raises(TypeError, match="not prioritized"):
                r.update_priorities(np.array([0]), np.array([1.0]))
        assert b.obs.shape == (64, 4) and b.action.dtype == np.int64
        assert type(b) is Step    # the example's class, as ShardedReplay[Step, ...] claims
        # each row sampled is a stored row (obs, action, reward agree)
        k = b.action // 1000
        assert np.array_equal(b.obs[:, 0], np.where(b.action == 7, 1, k).astype(np.float32))
        # rows come from every shard
        assert len(set((b.action // 1000).tolist())) > num_shards


def test_prioritized_is_proportional_across_shards(cluster):
    with ShardedReplay(EXAMPLE, 400, num_shards=2, prioritized=True, alpha=1.0, seed=3) as r:
        for k in range(20):   # batches alternate between the two shards
            r.extend(batch(k, n=20))
        _, idx, _ = r.sample(400)
        rows_of_0 = np.unique(idx[idx < r._stride])
        # shard 0's rows get priority 9, shard 1's stay at 1: shard 0 holds 90% of the mass
        r.update_priorities(np.arange(200), np.full(200, 9.0))
        _, idx, w = r.sample(20000)
        share = np.mean(idx < r._stride)
        assert abs(share - 0.9) < 0.02, share
        assert len(rows_of_0) > 0
        # weights: (p / p_min) ** -beta over all shards, so 9 ** -0.4 for shard 0
        assert np.allclose(w[idx < 200], 9.0 ** -0.4) and np.allclose(w[idx >= 200], 1.0)


def test_checkpoint_restore_same_shards_continues_exactly(cluster, tmp_path):
    for prioritized in (False, True):
        r = ShardedReplay(EXAMPLE, 300, num_shards=3, prioritized=prioritized, seed=9)
        for k in range(40):   # wraps every shard's cursor
            r.extend(batch(k))
        if prioritized:
            _, idx, _ = r.sample(50)
            r.update_priorities(idx, np.linspace(0.2, 4, 50))
        info = r.checkpoint(tmp_path / str(prioritized))
        assert info.generation == 1 and sum(info.rows) == 300
        restored = ShardedReplay.restore(tmp_path / str(prioritized))
        assert len(restored) == len(r) == 300
        for _ in range(3):
            a, b = r.sample(40), restored.sample(40)
            if prioritized:
                assert all(np.array_equal(x, y) for x, y in zip(a[1:], b[1:], strict=True))
                a, b = a[0], b[0]
            assert np.array_equal(a.action, b.action)
        # writes after the restore go to the same shards as the original's
        for k in range(40, 45):
            r.extend(batch(k))
            restored.extend(batch(k))
        a, b = r.sample(64), restored.sample(64)
        if prioritized:
            a, b = a[0], b[0]
        assert np.array_equal(a.action, b.action)
        r.close()
        restored.close()


@pytest.mark.parametrize("new_shards", [1, 5])
def test_restore_onto_other_shard_counts(cluster, tmp_path, new_shards):
    r = ShardedReplay(EXAMPLE, 120, num_shards=3, prioritized=True, alpha=0.5, seed=2)
    for k in range(15):
        r.extend(batch(k))
    _, idx, _ = r.sample(30)
    r.update_priorities(idx, np.arange(1, 31, dtype=np.float64))
    r.checkpoint(tmp_path)
    before = all_actions(r)
    mass = sum(ray.get(s.stats.remote())[1] for s in r._shards)
    moved = ShardedReplay.restore(tmp_path, num_shards=new_shards)
    assert moved.num_shards == new_shards and moved.capacity == 120
    assert all_actions(moved) == before            # every row, once
    moved_mass = sum(ray.get(s.stats.remote())[1] for s in moved._shards)
    assert moved_mass == pytest.approx(mass, rel=1e-9)   # priorities carried over
    b, i, w = moved.sample(16)
    assert b.obs.shape == (16, 4) and w.max() <= 1.0
    moved.checkpoint(tmp_path)                     # a restored replay checkpoints again
    assert json.loads((tmp_path / "manifest.json").read_text())["generation"] == 2
    r.close()
    moved.close()


def test_compressed_checkpoint_restores_on_same_and_other_shard_counts(cluster, tmp_path):
    """checkpoint(compression="zstd"): every shard file compressed (its 24 KiB of obs and
    more); restore (checked files read whole, not mapped) and a reshard give every row."""
    pytest.importorskip("zstandard")
    r = ShardedReplay(EXAMPLE, 3000, num_shards=2, prioritized=True, seed=4)
    for k in range(300):
        r.extend(batch(k))
    r.checkpoint(tmp_path, compression="zstd")
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert all(ns.inspect(tmp_path / name).compressed for name in m["files"])
    before = all_actions(r)
    same = ShardedReplay.restore(tmp_path)
    assert all_actions(same) == before
    a, b = r.sample(40), same.sample(40)
    assert all(np.array_equal(x, y) for x, y in zip(a[1:], b[1:], strict=True))
    moved = ShardedReplay.restore(tmp_path, num_shards=3)
    assert all_actions(moved) == before
    for replay in (r, same, moved):
        replay.close()


@ray.remote
def writer_task(replay, writer, calls):
    for k in range(calls):
        replay.extend(batch(k, n=5, writer=writer))
    replay.flush()
    return writer


def test_checkpoint_while_writers_run_is_a_consistent_cut(cluster, tmp_path):
    """Each writer's calls in the checkpoint are a prefix 0..K of what it sent,
    although its calls went to different shards."""
    r = ShardedReplay(EXAMPLE, 10_000, num_shards=3, seed=4)
    tasks = [writer_task.remote(r, w, 120) for w in (1, 2)]
    infos = []
    for _ in range(4):
        time.sleep(0.05)
        infos.append(r.checkpoint(tmp_path))
    ray.get(tasks, timeout=120)
    assert [i.generation for i in infos] == [1, 2, 3, 4]
    restored = ShardedReplay.restore(tmp_path)
    actions = np.array(all_actions(restored))
    for w in (1, 2):
        calls = np.unique((actions[actions // 10**9 == w] % 10**9) // 1000)
        assert np.array_equal(calls, np.arange(len(calls))), (w, calls)
    restored.close()
    r.close()


def test_copies_cannot_checkpoint(cluster, tmp_path):
    r = ShardedReplay(EXAMPLE, 50, num_shards=2, seed=0)

    @ray.remote
    def try_checkpoint(replay, path):
        try:
            replay.checkpoint(path)
        except ShardedReplayError as exc:
            return str(exc)
        return "no error"

    assert "only the handle that made" in ray.get(try_checkpoint.remote(r, str(tmp_path)))
    r.close()


def test_killed_shard_fails_checkpoint_and_keeps_previous_generation(cluster, tmp_path):
    r = ShardedReplay(EXAMPLE, 90, num_shards=3, seed=6)
    for k in range(6):
        r.extend(batch(k))
    r.checkpoint(tmp_path)
    expect = ShardedReplay.restore(tmp_path)
    want = expect.sample(20).action
    expect.close()
    for k in range(6, 9):
        r.extend(batch(k))
    r.flush()
    ray.kill(r._shards[1])
    with pytest.raises(ShardedReplayError, match="shard actor died"):
        r.checkpoint(tmp_path)
    again = ShardedReplay.restore(tmp_path)
    assert json.loads((tmp_path / "manifest.json").read_text())["generation"] == 1
    assert np.array_equal(again.sample(20).action, want)
    again.close()


def test_shard_killed_during_checkpoint(cluster, tmp_path):
    r = ShardedReplay(EXAMPLE, 3000, num_shards=3, seed=8)
    for k in range(100):
        r.extend(batch(k, n=30))
    r.checkpoint(tmp_path)
    before = len(r)
    for k in range(100, 150):
        r.extend(batch(k, n=30))
    after = len(r)
    killer = threading.Timer(0.01, lambda: ray.kill(r._shards[2]))
    killer.start()
    try:
        r.checkpoint(tmp_path)
        generation = 2
    except ShardedReplayError:
        generation = 1
    killer.join()
    restored = ShardedReplay.restore(tmp_path)
    assert len(restored) == (after if generation == 2 else before)
    top = max(all_actions(restored)) // 1000
    assert top == (149 if generation == 2 else 99)
    restored.close()


def test_driver_killed_mid_checkpoint_leaves_a_whole_generation(cluster, tmp_path):
    """Killed as generation 2's checkpoint starts, with its shard files written but not
    its manifest, and with its manifest committed: a whole generation each time, the
    one the phase implies. The child says when it is at the phase (no sleeps)."""
    want = ray_scenario.expected(str(tmp_path / "uninterrupted"))
    for attempt, (pause, line_wanted, generations) in enumerate((
            (None, "CHECKPOINT2", {1, 2}),                       # somewhere in it
            ("before-manifest", "PAUSED before-manifest", {1}),
            ("after-manifest", "PAUSED after-manifest", {2}))):
        directory = tmp_path / f"killed{attempt}"
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        child = subprocess.Popen([sys.executable, "-m", "tests.ray.ray_scenario",
                                  str(directory), *([pause] if pause else [])], cwd=ROOT,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True, start_new_session=True)
        try:
            said = [line.strip() for line in _lines_until(child.stdout, line_wanted)]
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        assert said[-1:] == [line_wanted], said
        generation = json.loads((directory / "manifest.json").read_text())["generation"]
        assert generation in generations, (pause, generation)
        restored = ShardedReplay.restore(directory)
        assert ray_scenario.digest(restored) == want[generation]
        restored.close()


def _lines_until(stream, wanted: str):
    for line in stream:
        yield line
        if line.strip() == wanted:
            return


def test_shard_files_are_namedschema_checkpoints(committed):
    m = json.loads((committed / "manifest.json").read_text())
    for name in m["files"]:
        out = subprocess.run([sys.executable, "-m", "namedschema", "inspect",
                              str(committed / name)], capture_output=True, text=True,
                             cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
        assert "namedschema checkpoint" in out.stdout and "'storage': Step" in out.stdout


@pytest.fixture(scope="module")
def committed(cluster, tmp_path_factory):
    """A committed two-shard checkpoint directory (copied by each test that damages it)."""
    path = tmp_path_factory.mktemp("committed")
    r = ShardedReplay(EXAMPLE, 40, num_shards=2, seed=0)
    r.extend(batch(1))
    r.checkpoint(path)
    r.close()
    return path


@pytest.mark.parametrize("damage", [
    lambda m: m.update(files=["../../etc/passwd"] * len(m["files"])),
    lambda m: m.update(format="something else"),
    lambda m: m.update(capacities=[]),
    lambda m: m.update(rows=[10**12] * len(m["rows"])),
    lambda m: m.update(rng=[1, 2]),
    lambda m: m.update(version=99),
    lambda m: m.update(cut=[1]),
])
def test_hostile_manifest_is_refused(committed, tmp_path, damage):
    shutil.copytree(committed, tmp_path / "c")
    path = tmp_path / "c" / "manifest.json"
    m = json.loads(path.read_text())
    damage(m)
    path.write_text(json.dumps(m))
    with pytest.raises(FormatError):
        ShardedReplay.restore(tmp_path / "c")


def test_oversized_or_non_json_manifest_is_refused(committed, tmp_path):
    shutil.copytree(committed, tmp_path / "c")
    path = tmp_path / "c" / "manifest.json"
    path.write_bytes(b"[" * 100_000)
    with pytest.raises(FormatError, match="not JSON"):
        ShardedReplay.restore(tmp_path / "c")
    path.write_bytes(b" " * (5 << 20))
    with pytest.raises(FormatError, match="over"):
        ShardedReplay.restore(tmp_path / "c")


def test_bad_arguments(cluster):
    with pytest.raises(ValueError, match="capacity 2 is less than num_shards 3"):
        ShardedReplay(EXAMPLE, 2, num_shards=3)
    with pytest.raises(TypeError, match="num_shards must be an int"):
        ShardedReplay(EXAMPLE, 10, num_shards=2.0)
    with pytest.raises(FileNotFoundError, match="no manifest"):
        ShardedReplay.restore("/nonexistent-dir-for-test")


# -- issue 34, items 14-16: a restore sizes shards by the files, refuses files that
# disagree with the manifest, and verifies every row ----------------------------------

MARK = 4242.0     # obs value of the rows whose bytes a test damages


@pytest.fixture(scope="module")
def committed_prioritized(cluster, tmp_path_factory):
    path = tmp_path_factory.mktemp("committed_prioritized")
    r = ShardedReplay(EXAMPLE, 40, num_shards=2, prioritized=True, seed=0)
    r.extend(Step(np.full((10, 4), MARK, np.float32), np.arange(10), np.zeros(10, np.float32)))
    r.extend(batch(2))
    _, idx, _ = r.sample(8)
    r.update_priorities(idx, np.linspace(0.5, 3, 8))
    r.checkpoint(path)
    r.close()
    return path


def _edited_copy(source, target, **changes):
    shutil.copytree(source, target)
    path = target / "manifest.json"
    m = json.loads(path.read_text())
    m.update({k: v(m) if callable(v) else v for k, v in changes.items()})
    path.write_text(json.dumps(m))
    return target


def test_capacities_beyond_the_files_are_refused_before_any_shard_starts(
        committed, tmp_path, monkeypatch):
    # a 521-byte manifest made the shard actors allocate 703 MiB before failing
    directory = _edited_copy(committed, tmp_path / "c", capacities=[2**40, 2**40])
    assert (directory / "manifest.json").stat().st_size < 1024
    started = []
    monkeypatch.setattr(ShardedReplay, "_start", lambda self, args: started.append(args))
    for num_shards in (None, 3):
        with pytest.raises(FormatError, match="gives the shard 1099511627776 rows"):
            ShardedReplay.restore(directory, num_shards=num_shards)
    assert started == []     # no shard was built, so nothing was allocated


def test_a_shard_file_listed_twice_is_refused(committed, tmp_path):
    directory = _edited_copy(committed, tmp_path / "c",
                             files=lambda m: [m["files"][0]] * 2,
                             rows=lambda m: [m["rows"][0]] * 2)
    with pytest.raises(FormatError, match="listed twice or out of place"):
        ShardedReplay.restore(directory)


def test_a_prioritized_replay_never_comes_back_uniform(committed_prioritized, tmp_path):
    directory = _edited_copy(committed_prioritized, tmp_path / "c", prioritized=False)
    for num_shards in (None, 3):
        with pytest.raises(FormatError, match="would drop its priorities"):
            ShardedReplay.restore(directory, num_shards=num_shards)


@pytest.mark.parametrize("num_shards", [None, 3])
def test_a_damaged_shard_row_is_never_served(committed_prioritized, tmp_path, num_shards):
    shutil.copytree(committed_prioritized, tmp_path / "c")
    m = json.loads((tmp_path / "c" / "manifest.json").read_text())
    pattern = np.full(4, MARK, np.float32).tobytes()
    damaged = 0
    for name in m["files"]:
        path = tmp_path / "c" / name
        data = bytearray(path.read_bytes())
        at = data.find(pattern)
        if at >= 0:
            data[at + 2] ^= 0x10          # one bit of one row of obs
            path.write_bytes(bytes(data))
            damaged += 1
    assert damaged == 1
    with pytest.raises(FormatError, match="(?i)checksum|crc"):
        ShardedReplay.restore(tmp_path / "c", num_shards=num_shards)
    # the undamaged checkpoint restores and serves its rows
    restored = ShardedReplay.restore(committed_prioritized, num_shards=num_shards)
    batch_, _, _ = restored.sample(200)
    assert set(np.unique(batch_.obs).tolist()) <= {MARK, 2.0}
    restored.close()
