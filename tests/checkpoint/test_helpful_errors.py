"""Errors that help, and metadata read as plain data (hardening round 3, issue 22, items 8, 2).

Conjugate-view tensors, datetime64 buffers named with their dtype, huge
``leading_dims`` as a typed error, files that are not checkpoints said for
what they look like; plus the plain-data metadata that lets a reader refuse a
file of the wrong kind before unpickling anything.
"""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

import namedschema
from namedschema.buffer import buffer_from_example
from namedschema.errors import (
    BufferShapeError,
    BufferSizeError,
    FormatError,
    NotDataError,
    StructureMismatchError,
    UnexpectedKindError,
)
from tests.figures import record


def test_conjugate_and_negative_view_tensors_are_named(tmp_path):
    """8: before, torch's raw RuntimeError ('Can't call numpy() on Tensor that has conjugate bit set')."""
    torch = pytest.importorskip("torch")
    z = torch.arange(4, dtype=torch.float32).to(torch.complex64) * (1 + 2j)
    for value, what in ((z.conj(), "conjugate view"), (z.conj().imag, "negative view")):
        for allow_pickle in (False, True):
            with pytest.raises(StructureMismatchError, match=what) as info:
                namedschema.save({"z": value}, tmp_path / "c.nsb", allow_pickle=allow_pickle)
            assert "resolve_" in str(info.value) and "z" in str(info.value)
    namedschema.save({"z": z.conj().resolve_conj()}, tmp_path / "c.nsb")
    assert torch.equal(namedschema.load(tmp_path / "c.nsb")["z"], z.conj())


def test_datetime64_buffer_is_named_with_its_dtype(tmp_path):
    """8: before, '(numpy.ndarray) is not data' without saying why."""
    with pytest.raises(NotDataError, match=r"dtype datetime64\[ns\] is not one of"):
        namedschema.save({"stamps": np.zeros(3, "datetime64[ns]")}, tmp_path / "d.nsb")
    with pytest.raises(NotDataError, match=r"timedelta64"):
        namedschema.save([np.timedelta64(3, "s")], tmp_path / "d.nsb")


@pytest.mark.parametrize("share_memory", [False, True])
def test_huge_leading_dims_are_a_typed_error(share_memory):
    """8: before, OverflowError for (10**10, 10**10) and OSError ENOMEM for 10**15."""
    Step = namedschema.NamedArrayTupleSchema("Step", "obs reward")
    example = Step(np.zeros((84, 84), np.uint8), 0.0)
    for leading, words in (((10**10, 10**10), "more than numpy can address"),
                           (10**15, "failed")):
        with pytest.raises(BufferSizeError, match=words) as info:
            buffer_from_example(example, leading, share_memory=share_memory)
        assert isinstance(info.value, MemoryError) and isinstance(info.value, BufferShapeError)
        assert "bytes" in str(info.value)


def _npy(obj, **kw):
    out = io.BytesIO()
    np.save(out, obj, **kw)
    return out.getvalue()


def _torch_zip():
    torch = pytest.importorskip("torch")
    out = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, out)
    return out.getvalue()


def _npz():
    out = io.BytesIO()
    np.savez(out, a=np.arange(3))
    return out.getvalue()


FOREIGN = {
    "pickle protocol 2": (lambda: pickle.dumps({"lr": 1e-3}, protocol=2), "Python pickle"),
    "pickle protocol 4": (lambda: pickle.dumps({"lr": 1e-3}, protocol=4), "Python pickle"),
    "pickle protocol 5": (lambda: pickle.dumps(list(range(100)), protocol=5), "Python pickle"),
    "npy": (lambda: _npy(np.arange(10)), "NumPy .npy"),
    "npy of objects": (lambda: _npy(np.array([{}], object), allow_pickle=True), "NumPy .npy"),
    "npz": (_npz, "zip archive"),
    "torch.save": (_torch_zip, "zip archive"),
    "hdf5": (lambda: b"\x89HDF\r\n\x1a\n" + bytes(512), "HDF5"),
    "yaml text": (lambda: b"lr: 0.001\ndiscount: 0.99\n" * 10, "text file"),
    "json text": (lambda: b'{"lr": 0.001}', "text file"),
    "short text": (lambda: b"hi", "text file"),
    "empty": (lambda: b"", "empty file"),
    "gzip": (lambda: b"\x1f\x8b\x08\x00" + bytes(40), "gzip"),
}


