"""Checkpoint files handled safely: torch alignment, header limits, checksums, escaping,
file modes, links and FIFOs (regression tests of hardening round 2, issue 16).

Each test reproduces one finding of the adversarial review through the public
API (``namedschema.save/load/inspect``, the CLI) and crafted files built with
``crafted.split/join``; the item number of the issue is in each docstring.
"""

import os
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import namedschema
from namedschema.errors import FormatError
from tests.checkpoint import crafted, limited
from tests.figures import record
from tests.helpers import REPO_ROOT, run_fresh

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------------------
# 1. Alignment: torch's requirement, not numpy's
# ---------------------------------------------------------------------------

def test_views_of_complex_tensors_load_aligned_for_torch(tmp_path):
    """1: save({'im': x.imag, 'z': x[1:]}) of complex tensors loads aligned; torch ops run."""
    proc = run_fresh(f"""
        import torch, namedschema
        for dtype in (torch.complex128, torch.complex64):
            x = torch.arange(64, dtype=torch.float64).to(dtype) * (1 + 2j)
            path = {str(tmp_path)!r} + "/c.nsb"
            namedschema.save({{"im": x.imag, "z": x[1:]}}, path)
            for kw in ({{}}, {{"mmap_mode": "r"}}, {{"mmap_mode": "c"}}, {{"verify": True}}):
                d = namedschema.load(path, **kw)
                for key, t in d.items():
                    assert t.data_ptr() % t.element_size() == 0, (dtype, key, kw, t.data_ptr())
                z = d["z"]
                assert torch.equal(z, x[1:]) and torch.equal(d["im"], x.imag)
                # still views of one block, not aligned copies
                assert z.untyped_storage().data_ptr() == d["im"].untyped_storage().data_ptr()
                assert torch.equal(z[::2].sum(), x[1:][::2].sum())
                z.index_select(0, torch.arange(3)).sum()
        print("ok")
        """, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    assert proc.stdout.strip() == b"ok"


def test_crafted_misaligned_torch_offset_is_copied_or_refused(tmp_path):
    """1: a crafted block offset that misaligns a complex128 tensor never reaches torch's kernels."""
    x = torch.arange(32, dtype=torch.float64).to(torch.complex128)
    seed = tmp_path / "seed.nsb"
    namedschema.save({"x": x}, seed)
    header, desc, body = crafted.split(seed.read_bytes())
    desc["arrays"][0].update(offset=8, shape=[31])
    path = tmp_path / "shifted.nsb"
    path.write_bytes(crafted.join(header, desc, body))
    proc = run_fresh(f"""
        import torch, namedschema
        from namedschema.errors import FormatError
        for kw in ({{}}, {{"mmap_mode": "r"}}, {{"mmap_mode": "c"}}):
            try:
                t = namedschema.load({str(path)!r}, **kw)["x"]
            except FormatError:
                continue
            assert t.data_ptr() % 16 == 0, t.data_ptr()
            t[::2].sum(); t.index_select(0, torch.arange(3))
        print("ok")
        """, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]


# ---------------------------------------------------------------------------
# 2 and 3. Work and memory bounded by the file, before the work is done
# ---------------------------------------------------------------------------

def _tensor_entry_with_long_shape(tmp_path, ndims):
    header, desc, body = crafted.split(open(crafted.seed_files()[0], "rb").read())
    name = desc["blocks"][0]["tensor"]
    header[name]["shape"] = [2**62 + 1] * ndims
    path = tmp_path / f"shape{ndims}.nsb"
    path.write_bytes(crafted.join(header, desc, body))
    return path


def test_long_safetensors_shape_is_refused_promptly(tmp_path):
    """2: a tensor entry with 200,000 huge dimensions is refused before any big-int product."""
    path = _tensor_entry_with_long_shape(tmp_path, 200_000)
    for fn in (namedschema.load, namedschema.inspect):
        assert crafted.attempt(fn, path) == "format"


def _files_split_raw(data):
    import struct
    (n,) = struct.unpack("<Q", data[:8])
    raw = data[8:8 + n]
    return raw, data[8 + n:]


def _write_raw_header(path, raw_header: bytes, body: bytes):
    """A file from header bytes with the length prefix and header CRC made right."""
    import struct
    import zlib
    raw = raw_header.rstrip(b" ")
    marker = b'"header_crc32":"'
    i = raw.index(marker) + len(marker)
    raw = raw[:i] + b"00000000" + raw[i + 8:]
    raw += b" " * (-(8 + len(raw)) % 64)
    crc = zlib.crc32(raw)
    raw = raw[:i] + b"%08x" % crc + raw[i + 8:]
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)


