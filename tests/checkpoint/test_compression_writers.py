"""``compression=`` in every writer of the library: checked when given, before anything
is written, with save()'s messages under the writer's name (twins with compression:
tests/training/test_run_checkpoint.py, tests/rlpyt/test_pong_twins.py,
tests/training/test_sb3_resumable.py; kills: tests/checkpoint/test_background_kill.py)."""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import pytest

import namedschema
from namedschema.checkpoint import _compression as compression

BAD = [
    ("lz4", "compression must be None, 'zstd', \\('zstd', level\\) or 'auto', got 'lz4'"),
    (("zstd", 99), "compression level must be an int from -7 to 22, got 99"),
    (["zstd", 3], "compression must be None"),
]


def _writers(tmp_path):
    """``name -> call(compression)`` for every writer that takes the argument."""
    from namedschema.ray.sharded import ShardedReplay
    from namedschema.rlpyt.resume.runner import resumable as rlpyt_resumable
    from namedschema.sb3.resumable import resumable as sb3_resumable

    def run_checkpoint(value):
        namedschema.RunCheckpoint(tmp_path / "run.nsc", compression=value)

    def rlpyt(value):
        rlpyt_resumable(object(), tmp_path / "run.nsc", compression=value)

    def sb3(value):
        sb3_resumable(object(), tmp_path / "run.nsc", every_steps=1, compression=value)

    def sharded(value):   # the argument is checked before the replay is touched
        ShardedReplay.checkpoint(types.SimpleNamespace(_owner=True),  # type: ignore[arg-type]
                                 tmp_path / "replay", compression=value)

    return {"RunCheckpoint": run_checkpoint, "resumable": rlpyt, "sb3": sb3,
            "ShardedReplay.checkpoint": sharded}


@pytest.mark.parametrize("writer", ["RunCheckpoint", "resumable", "sb3",
                                    "ShardedReplay.checkpoint"])
@pytest.mark.parametrize("value, message", BAD)
def test_a_bad_compression_is_refused_naming_the_writer(tmp_path, writer, value, message):
    call = _writers(tmp_path)[writer]
    caller = "resumable" if writer == "sb3" else writer
    with pytest.raises(ValueError, match=f"^{caller}: {message}"):
        call(value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("writer", ["RunCheckpoint", "resumable", "sb3",
                                    "ShardedReplay.checkpoint"])
def test_zstd_without_zstandard_names_the_extra_and_auto_writes_raw(tmp_path, monkeypatch,
                                                                    writer):
    call = _writers(tmp_path)[writer]
    monkeypatch.setitem(sys.modules, "zstandard", None)   # import zstandard fails
    with pytest.raises(ModuleNotFoundError, match="pip install 'namedschema\\[zstd\\]'"):
        call("zstd")
    if writer == "RunCheckpoint":
        call("auto")                      # accepted: its checkpoints are written raw
        ckpt = namedschema.RunCheckpoint(tmp_path / "run.nsc", compression="auto")
        ckpt.track(obs=np.zeros((64, 84, 84), np.uint8)).save(0)
        assert not namedschema.inspect(tmp_path / "run.nsc").compressed


def test_run_checkpoint_auto_compresses_frames_and_restores(tmp_path):
    pytest.importorskip("zstandard")
    frames = np.zeros((64, 84, 84), np.uint8)
    frames[:, 10:20, 30:40] = np.arange(64, dtype=np.uint8)[:, None, None]
    weights = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    state = {"frames": frames, "weights": weights}

    class Holder:
        def state_dict(self):
            return state

        def load_state_dict(self, new):
            for key, value in new.items():
                state[key][...] = value

    path = tmp_path / "run.nsc"
    ckpt = namedschema.RunCheckpoint(path, compression="auto", global_rngs=False)
    ckpt.track(holder=Holder()).save(3)
    ckpt.wait()
    codecs = {f.path.rsplit(".", 1)[-1]: f.codec for f in namedschema.inspect(path).fields}
    assert codecs == {"frames": "zstd", "weights": None}, codecs
    kept = {k: v.copy() for k, v in state.items()}
    for value in state.values():
        value[...] = 0
    again = namedschema.RunCheckpoint(path, compression="auto", global_rngs=False, quiet=True)
    assert again.track(holder=Holder()).restore() and again.step == 3
    assert all(np.array_equal(state[k], kept[k]) for k in state)


def test_mappable_says_whether_a_file_can_be_mapped(tmp_path):
    pytest.importorskip("zstandard")
    from namedschema.checkpoint._read import mappable
    raw, packed = tmp_path / "raw.nsb", tmp_path / "packed.nsb"
    namedschema.save({"x": np.zeros(100_000, np.uint8)}, raw)
    namedschema.save({"x": np.zeros(100_000, np.uint8)}, packed, compression="zstd")
    assert mappable(raw) == "r" and mappable(raw, "c") == "c"
    assert mappable(packed) is None
    assert compression.AUTO_DTYPES == {"|u1", "|i1", "|b1"}


def test_check_resume_audit_reads_compressed_checkpoints(tmp_path):
    """check-resume's recorder reads each checkpoint back: a compressed one too (it cannot
    be mapped), recording its content rather than an audit error."""
    pytest.importorskip("zstandard")
    import json

    from namedschema.training.audit import Recorder
    path = str(tmp_path / "run.nsc")
    namedschema.save({"step": 7, "frames": np.zeros((64, 84, 84), np.uint8)}, path,
                     compression="zstd")
    recorder = Recorder(str(tmp_path / "events.jsonl"))
    recorder.record_file(7, path, lambda data: {"frames": data["frames"]},
                         lambda data: int(data["step"]))
    recorder.flush()
    with open(tmp_path / "events.jsonl") as f:
        kinds = [json.loads(line)["event"] for line in f]
    assert kinds == ["start", "save-end", "checkpoint"], kinds
