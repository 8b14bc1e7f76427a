"""Fuzzing: amplification, torch alignment and registry collisions, generically.

Three families of hostile input, each run in child interpreters so that a
crash, a hang or an allocation failure is one failed test with the child's
output, not a lost test run:

* headers that amplify: long lists, many objects, deep nesting, many
  tensors, arrays, schemas and fields, long shapes, in every place a header
  holds them, each loaded and inspected under ``RLIMIT_AS`` = start + 1 GiB
  and a time limit per call;
* torch entries of every dtype at every byte offset and stride class,
  honest views and crafted ones, with torch ops run on whatever loads;
* files and pickles that claim the id of a module-level schema with another
  definition, loaded before the module is imported and before the user's
  own file.

The default (CI) run keeps sizes and counts small; ``HYPOTHESIS_PROFILE=long``
runs larger headers and more random cases.
"""

import json
import os
import random
import struct
import subprocess
import sys
import textwrap
import zlib

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from tests.checkpoint import crafted, limited
from tests.figures import record
from tests.helpers import REPO_ROOT

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
# Each example runs child interpreters: no shrinking (a failure reports its seed).
_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
# Header sizes for the amplification families, in MiB.
SIZES = (1, 16, 64, 95) if LONG else (1, 4)


def _seconds(nbytes):
    """Time limit for one call on a file of ``nbytes``: generous, linear."""
    return 10.0 + 0.5 * nbytes / 2**20


# ---------------------------------------------------------------------------
# Amplification
# ---------------------------------------------------------------------------

def _raw_parts(data):
    (n,) = struct.unpack("<Q", data[:8])
    return data[8:8 + n].rstrip(b" "), data[8 + n:]


def _write(path, raw, body):
    """Write header bytes ``raw`` (with a header_crc32 field) and ``body``, CRC made right."""
    marker = b'"header_crc32":"'
    i = raw.index(marker) + len(marker)
    raw = raw[:i] + b"00000000" + raw[i + 8:]
    raw += b" " * (-(8 + len(raw)) % 64)
    crc = zlib.crc32(raw)
    raw = raw[:i] + b"%08x" % crc + raw[i + 8:]
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.write(body)


