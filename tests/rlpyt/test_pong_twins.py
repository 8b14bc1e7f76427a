"""Twin tests on real Atari Pong: rlpyt's own AtariEnv, SerialSampler, DQN, frame buffer.

rlpyt's unmodified ``AtariEnv`` plays Pong through the atari_py adapter over
ale-py. For ``MinibatchRl`` (config ``pong``) and ``MinibatchRlEval``
(``pong_eval``), with a prioritized frame buffer of 1000 steps (it wraps at
iteration 125, epsilon reaches its final value there too) and 240
iterations, four runs in fresh processes:

* rlpyt alone: no namedschema imported while it trains;
* ``resumable`` never killed: equal to rlpyt alone in everything;
* ``resumable`` SIGKILLed at iteration 130 (checkpoints every 50);
* the same script again: resumes at 100 and from there reproduces rlpyt
  alone's sampler batches, replay batches, losses, logged diagnostics
  (evaluation returns included) and final state.

``resumable`` is called without ``patch_rlpyt()`` (one call), with
namedschema imported before rlpyt (``pong``) or after it (``pong_eval``), and
says nothing about AtariEnv. The comparison of final emulator states leaves
out ALE's RNG, which ALE seeds from the clock (tests/rlpyt/test_atari_state.py
checks that a resume restores it).
"""

from __future__ import annotations

import pytest

from tests.rlpyt.test_twins import assert_same_from, drive

# tests/conftest.py skips rlpyt-marked tests without RLPYT_SRC (and fails them in CI).
pytestmark = [pytest.mark.rlpyt, pytest.mark.subprocess]

_ALONE: dict = {}
ORDER = {"pong": "namedschema-first", "pong_eval": "rlpyt-first"}


def alone(tmp_path_factory, config):
    if config not in _ALONE:
        _ALONE[config] = drive(tmp_path_factory.mktemp(f"alone-{config}"), "alone", config,
                               "--alone")
    return _ALONE[config]


@pytest.mark.parametrize("config", ["pong", "pong_eval"])
def test_pong_serial_sampler_resumes_equal_to_rlpyt_alone(tmp_path, tmp_path_factory, config):
    """Never killed and killed-then-resumed runs both equal rlpyt alone, bit for bit."""
    one_call = ("--no-patch", "--import-order", ORDER[config])
    reference = alone(tmp_path_factory, config)
    kinds = {e[1].split(":")[0] for e in reference["events"]}
    assert {"batch", "replay", "loss", "log"} <= kinds
    if config == "pong_eval":
        assert any(e[1] == "log:ReturnAverage" for e in reference["events"])
    assert reference["final"]["eps_sample"] == 0.05          # past the epsilon schedule

    whole = drive(tmp_path, "whole", config, "--ckpt", tmp_path / "whole.nsc",
                  "--every", 50, *one_call)
    assert whole["notes"] == [] and whole["saves"] == 5     # 50, 100, 150, 200, end
    assert whole["events"] == reference["events"]
    assert whole["final"] == reference["final"]

    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", config, "--ckpt", ckpt, "--every", 50, "--kill-at-itr", 130,
          *one_call, expect_kill=True)
    resumed = drive(tmp_path, "resumed", config, "--ckpt", ckpt, "--every", 50, *one_call)
    assert resumed["notes"] == []                            # nothing said about AtariEnv
    assert_same_from(reference, resumed, 100)
    assert resumed["final"]["views"] == [True, True]


@pytest.mark.parametrize("compression", ["zstd", "auto"])
def test_pong_with_compressed_checkpoints_resumes_equal_to_rlpyt_alone(
        tmp_path, tmp_path_factory, compression):
    """rlpyt's example_5 shape (AtariEnv, SerialSampler, DQN, prioritized frame buffer,
    MinibatchRl) with compressed checkpoints: killed at 130, resumed at 100, it equals
    rlpyt alone; the file's frames are stored compressed (with "auto", its float
    arrays raw)."""
    pytest.importorskip("zstandard")
    import namedschema
    options = ("--every", 50, "--no-patch", "--compression", compression)
    reference = alone(tmp_path_factory, "pong")
    ckpt = tmp_path / "run.nsc"
    drive(tmp_path, "killed", "pong", "--ckpt", ckpt, "--kill-at-itr", 130, *options,
          expect_kill=True)
    info = namedschema.inspect(ckpt)
    codecs = {(f.dtype, f.codec) for f in info.fields if f.nbytes >= 4096}
    assert ("uint8", "zstd") in codecs, codecs
    if compression == "auto":
        one_byte = ("uint8", "torch.uint8", "int8", "bool", "torch.bool")
        assert ("torch.float32", None) in codecs, codecs
        assert all((codec == "zstd") == (dtype in one_byte) for dtype, codec in codecs), codecs
    else:
        assert ("torch.float32", "zstd") in codecs, codecs
    assert info.stored_bytes < info.data_bytes / 3
    resumed = drive(tmp_path, "resumed", "pong", "--ckpt", ckpt, *options)
    assert resumed["notes"] == []
    assert_same_from(reference, resumed, 100)


def test_pong_with_the_patch_equals_rlpyt_alone(tmp_path, tmp_path_factory):
    """With patch_rlpyt() as well (the old two calls), the run is still rlpyt's own."""
    run = drive(tmp_path, "patched", "pong", "--ckpt", tmp_path / "run.nsc", "--every", 100)
    reference = alone(tmp_path_factory, "pong")
    assert run["notes"] == []
    assert run["events"] == reference["events"]
    assert run["final"] == reference["final"]