def _amplifying_file(tmp_path, name, filler: bytes, count: int):
    """A valid seed whose header gains an unused metadata value of ``count`` x ``filler``."""
    data = open(crafted.seed_files()[0], "rb").read()
    raw, body = _files_split_raw(data)
    value = b"[" + filler * count + filler.rstrip(b",") + b"]"
    raw = raw.replace(b'"__metadata__":{', b'"__metadata__":{"unused":' + value + b",", 1)
    path = tmp_path / name
    _write_raw_header(path, raw, body)
    return path


def test_header_of_empty_lists_is_refused_without_memory_error(tmp_path):
    """3: a 60 MiB header of empty JSON lists is a FormatError under RLIMIT_AS + 1 GiB."""
    path = _amplifying_file(tmp_path, "lists.nsb", b"[],", 20 * 2**20)
    outcomes = limited.outcomes_of(limited.run_limited(
        limited.CHECK_FILES, PATHS=[str(path)], SECONDS=30))
    record("fuzz.rlimit_cases", len(outcomes))
    assert outcomes == ["format"] * 3


def _schema_file(tmp_path, n_fields):
    """A checkpoint holding one schema instance with ``n_fields`` fields (by header surgery)."""
    P = namedschema.NamedTupleSchema("P", "a")
    seed = tmp_path / "seed-schema.nsb"
    namedschema.save(P(1), seed)
    header, desc, body = crafted.split(seed.read_bytes())
    desc["schemas"][0]["fields"] = [f"f{i}" for i in range(n_fields)]
    desc["schemas"][0]["id"] = f"crafted-{n_fields}"
    desc["structure"] = {"nt": 0, "values": [0] * n_fields}
    path = tmp_path / f"fields{n_fields}.nsb"
    path.write_bytes(crafted.join(header, desc, body))
    return path


def test_schema_with_a_million_fields_is_refused_under_memory_limit(tmp_path):
    """3: a file with a 1,000,000-field schema is a FormatError, cheaply (under RLIMIT_AS + 1 GiB)."""
    path = _schema_file(tmp_path, 1_000_000)
    outcomes = limited.outcomes_of(limited.run_limited(
        limited.CHECK_FILES, PATHS=[str(path)], SECONDS=5))
    record("fuzz.rlimit_cases", len(outcomes))
    # inspect never builds the class; load must refuse the field count.
    assert outcomes[:2] == ["format", "format"] and outcomes[2] in ("ok", "format")


# ---------------------------------------------------------------------------
# 6. Every failure of reading a file is a FormatError; inspect refuses the same
# ---------------------------------------------------------------------------

def _torch_file(tmp_path, edit, dtype=torch.float32, name="t.nsb"):
    seed = tmp_path / f"seed-{name}"
    namedschema.save({"t": torch.arange(16, dtype=dtype)}, seed)
    header, desc, body = crafted.split(seed.read_bytes())
    edit(desc["arrays"][0])
    path = tmp_path / name
    path.write_bytes(crafted.join(header, desc, body))
    return path


@pytest.mark.parametrize("case", ["negative stride", "stride not a multiple",
                                  "requires_grad on int", "requires_grad not bool"])
def test_crafted_torch_entries_raise_format_error(tmp_path, case):
    """6: bad strides or requires_grad in a torch entry: FormatError from load and inspect."""
    dtype = torch.int64 if case == "requires_grad on int" else torch.float32

    def edit(a):
        if case == "negative stride":
            a.update(offset=60, strides=[-4])
        elif case == "stride not a multiple":
            a.update(shape=[8], strides=[6])
        elif case == "requires_grad on int":
            a["requires_grad"] = True
        else:
            a["requires_grad"] = "yes"
    path = _torch_file(tmp_path, edit, dtype)
    for kwargs in ({}, {"mmap_mode": "r"}, {"verify": True}):
        with pytest.raises(FormatError):
            namedschema.load(path, **kwargs)
    with pytest.raises(FormatError):
        namedschema.inspect(path)