def _repeat(unit: bytes, nbytes: int, sep=b",") -> bytes:
    count = max(1, nbytes // (len(unit) + len(sep)))
    return sep.join([unit] * count)


def _nested(depth, inner=b"0"):
    return b"[" * depth + inner + b"]" * depth


# Values of about ``n`` bytes, as JSON text, that cost the most to parse.
_FILLERS = {
    "empty lists": lambda n: b"[" + _repeat(b"[]", n) + b"]",
    "empty objects": lambda n: b"[" + _repeat(b"{}", n) + b"]",
    "short strings": lambda n: b"[" + _repeat(b'"a"', n) + b"]",
    "floats": lambda n: b"[" + _repeat(b"0.5", n) + b"]",
    "big ints": lambda n: b"[" + _repeat(b"9" * 4000, n) + b"]",
    "many keys": lambda n: b"{" + b",".join(b'"k%d":0' % i for i in range(n // 8)) + b"}",
    "deep nesting": lambda n: _nested(min(n // 2, 10**6)),
    "one long string": lambda n: b'"' + b"x" * n + b'"',
}


def _desc_bomb(where, n):
    """A description (Python object) whose ``where`` part is about ``n`` bytes of JSON."""
    header, desc, body = crafted.split(open(crafted.seed_files()[0], "rb").read())
    count = max(1, n // 12)
    if where == "structure list":
        desc["structure"] = {"list": [None] * count}
    elif where == "structure dict":
        desc["structure"] = {"dict": [["k", 0]] * (count // 2)}
    elif where == "structure nesting":
        node = 0
        for _ in range(min(count, 5000)):
            node = {"list": [node]}
        desc["structure"] = node
    elif where == "arrays":
        desc["arrays"] = desc["arrays"] + [dict(desc["arrays"][0])] * (count // 8)
    elif where == "schemas":
        entry = {"kind": "NamedTupleSchema", "typename": "S", "fields": ["a"],
                 "defaults": [], "id": "s", "module": None}
        desc["schemas"] = [entry] * (count // 8)
    elif where == "fields":
        desc["schemas"] = [{"kind": "NamedTupleSchema", "typename": "S",
                            "fields": [f"f{i}" for i in range(count // 2)],
                            "defaults": [], "id": f"fields-{count}", "module": None}]
        desc["structure"] = {"nt": 0, "values": [0] * (count // 2)}
    elif where == "defaults":
        desc["schemas"] = [{"kind": "NamedTupleSchema", "typename": "S", "fields": ["a"],
                            "defaults": [{"list": [0] * count}], "id": f"def-{count}",
                            "module": None}]
        desc["structure"] = {"nt": 0, "values": [0]}
    elif where == "array shape":
        desc["arrays"][0]["shape"] = [1] * count
        desc["arrays"][0]["strides"] = [8] * count
    elif where == "blocks":
        desc["blocks"] = desc["blocks"] * (count // 4)
    elif where == "features":
        desc["features"] = ["x"] * count
    return header, desc, body


_DESC_PLACES = ["structure list", "structure dict", "structure nesting", "arrays", "schemas",
                "fields", "defaults", "array shape", "blocks", "features"]


def _amplifiers(tmp_path, rng, sizes):
    """(path, description) of amplifying files: every filler in every place, at every size."""
    seed = open(crafted.seed_files()[0], "rb").read()
    raw, body = _raw_parts(seed)
    out = []
    for size in sizes:
        n = size * 2**20
        for name, make in _FILLERS.items():
            value = make(n)
            # An unused metadata key, a tensor entry's shape, an unknown tensor entry.
            places = {
                "metadata": raw.replace(b'"__metadata__":{',
                                        b'"__metadata__":{"unused":' + value + b",", 1),
                "tensor shape": raw.replace(b'"shape":[', b'"shape":[' + value + b",", 1),
                "extra tensor": raw.replace(b'"__metadata__":',
                                            b'"extra":{"dtype":"U8","shape":' + value
                                            + b',"data_offsets":[0,0]},"__metadata__":', 1),
            }
            for place, new_raw in places.items():
                if rng.random() < (1.0 if size <= 1 or LONG else 0.25):
                    path = tmp_path / f"amp-{len(out)}.nsb"
                    _write(path, new_raw, body)
                    out.append((str(path), f"{name} in {place}, {size} MiB"))
        for where in _DESC_PLACES:
            if size > 1 and not LONG and rng.random() < 0.5:
                continue
            header, desc, dbody = _desc_bomb(where, n)
            path = tmp_path / f"amp-{len(out)}.nsb"
            try:
                path.write_bytes(crafted.join(header, desc, dbody))
            except RecursionError:
                continue
            out.append((str(path), f"{where} in the description, {size} MiB"))
    return out


def _check_limited(files):
    """Load/inspect every file in children under the memory and time limits; return outcomes."""
    results = []
    # Several children, so one slow child does not hold every case.
    for start in range(0, len(files), 12):
        batch = files[start:start + 12]
        biggest = max(os.path.getsize(p) for p, _ in batch)
        proc = limited.run_limited(limited.CHECK_FILES, PATHS=[p for p, _ in batch],
                                   SECONDS=_seconds(biggest))
        outcomes = limited.outcomes_of(proc)
        for i, (_path, what) in enumerate(batch):
            results.extend((what, o) for o in outcomes[3 * i:3 * i + 3])
    return results


def test_amplifying_headers_are_bounded_in_time_and_memory(tmp_path):
    """Every filler in every place of the header, at every size: FormatError or a load, promptly."""
    files = _amplifiers(tmp_path, random.Random(16), SIZES)
    results = _check_limited(files)
    record("fuzz.amplification_files", len(files))
    record("fuzz.rlimit_cases", len(results))
    bad = [(what, o) for what, o in results if o not in ("format", "ok")]
    assert bad == []


@settings(max_examples=100 if LONG else 2, phases=_NO_SHRINK)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_mixtures_of_amplifiers_are_bounded(tmp_path_factory, seed):
    """Random combinations of amplifiers at random sizes, several at once in one header."""
    rng = random.Random(seed)
    work = tmp_path_factory.mktemp("mix")
    raw, body = _raw_parts(open(rng.choice(crafted.seed_files()), "rb").read())
    files = []
    for i in range(6):
        extra = []
        for k in range(rng.randrange(1, 4)):
            make = rng.choice(list(_FILLERS.values()))
            extra.append(b'"u%d":' % k + make(rng.choice([2**10, 2**16, 2**20, 4 * 2**20] + ([32 * 2**20] if LONG else []))))
        new_raw = raw.replace(b'"__metadata__":{', b'"__metadata__":{' + b",".join(extra)
                              + b",", 1)
        path = work / f"mix-{i}.nsb"
        _write(path, new_raw, body)
        files.append((str(path), "mixture"))
    results = _check_limited(files)
    record("fuzz.amplification_files", len(files))
    record("fuzz.rlimit_cases", len(results))
    assert [o for _w, o in results if o not in ("format", "ok")] == []


# ---------------------------------------------------------------------------
# Torch entries: every dtype, every offset, every stride class
# ---------------------------------------------------------------------------

_TORCH_CHILD = r"""
import json, os, sys, torch, numpy as np, namedschema
LONG = json.loads(os.environ.get("NAMEDSCHEMA_LONG_FUZZ", "false"))
from namedschema.errors import FormatError
from tests.checkpoint import crafted

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64", "complex64", "complex128"]
NP = {"bfloat16": "int16"}
work = WORK
cases = 0

def ops(t, where):
    '''Run ordinary torch ops on a loaded tensor; a crash here kills the child.'''
    assert t.data_ptr() % t.element_size() == 0, ("misaligned", where, t.data_ptr())
    n = t.shape[0] if t.dim() else 0
    for op in (lambda: t.sum(), lambda: t.clone(), lambda: t.flip(0) if t.dim() else t,
               lambda: t[::2].contiguous() if t.dim() else t,
               lambda: t.index_select(0, torch.arange(min(n, 3))) if t.dim() else t,
               lambda: (t == t).all(), lambda: t.to(torch.float64) if not t.is_complex() else t.abs(),
               lambda: t * 2 if t.dtype is not torch.bool else t & t):
        try:
            op()
        except (NotImplementedError, RuntimeError, TypeError):
            pass  # an op this dtype lacks: only a crash or a wrong value matters

def as_bytes(t):
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""

def tensors(dtype):
    base = torch.arange(97, dtype=torch.float64)
    x = (base % 2).to(torch.bool) if dtype == "bool" else base.to(getattr(torch, dtype))
    return x

# Honest saves: views at every element offset and stride class, also .real/.imag.
for dtype in DTYPES:
    x = tensors(dtype)
    views = {f"o{k}": x[k:] for k in range(0, 17)}
    views.update(step2=x[1::2], step3=x[2::3], rev=x[:50].view(5, 10).t(),
                 bcast=x[3:4].expand(7), mat=x[:96].view(8, 12)[1:, 2:])
    if x.is_complex():
        views.update(re=x.real, im=x.imag, im1=x[1:].imag)
    # All views with the base, all but the base and the first view (a block then
    # starts inside the storage), and each view alone.
    variants = [dict(views, base=x), {k: v for k, v in views.items() if k != "o0"}]
    if LONG:
        variants += [{k: v} for k, v in views.items()]
    # Pairs with a view that starts at an odd address, so the block does too:
    # the members must still load at addresses torch accepts.
    odd = {}
    if x.element_size() > 1:
        odd["bytes1"] = x.view(torch.uint8)[1:]
    if x.is_complex():
        odd.update(im=x.imag, im1=x[1:].imag)
    variants += [{o: ov, k: v} for o, ov in odd.items() for k, v in views.items()
                 if k not in ("o0", "bcast") and k != o]
    for number, obj in enumerate(variants):
        path = os.path.join(work, f"honest-{dtype}-{number}.nsb")
        namedschema.save(obj, path)
        for kw in ({}, {"mmap_mode": "r"}, {"mmap_mode": "c"}, {"verify": True}):
            back = namedschema.load(path, **kw)
            for key, t in back.items():
                ops(t, (dtype, key, kw))
                assert t.dtype == obj[key].dtype and t.shape == obj[key].shape, (dtype, key)
                assert as_bytes(t) == as_bytes(obj[key]), ("value", dtype, key, kw)
                cases += 1

# Crafted entries: every byte offset and stride class over one raw block.
seed = os.path.join(work, "seed.nsb")
namedschema.save({"t": torch.zeros(512, dtype=torch.uint8)}, seed)
header, desc, body = crafted.split(open(seed, "rb").read())
for dtype in DTYPES:
    size = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    np_str = np.dtype(NP.get(dtype, dtype)).str
    for offset in range(0, 17):
        for kind, shape, strides in (
                ("contiguous", [8], [size]), ("step2", [8], [2 * size]), ("zero", [8], [0]),
                ("negative", [8], [-size]), ("odd", [8], [size + 1]), ("half", [8], [max(size // 2, 1)]),
                ("2d", [4, 3], [3 * size, size]), ("2d-t", [3, 4], [size, 3 * size]),
                ("0-d", [], [])):
            a = dict(desc["arrays"][0], dtype=np_str, torch=dtype, shape=shape, strides=strides,
                     offset=offset + (7 * size if kind == "negative" else 0))
            d = dict(desc, arrays=[a])
            path = os.path.join(work, "crafted.nsb")
            with open(path, "wb") as f:
                f.write(crafted.join(header, d, body))
            for kw in ({}, {"mmap_mode": "r"}, {"mmap_mode": "c"}):
                cases += 1
                try:
                    t = namedschema.load(path, **kw)["t"]
                except FormatError:
                    continue
                ops(t, (dtype, offset, kind, kw))
            try:
                namedschema.inspect(path)
            except FormatError:
                pass
print(json.dumps([cases]))
"""


def test_torch_entries_of_every_dtype_offset_and_stride_load_safely(tmp_path):
    """Honest views and crafted entries of every torch dtype: aligned, equal, no crash in torch ops."""
    pytest.importorskip("torch")
    proc = limited.run_limited(_TORCH_CHILD, WORK=str(tmp_path), timeout=900,
                               env={"NAMEDSCHEMA_LONG_FUZZ": json.dumps(LONG)})
    if proc.returncode < 0:
        pytest.fail(f"child killed by signal {-proc.returncode} (a crash in torch):\n"
                    f"{proc.stderr.decode(errors='replace')[-3000:]}")
    (cases,) = limited.outcomes_of(proc)
    record("fuzz.torch_cases", cases)
    assert cases > (20000 if LONG else 5000)


# ---------------------------------------------------------------------------
# Registry collisions for module-level ids
# ---------------------------------------------------------------------------

_DEFAULT_VALUES = [0, 1, False, True, 0.0, -0.0, 1.0, "0", "", None, (0,), (), [0], 2**70]


def _module_source(rng, count):
    """Source of a module with ``count`` module-level schemas, and their definitions."""
    lines = ["from namedschema import NamedTupleSchema, NamedArrayTupleSchema"]
    defs = []
    for i in range(count):
        kind = rng.choice(["NamedTupleSchema", "NamedArrayTupleSchema"])
        nfields = rng.randrange(1, 5)
        fields = [f"f{j}" for j in range(nfields)]
        defaults = [rng.choice(_DEFAULT_VALUES) for _ in range(rng.randrange(0, nfields + 1))]
        name = f"S{i}"
        lines.append(f"{name} = {kind}({name!r}, {' '.join(fields)!r}, defaults={defaults!r})")
        defs.append({"name": name, "kind": kind, "fields": fields, "defaults": defaults})
    return "\n".join(lines) + "\n", defs


def _forgeries(entry, rng):
    """Schema entries with the same id and another definition (a hostile writer's)."""
    out = []
    defaults = entry["defaults"]
    for value in _DEFAULT_VALUES:
        if defaults:
            forged = list(defaults)
            forged[rng.randrange(len(forged))] = json.loads(json.dumps(value)) \
                if not isinstance(value, (tuple, list)) else {"tuple": [0]}
            out.append(dict(entry, defaults=forged))
    out.append(dict(entry, defaults=defaults[1:]))
    out.append(dict(entry, defaults=defaults + [0] if len(defaults) < len(entry["fields"])
                    else defaults[:-1]))
    out.append(dict(entry, fields=entry["fields"] + ["zz"]))
    out.append(dict(entry, typename=entry["typename"] + "X"))
    out.append(dict(entry, module="PWNED"))
    out.append(dict(entry, kind="NamedTupleSchema" if entry["kind"] != "NamedTupleSchema"
                    else "NamedArrayTupleSchema"))
    return [f for f in out if f != entry]


_COLLISION_CHILD = r"""
import importlib, json, sys, namedschema
from namedschema.errors import FormatError
import torch
refused = 0
for path in FORGED:
    try:
        keep = namedschema.load(path)  # kept alive, as an attacker would want
        globals().setdefault("_kept", []).append(keep)
    except FormatError:
        refused += 1
for path in FORGED_PT:
    try:
        globals().setdefault("_kept", []).append(torch.load(path, weights_only=True))
    except Exception:
        refused += 1

def exact(cls, d):
    got = list(cls._field_defaults.values())
    want = d["defaults"]
    assert cls._typename == d["name"] and list(cls._fields) == d["fields"], (cls, d)
    assert type(cls).__name__ == d["kind"], (type(cls), d)
    assert [type(v).__name__ for v in got] == [type(v).__name__ for v in want] \
        and repr(got) == repr(want), (d["name"], got, want)

if IMPORT_FIRST:
    mod = importlib.import_module("collmod")
    for d in DEFS:
        exact(getattr(mod, d["name"]), d)
honest = namedschema.load("honest.nsb")
for d in DEFS:
    exact(type(honest[d["name"]]), d)
honest_pt = torch.load("honest.pt", weights_only=True)
for d in DEFS:
    exact(type(honest_pt[d["name"]]), d)
mod = importlib.import_module("collmod")
for d in DEFS:
    exact(getattr(mod, d["name"]), d)
    assert getattr(mod, d["name"]).__module__ == "collmod"
    assert type(namedschema.load("honest.nsb")[d["name"]]) is getattr(mod, d["name"])
print(json.dumps([refused]))
"""


@settings(max_examples=40 if LONG else 1, phases=_NO_SHRINK)
@given(seed=st.integers(0, 2**32 - 1))
def test_forged_module_level_ids_never_change_a_schema(tmp_path_factory, seed):
    """Files and torch pickles claiming module-level ids with other definitions change nothing."""
    pytest.importorskip("torch")
    rng = random.Random(seed)
    work = tmp_path_factory.mktemp("collide")
    source, defs = _module_source(rng, rng.randrange(1, 5))
    (work / "collmod.py").write_text(source)
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def run(code, **names):
        assigns = "".join(f"{k} = {v!r}\n" for k, v in names.items())
        proc = subprocess.run([sys.executable, "-c", assigns + textwrap.dedent(code)],
                              cwd=work, capture_output=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
        return proc
    run("""
        import torch, namedschema, collmod
        objs = {n: getattr(collmod, n)(*range(len(getattr(collmod, n)._fields))) for n in NAMES}
        namedschema.save(objs, "honest.nsb")
        torch.save(objs, "honest.pt")
        """, NAMES=[d["name"] for d in defs])
    header, desc, body = crafted.split((work / "honest.nsb").read_bytes())
    forged, forged_pt = [], []
    for index, entry in enumerate(desc["schemas"]):
        for k, fake in enumerate(_forgeries(entry, rng)):
            d2 = json.loads(json.dumps(desc))
            d2["schemas"][index] = fake
            node = next(item[1] for item in d2["structure"]["dict"]
                        if item[1].get("nt") == index)
            node["values"] = [1] * len(fake["fields"])
            path = work / f"forged-{index}-{k}.nsb"
            path.write_bytes(crafted.join(header, d2, body))
            forged.append(str(path))
        forged_pt.append(str(work / f"forged-{index}.pt"))
    # The torch forgeries: the same id with defaults of another type, via torch.save.
    run("""
        import torch, namedschema
        from namedschema._core.pickling import rebuild_schema
        for entry, path in zip(ENTRIES, PATHS):
            fake = ("zz",) * len(entry["defaults"]) if entry["defaults"] else ()
            fields = tuple(entry["fields"]) if fake else tuple(entry["fields"]) + ("zz",)
            cls = rebuild_schema(entry["kind"], entry["id"], entry["typename"], fields,
                                 fake, entry["module"])
            torch.save({"x": cls(*range(len(fields)))}, path)
        """, ENTRIES=desc["schemas"], PATHS=forged_pt)
    rng.shuffle(forged)
    for import_first in (True, False):
        proc = run(_COLLISION_CHILD, FORGED=forged, FORGED_PT=forged_pt, DEFS=defs,
                   IMPORT_FIRST=import_first)
        json.loads(proc.stdout.decode().splitlines()[-1])
    record("collision.files", 2 * (len(forged) + len(forged_pt)))