@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_files_that_are_not_checkpoints_are_said_for_what_they_look_like(tmp_path, kind):
    """8: before, 'header length 4824827008 is implausible' with no hint of what the file is."""
    make, words = FOREIGN[kind]
    path = tmp_path / "model.bin"
    path.write_bytes(make())
    for call in (namedschema.load, namedschema.inspect,
                 lambda p: namedschema.load(io.BytesIO(p.read_bytes()))):
        with pytest.raises(FormatError) as info:
            call(path)
        assert f"it looks like {'an' if words[0] in 'aeiouEH' else 'a'} {words}" in \
            str(info.value) or words in str(info.value), str(info.value)
    record("round3.foreign_files_named", 1)


def test_a_real_checkpoint_truncated_is_not_called_something_else(tmp_path):
    """8: sniffing never mislabels our own damaged files (their length may start with 0x80)."""
    for n in (0x380, 0x480, 64, 4000):
        path = tmp_path / f"c{n}.nsb"
        namedschema.save({"pad": "x" * n, "a": np.arange(5)}, path)
        data = path.read_bytes()
        for cut in (9, 20, len(data) // 2):
            path.write_bytes(data[:cut])
            with pytest.raises(FormatError) as info:
                namedschema.load(path)
            assert "looks like" not in str(info.value), str(info.value)


def test_metadata_is_plain_data_read_without_loading(tmp_path):
    """2: save(metadata=) / inspect().metadata / load(expect_metadata=) refusing before unpickling."""
    path = tmp_path / "m.nsb"
    namedschema.save({"s": {1, 2}}, path, allow_pickle=True,
                     metadata={"kind": "mine", "version": "3"})
    assert namedschema.inspect(path).metadata == {"kind": "mine", "version": "3"}
    assert namedschema.load(path, allow_pickle=True, expect_metadata={"kind": "mine"}) == \
        {"s": {1, 2}}
    with pytest.raises(UnexpectedKindError) as info:
        namedschema.load(path, allow_pickle=True, expect_metadata={"kind": "other"})
    assert info.value.metadata["kind"] == "mine" and "nothing was loaded" in str(info.value)
    for bad in ({"k": 1}, {1: "v"}, "kind", {f"k{i}": "v" for i in range(65)}):
        with pytest.raises((TypeError, ValueError)):
            namedschema.save({}, path, metadata=bad)
    # Incremental saves keep it.
    namedschema.save({"a": np.arange(3)}, path, incremental=True, metadata={"kind": "inc"})
    namedschema.save({"a": np.arange(3) + 1}, path, incremental=True, metadata={"kind": "inc"})
    assert namedschema.inspect(path).metadata == {"kind": "inc"}


class _Payload:
    """Unpickling it creates the file ``marker``: proof that code ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_run_checkpoint_never_unpickles_a_foreign_file(tmp_path):
    """2 (the same principle for RunCheckpoint): with allow_pickle, a foreign pickled file runs nothing."""
    RunCheckpoint = namedschema.RunCheckpoint
    from namedschema.training.run_checkpoint import RunCheckpointError
    marker = tmp_path / "MARKER"
    path = tmp_path / "run.nsc"
    namedschema.save({"format": "namedschema.RunCheckpoint", "version": 1,
                      "p": _Payload(str(marker))}, path, allow_pickle=True)
    ckpt = RunCheckpoint(path, allow_pickle=True, global_rngs=False)
    ckpt.track(weights=np.zeros(3))
    with pytest.raises(RunCheckpointError, match="nothing in it was unpickled"):
        ckpt.restore()
    assert not marker.exists()
    # Its own files still restore, pickled parts included.
    own = RunCheckpoint(tmp_path / "own.nsc", allow_pickle=True, global_rngs=False)
    weights = np.arange(3.0)
    own.track(weights=weights)
    own.save(5, note={1, 2})
    again = RunCheckpoint(tmp_path / "own.nsc", allow_pickle=True, global_rngs=False)
    again.track(weights=np.zeros(3))
    assert again.restore() and again.step == 5 and again.loop["note"] == {1, 2}