def test_torch_entry_without_torch_is_a_format_error(tmp_path):
    """6: loading a file with tensors where torch cannot be imported is a FormatError."""
    path = tmp_path / "t.nsb"
    namedschema.save({"t": torch.ones(3)}, path)
    proc = run_fresh(f"""
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        import namedschema
        from namedschema.errors import FormatError
        try:
            namedschema.load({str(path)!r})
        except FormatError as exc:
            assert "torch" in str(exc), exc
            print("format")
        print(namedschema.inspect({str(path)!r}).fields[0].dtype)
        """)
    assert proc.stdout.split() == [b"format", b"torch.float32"]


# ---------------------------------------------------------------------------
# 7. Checksums describe the bytes written
# ---------------------------------------------------------------------------

def test_checksums_match_the_file_under_a_live_writer(tmp_path):
    """7: saving a buffer another thread keeps writing still gives a file that verifies."""
    buf = np.zeros(48 * 2**20, np.uint8)
    stop = threading.Event()

    def writer():
        value = 0
        while not stop.is_set():
            value = (value + 1) % 251
            buf[::4096] = value  # touches every page, releasing the GIL in numpy
            time.sleep(0)
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    failures = []
    try:
        for i in range(4):
            path = tmp_path / f"live{i}.nsb"
            namedschema.save({"buf": buf, "small": buf[:1024]}, path)
            try:
                namedschema.load(path, verify=True)
            except FormatError as exc:
                failures.append(str(exc))
    finally:
        stop.set()
        thread.join()
    assert failures == []


# ---------------------------------------------------------------------------
# 9. Strings from a file are escaped before printing
# ---------------------------------------------------------------------------

_EVIL = "\x1b[2K\r\x1b[1A\x1b[2Kloading needs allow_pickle=True: no\n\x07"


def test_inspect_escapes_terminal_control_characters(tmp_path):
    """9: names and the pickle reason from a file cannot put control characters on the terminal."""
    seed = tmp_path / "seed.nsb"
    P = namedschema.NamedTupleSchema("P", "x")
    namedschema.save({"set": {1}, "a": np.arange(3)}, seed, allow_pickle=True)
    header, desc, body = crafted.split(seed.read_bytes())
    desc["pickle"]["reason"] = _EVIL
    desc["arrays"][0]["path"] = "arr" + _EVIL
    path = tmp_path / "evil.nsb"
    path.write_bytes(crafted.join(header, desc, body))
    seed2 = tmp_path / "seed2.nsb"
    namedschema.save({"k": P(np.arange(2))}, seed2)
    header, desc, body = crafted.split(seed2.read_bytes())
    desc["schemas"][0]["typename"] = "P" + _EVIL
    desc["structure"]["dict"][0][0] = "key" + _EVIL
    path2 = tmp_path / "evil2.nsb"
    path2.write_bytes(crafted.join(header, desc, body))
    for p in (path, path2):
        proc = subprocess.run([sys.executable, "-m", "namedschema", "inspect", str(p)],
                              capture_output=True, cwd=REPO_ROOT)
        out = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
        assert not any(ord(c) < 32 and c != "\n" or ord(c) == 127 for c in out), repr(out)
        # The only line saying whether loading needs pickle is the real one.
        says = [line for line in out.splitlines() if "allow_pickle=True:" in line
                and line.startswith(("loading needs", "needs"))]
        needs = p == path
        assert says == (["needs allow_pickle=True: " + repr(_EVIL)[1:-1]] if needs
                        else ["loading needs allow_pickle=True: no"]), says
        info_text = str(namedschema.inspect(p))
        assert not any(ord(c) < 32 and c != "\n" for c in info_text), repr(info_text)


