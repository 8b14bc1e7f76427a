"""Evolution casts that would change values, aliasing, and fills bounded by the file.

From hardening round 3 (issue 22), items 4, 5 and 6:

4. A cast that changes a value is refused unless ``casting="unsafe"``:
   ``int64 -> int16`` of 70000, ``float64 -> float32`` of 1e300.
5. Aliasing is checked across numpy and torch: a tensor sharing memory with a
   field being cast refuses the cast.
6. New fields filled from a file's leading shape are bounded by what the
   file holds: the 768-byte file of ``(2**33, 0)`` arrays is a FillLimitError.

The generalized test casts random values between every pair of dtypes and
checks the outcome against an oracle written from the values alone.
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import namedschema
from namedschema.errors import FieldMismatchError, FillLimitError, SchemaEvolutionError
from tests.figures import record
from tests.helpers import run_fresh

Old = namedschema.NamedArrayTupleSchema("Step", "a b")
LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"


def _new(dtype_a, dtype_b=np.float64):
    return namedschema.NamedArrayTupleSchema(
        "Step", "a b", defaults=(np.dtype(dtype_a).type(0), np.dtype(dtype_b).type(0)))


# ---------------------------------------------------------------------------
# 4. Value-changing casts
# ---------------------------------------------------------------------------

def test_int64_to_int16_that_wraps_is_refused():
    """4: [1, 70000, -40000, 2**40] no longer becomes [1, 4464, 25536, 0]."""
    old = Old(np.array([1, 70000, -40000, 2**40]), np.zeros(4))
    with pytest.raises(FieldMismatchError) as info:
        namedschema.upgrade({"buf": old}, [_new(np.int16)], casting="same_kind")
    message = str(info.value)
    assert "buf.a" in message and "70000" in message and "4464" in message
    assert "casting='unsafe'" in message
    assert info.value.schema == "Step" and info.value.field == "a"
    fits = Old(np.array([1, 7000, -4000, 2**14]), np.zeros(4))
    new = namedschema.upgrade({"buf": fits}, [_new(np.int16)], casting="same_kind")["buf"]
    assert new.a.dtype == np.int16 and new.a.tolist() == [1, 7000, -4000, 2**14]


def test_float64_to_float32_overflow_is_refused_without_a_warning():
    """4: 1e300 no longer becomes inf behind numpy's RuntimeWarning."""
    old = Old(np.array([1, 2]), np.array([0.1, 1e300]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FieldMismatchError, match=r"1e\+300.*inf"):
            namedschema.upgrade(old, [_new(np.int64, np.float32)], casting="same_kind")
    rounded = namedschema.upgrade(Old(np.array([1, 2]), np.array([0.1, 1e30])),
                                  [_new(np.int64, np.float32)], casting="same_kind")
    assert rounded.b.dtype == np.float32 and rounded.b[0] == np.float32(0.1)


def test_unsafe_is_the_explicit_opt_in_to_changed_values():
    """4: casting='unsafe' casts as numpy does, values changed, without warnings."""
    old = Old(np.array([1, 70000]), np.array([0.5, 1e300]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = namedschema.upgrade(old, [_new(np.int16, np.float32)], casting="unsafe")
    assert new.a.tolist() == [1, 4464] and math.isinf(new.b[1])


def test_value_changing_cast_through_load(tmp_path):
    """4: load(schemas=..., casting='same_kind') refuses the same way, in a fresh process."""
    path = tmp_path / "old.nsb"
    namedschema.save({"buf": Old(np.array([1, 70000]), np.zeros(2))}, path)
    proc = run_fresh(f"""
        import numpy as np, namedschema
        from namedschema.errors import FieldMismatchError
        New = namedschema.NamedArrayTupleSchema("Step", "a b",
                                                defaults=(np.int16(0), np.float64(0)))
        try:
            namedschema.load({str(path)!r}, schemas=[New], casting="same_kind")
        except FieldMismatchError as exc:
            print("refused", "70000" in str(exc))
        """)
    assert proc.stdout.split() == [b"refused", b"True"]


# ---------------------------------------------------------------------------
# 5. Aliasing across numpy and torch
# ---------------------------------------------------------------------------

def test_torch_tensor_sharing_memory_with_a_cast_field_refuses_the_cast():
    """5: before, the field became a new array and the tensor kept the old memory."""
    torch = pytest.importorskip("torch")
    a = np.arange(6, dtype=np.int64)
    old = Old(a, np.zeros(6))
    for tensor in (torch.from_numpy(a), torch.from_numpy(a)[2:4], torch.from_numpy(a[::2]),
                   torch.from_numpy(a).view(torch.int32)):
        with pytest.raises(SchemaEvolutionError, match="torch tensor"):
            namedschema.upgrade({"buf": old, "t": tensor}, [_new(np.int16)],
                                casting="same_kind")
        assert old.a is a and a.dtype == np.int64  # nothing changed
    # A tensor elsewhere in memory does not stop the cast.
    new = namedschema.upgrade({"buf": old, "t": torch.zeros(6, dtype=torch.int64)},
                              [_new(np.int16)], casting="same_kind")
    assert new["buf"].a.dtype == np.int16


def test_aliasing_through_a_loaded_checkpoint(tmp_path):
    """5: a saved tensor that views a field's memory comes back sharing it; the cast is refused."""
    torch = pytest.importorskip("torch")
    a = np.arange(8, dtype=np.int64)
    path = tmp_path / "alias.nsb"
    namedschema.save({"buf": Old(a, np.zeros(8)), "t": torch.from_numpy(a)[1:3]}, path)
    with pytest.raises(SchemaEvolutionError, match="torch tensor"):
        namedschema.load(path, schemas=[_new(np.int16)], casting="same_kind")


# ---------------------------------------------------------------------------
# 6. Allocation bounded by the file
# ---------------------------------------------------------------------------

def test_768_byte_file_cannot_force_an_8_gib_fill(tmp_path):
    """6: empty (2**33, 0) arrays plus a new field defaulting to True: FillLimitError.

    Run under a 2 GiB address-space limit: before, the fill allocated 8 GiB.
    """
    path = tmp_path / "tiny.nsb"
    namedschema.save({"x": Old(np.empty((2**33, 0)), np.empty((2**33, 0)))}, path)
    assert path.stat().st_size < 2048
    proc = run_fresh(f"""
        import resource, numpy as np, namedschema
        from namedschema.errors import FillLimitError
        limit = 2 * 2**30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        New = namedschema.NamedArrayTupleSchema(
            "Step", "a b c", defaults=(np.zeros(0), np.zeros(0), True))
        try:
            namedschema.load({str(path)!r}, schemas=[New])
        except FillLimitError as exc:
            print("refused", isinstance(exc, MemoryError), "8,589,934,592" in str(exc))
        """, check=False)
    assert proc.stdout.split() == [b"refused", b"True", b"True"], proc.stderr[-2000:]


def test_fill_bound_keeps_ordinary_new_fields_and_covers_callables(tmp_path):
    """6: a buffer's new flag field loads; a callable default is bounded before it runs."""
    obs = np.zeros((1000, 84), np.uint8)
    path = tmp_path / "ok.nsb"
    namedschema.save({"x": Old(obs, np.zeros(1000))}, path)
    New = namedschema.NamedArrayTupleSchema("Step", "a b c", defaults=(np.bool_(True),))
    assert namedschema.load(path, schemas=[New])["x"].c.all()
    calls = []
    namedschema.save({"x": Old(np.empty((2**40, 0)), np.empty((2**40, 0)))}, path)
    Lazy = namedschema.NamedArrayTupleSchema(
        "Step", "a b c", defaults=(np.zeros(0), np.zeros(0),
                                   lambda lead: calls.append(lead) or np.zeros(lead)))
    with pytest.raises(FillLimitError):
        namedschema.load(path, schemas=[Lazy])
    assert calls == []
    # upgrade() on data in memory is the caller's own: no bound there.
    small = Old(np.empty((3, 0)), np.empty((3, 0)))
    assert namedschema.upgrade(small, [New]).c.shape == (3, 0)


# ---------------------------------------------------------------------------
# Generalized: random old/new dtype pairs with random values
# ---------------------------------------------------------------------------

DTYPES = [np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                np.uint16, np.uint32, np.uint64, np.float16, np.float32,
                                np.float64, np.complex64, np.complex128)]


def _kept(v, w, new) -> bool:
    """Oracle: whether the value ``w`` (cast to ``new``) keeps ``v``, from Python values."""
    if new.kind in "biu":
        if isinstance(v, complex):
            if v.imag != 0:
                return False
            v = v.real
        if isinstance(v, float) and not math.isfinite(v):
            return False
        return w == v
    parts = [(v, w)] if new.kind == "f" else [(complex(v).real, complex(w).real),
                                              (complex(v).imag, complex(w).imag)]
    if new.kind == "f" and isinstance(v, complex):
        if v.imag != 0:
            return False
        parts = [(v.real, w)]
    for a, b in parts:
        a, b = float(a), float(b)
        if math.isnan(a) != math.isnan(b) or (math.isfinite(a) and not math.isfinite(b)):
            return False
        if math.isinf(a) and a != b:
            return False
    return True


def _values(rng, dtype, n=12):
    """Values of ``dtype``: its extremes and specials, everyday numbers, random bit patterns."""
    special = [0, 1]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        special += [info.min, info.max, info.max // 2 + 1, -1 if dtype.kind == "i" else 2]
    elif dtype.kind in "fc":
        info = np.finfo(dtype)
        special += [-1.5, 0.7, info.max, -info.max, info.tiny, np.inf, -np.inf, np.nan, 1e300,
                    70000.0, 2.0**40]
        if dtype.kind == "c":
            special += [1j, 3 + 4j]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chosen = np.array([np.array(v).astype(dtype) if not isinstance(v, int) else
                           np.array(v, dtype=object).astype(dtype) for v in special])
    noise = np.frombuffer(rng.bytes(dtype.itemsize * n), dtype=dtype.newbyteorder("="))
    if dtype.kind == "b":
        noise = noise.view(np.uint8) % 2 == 1
    return np.concatenate([chosen, noise.astype(dtype)])[rng.permutation(len(chosen) + n)]


@settings(max_examples=200 if LONG else 6, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_random_dtype_pairs_and_values_against_an_oracle(seed):
    """Generalized: for every pair of dtypes and casting rule, random values cast or refused.

    The oracle (``_kept``) decides from the Python values alone whether a
    cast keeps them; a cast numpy's rule forbids must be refused, one it
    allows must succeed exactly when every value is kept ("unsafe": always),
    and a result is always numpy's own cast.
    """
    rng = np.random.default_rng(seed)
    cases = 0
    for old in DTYPES:
        for new in DTYPES:
            if new == old:
                continue
            picked = _values(rng, old)
            values = picked[:int(rng.integers(1, len(picked) + 1))]
            for casting in ("safe", "same_kind", "unsafe"):
                _check_case(old, new, values, casting)
                cases += 1
    record("round3.dtype_pair_cases", cases)


def _check_case(old, new, values, casting):
    target = _new(new)
    buf = Old(values, np.zeros(len(values)))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        expected = values.astype(new)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            result = namedschema.upgrade(buf, [target], casting=casting).a
        except FieldMismatchError:
            result = None
    allowed = np.can_cast(old, new, casting)
    kept = all(_kept(v.item(), w.item(), new) for v, w in zip(values, expected, strict=True))
    if not allowed:
        assert result is None, (old, new, casting)
    elif casting == "unsafe" or np.can_cast(old, new, "safe"):
        assert result is not None and np.array_equal(result, expected, equal_nan=True)
    else:
        assert (result is not None) == kept, (old, new, values, expected, casting)
        if result is not None:
            assert np.array_equal(result, expected, equal_nan=True)