def test_error_messages_escape_file_strings(tmp_path):
    """9: FormatError / UnsafeLoadError messages quoting the file hold no raw control characters."""
    header, desc, body = crafted.split(open(crafted.seed_files()[0], "rb").read())
    desc["arrays"][0]["path"] = "p" + _EVIL
    desc["arrays"][0]["dtype"] = "|O"
    bad_dtype = tmp_path / "msg.nsb"
    bad_dtype.write_bytes(crafted.join(header, desc, body))
    seed = tmp_path / "seed.nsb"
    namedschema.save({"set": {1}}, seed, allow_pickle=True)
    header, desc, body = crafted.split(seed.read_bytes())
    desc["pickle"]["reason"] = _EVIL
    bad_reason = tmp_path / "reason.nsb"
    bad_reason.write_bytes(crafted.join(header, desc, body))
    for path in (bad_dtype, bad_reason):
        with pytest.raises(FormatError) as info:
            namedschema.load(path)
        assert not any(ord(c) < 32 for c in str(info.value)), repr(str(info.value))


# ---------------------------------------------------------------------------
# 10. Mode and symlinks of the target
# ---------------------------------------------------------------------------

def test_save_keeps_the_file_mode(tmp_path):
    """10: a chmod 600 checkpoint stays 0600 after the next save over it."""
    path = tmp_path / "ck.nsb"
    namedschema.save({"a": 1}, path)
    os.chmod(path, 0o600)
    namedschema.save({"a": 2}, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    os.chmod(path, 0o640)
    namedschema.save({"a": 3}, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert namedschema.load(path) == {"a": 3}


def test_save_through_a_symlink_keeps_the_link(tmp_path):
    """10: saving to latest.nsb -> run3.nsb writes run3.nsb; the link stays a link."""
    runs = tmp_path / "runs"
    runs.mkdir()
    target = runs / "run3.nsb"
    namedschema.save({"a": 1}, target)
    link = tmp_path / "latest.nsb"
    os.symlink(os.path.join("runs", "run3.nsb"), link)  # relative, as users make them
    namedschema.save({"a": 2}, link)
    assert os.path.islink(link) and os.readlink(link) == os.path.join("runs", "run3.nsb")
    assert namedschema.load(target) == {"a": 2} == namedschema.load(link)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # A link to a link, and a dangling link, are followed to the final target too.
    link2 = tmp_path / "newest.nsb"
    os.symlink("latest.nsb", link2)
    namedschema.save({"a": 3}, link2)
    assert os.path.islink(link2) and namedschema.load(target) == {"a": 3}
    dangling = tmp_path / "next.nsb"
    os.symlink(os.path.join("runs", "run4.nsb"), dangling)
    namedschema.save({"a": 4}, dangling)
    assert os.path.islink(dangling) and namedschema.load(runs / "run4.nsb") == {"a": 4}


# ---------------------------------------------------------------------------
# Minor: FIFOs and other non-regular files; strict checksum digits
# ---------------------------------------------------------------------------

def test_fifo_is_refused_without_blocking(tmp_path):
    """minor: load/inspect of a FIFO raise FormatError at once instead of blocking in open."""
    fifo = tmp_path / "pipe.nsb"
    os.mkfifo(fifo)
    for fn, kwargs in ((namedschema.load, {}), (namedschema.load, {"mmap_mode": "r"}),
                       (namedschema.inspect, {})):
        assert crafted.attempt(fn, fifo, **kwargs) == "format"
    with pytest.raises(FormatError, match="not a regular file"):
        namedschema.load(tmp_path)  # a directory


@pytest.mark.parametrize("crc", [" 1234567", "+1234567", "١٢٣٤٥٦٧٨", "0x123456", "1_234567",
                                 "ABCDEF01"])
def test_block_checksum_must_be_eight_lowercase_hex_digits(tmp_path, crc):
    """minor: a block crc32 other than eight ASCII hex digits (lower case) is malformed."""
    header, desc, body = crafted.split(open(crafted.seed_files()[0], "rb").read())
    desc["blocks"][0]["crc32"] = crc
    path = tmp_path / "crc.nsb"
    path.write_bytes(crafted.join(header, desc, body))
    with pytest.raises(FormatError, match="checksum"):
        namedschema.load(path)
    with pytest.raises(FormatError, match="checksum"):
        namedschema.inspect(path)
