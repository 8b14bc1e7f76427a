"""RunCheckpoint.restore of any mutated file: an exact restore, or one typed error and the
run unchanged (issue 34, items 8-9 as properties; the fixed table is in
test_run_checkpoint_hardening.py).

Two kinds of mutation of a saved checkpoint of every built-in kind:

* bytes: bytes flipped anywhere, the file cut anywhere, or both. The restore is
  exactly the saved run (a flip that lands where nothing is read, padding, changes
  nothing) or raises one ``RunCheckpointError``;
* the state tree: one node replaced (by a value of another type, a nearby value of
  the same type, an array of another shape or dtype), deleted or given a sibling,
  and the tree saved again with ``namedschema.save`` (so every checksum holds: only
  the restore's own checks stand between the file and the run). The restore takes
  exactly what the file says (the restored run, saved again, gives the mutated
  state back; a node the run has no place for is ignored, the run then exactly the
  saved one) or raises one ``RunCheckpointError``. Two leniencies, deliberate: an
  env attribute the file does not name keeps the run's value (a file of an older
  version of the env lacks attributes added since), and so does torch's global
  generator when the file has none (saved before torch was imported).

Either way a refused restore leaves the run's fingerprint (weights, optimizer,
scheduler, env, buffer, generators, counters, the global generators) as it was.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import namedschema
from namedschema.errors import RunCheckpointError
from tests.figures import record

torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

from tests.helpers import examples  # noqa: E402
from tests.training.run_checkpoint_fixtures import advance, build, canon, fingerprint  # noqa: E402

pytestmark = pytest.mark.slow

META = {"kind": "namedschema.RunCheckpoint", "version": "1"}
_SETTINGS = settings(max_examples=examples(60), deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow,
                                            HealthCheck.data_too_large])


class _Saved(tuple):
    def __repr__(self) -> str:         # hypothesis prints it with each failing example
        return f"<checkpoint {self[0]}>"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(path, bytes, tree, fingerprint of an exact restore) of a checkpoint at step 4,000."""
    folder = tmp_path_factory.mktemp("property")
    path = folder / "run.nsc"
    ckpt, run = build(path)
    advance(run)
    ckpt.save(4000, obs=np.arange(4.0))
    ckpt, run = _fresh(path)
    assert ckpt.restore()
    return _Saved((path, path.read_bytes(), namedschema.load(path), fingerprint(run)))


def _fresh(path):
    ckpt, run = build(path)
    advance(run, 1)            # not the saved state: a restore must change it, or not at all
    return ckpt, run


def _restore(path):
    """Restore ``path`` into a fresh run: (the run, its fingerprint before, the error)."""
    ckpt, run = _fresh(path)
    before = fingerprint(run)
    try:
        assert ckpt.restore()
    except RunCheckpointError as exc:
        assert type(exc) is RunCheckpointError, repr(exc)
        assert fingerprint(run) == before, "the run changed before the error"
        assert ckpt.step is None and ckpt.loop == {}
        record("round4.run_refused")
        return ckpt, run, exc
    return ckpt, run, None


# -- bytes ------------------------------------------------------------------------------

@st.composite
def _damaged(draw, content: bytes) -> bytes:
    raw = bytearray(content)
    kind = draw(st.sampled_from(["flip", "cut", "flip-and-cut"]))
    data_start = 8 + int.from_bytes(content[:8], "little")

    def spread(lo: int, hi: int):      # spread over [lo, hi) (hypothesis favours small ints)
        return st.integers(0, 2**32).map(lambda x: lo + x % (hi - lo))

    # the header (JSON, checksummed as a whole) or the arrays (each block checksummed)
    where = st.one_of(spread(0, data_start), spread(data_start, len(raw)))
    if "flip" in kind:
        for at in draw(st.lists(where, min_size=1, max_size=8)):
            raw[at] ^= draw(st.integers(1, 255))
    if "cut" in kind:
        raw = raw[:draw(where)]
    return bytes(raw)


@_SETTINGS
@given(data=st.data())
def test_a_damaged_file_restores_exactly_or_raises_one_typed_error(saved, data):
    path, content, _tree, exact = saved
    damaged = path.with_name("damaged.nsc")
    damaged.write_bytes(data.draw(_damaged(content)))
    record("round4.run_damaged")
    _ckpt, run, error = _restore(damaged)
    if error is None:
        assert fingerprint(run) == exact, "restored, but not the saved run"


# -- the state tree ---------------------------------------------------------------------

def _nodes(tree, path=()):
    """Every (path, value) below the root of ``tree`` (dicts, lists and tuples walked)."""
    if isinstance(tree, dict):
        items = list(tree.items())
    elif isinstance(tree, (list, tuple)) and len(tree) <= 32:
        items = list(enumerate(tree))
    else:
        return
    for key, value in items:
        yield path + (key,), value
        yield from _nodes(value, path + (key,))


def _nearby(draw, value):
    """A value of ``value``'s own type close to it (what a forged file could plausibly say)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + draw(st.sampled_from([-1, 1, -value - 1, 2**31, 2**64]))
    if isinstance(value, float):
        return draw(st.sampled_from([value * 2, -value, 0.0, float("inf"), float("nan"),
                                     1e300]))
    if isinstance(value, str):
        return draw(st.sampled_from(["", value + "x", value[:-1], "PCG64", "MT19937",
                                     "test", "99"]))
    if isinstance(value, np.ndarray) and value.size:
        out = value.copy()
        flat = out.reshape(-1)
        at = draw(st.integers(0, flat.size - 1))
        if out.dtype.kind == "f":
            flat[at] = draw(st.sampled_from([np.nan, np.inf, -1.0, 1e30]))
        elif out.dtype.kind in "iu":
            flat[at] = draw(st.sampled_from([0, 1, np.iinfo(out.dtype).max]))
        else:
            flat[at] = not flat[at]
        return out
    if isinstance(value, torch.Tensor) and value.numel():
        out = value.clone()
        flat = out.view(-1)
        at = draw(st.integers(0, flat.numel() - 1))
        flat[at] = draw(st.sampled_from([0, 1, 255])) if not out.is_floating_point() \
            else draw(st.sampled_from([float("nan"), -1.0, 1e30]))
        return out
    return None


_OTHER = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=6),
    st.lists(st.integers(-3, 3), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(np.zeros, st.integers(0, 20),
              st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.uint64])),
    st.builds(torch.zeros, st.integers(0, 20)))


def _mutate(draw, tree):
    nodes = list(_nodes(tree))
    keys, value = draw(st.sampled_from(nodes))
    parent = tree
    for key in keys[:-1]:
        parent = parent[key]
    how = draw(st.sampled_from(["other", "nearby", "delete", "sibling"]))
    if how == "nearby":
        new = _nearby(draw, value)
        how = "other" if new is None else how
    if how == "other":
        new = draw(_OTHER)
    if isinstance(parent, tuple):   # tuples are rebuilt in their parent
        items = list(parent)
        if how == "delete":
            del items[keys[-1]]
        elif how == "sibling":
            items.append(draw(_OTHER))
        else:
            items[keys[-1]] = new
        return _mutate_at(tree, keys[:-1], tuple(items)), (keys, how)
    if how == "delete":
        del parent[keys[-1]]
    elif how == "sibling":
        if isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=4))] = draw(_OTHER)
        else:
            parent.append(draw(_OTHER))
    else:
        parent[keys[-1]] = new
    return tree, (keys, how)


def _mutate_at(tree, keys, value):
    if not keys:
        return value
    parent = tree
    for key in keys[:-1]:
        parent = parent[key]
    if isinstance(parent, tuple):
        items = list(parent)
        items[keys[-1]] = value
        return _mutate_at(tree, keys[:-1], tuple(items))
    parent[keys[-1]] = value
    return tree


def _by_value(value):
    """``value`` with its scalars compared by value: bools as ints (False == 0), numbers and
    0-d tensors by their value (an optimizer keeps a saved ``step`` of 3 as ``tensor(3.)``),
    integral floats as ints (numpy keeps a generator word of 2.0 as 2)."""
    if isinstance(value, (bool, np.bool_)):
        value = int(value)
    if isinstance(value, torch.Tensor) and value.ndim == 0 and not value.is_complex():
        value = value.item()
    if isinstance(value, dict) and len(value) == 1 and isinstance(
            value.get("namedschema.int"), str):       # RunCheckpoint's exact ints
        value = int(value["namedschema.int"])
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and \
            float(value).is_integer():
        value = int(value)
    if isinstance(value, (int, np.integer)):
        return ("number", str(int(value)))
    if isinstance(value, (float, np.floating)):
        return ("number", repr(float(value)))
    if isinstance(value, dict):
        return {_by_value(k): _by_value(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_by_value(v) for v in value)
    return value


def _state(tree):
    """What a restore must take from a checkpoint tree (settings are compared, not taken)."""
    tree = _by_value(tree)
    return canon({"step": tree.get("step"), "loop": tree.get("loop"), "rng": tree.get("rng"),
                  "components": {name: component.get("state")
                                 for name, component in tree["components"].items()}})


@_SETTINGS
@given(data=st.data())
def test_a_mutated_state_restores_exactly_or_raises_one_typed_error(saved, data):
    path, _content, _tree, exact = saved
    tree = namedschema.load(path)      # a fresh copy each time
    tree, what = _mutate(data.draw, tree)
    forged = path.with_name("forged.nsc")
    try:
        namedschema.save(tree, forged, metadata=META)
    except (TypeError, ValueError):
        return                         # not savable: no file to restore
    record("round4.run_mutated")
    ckpt, run, error = _restore(forged)
    keys, how = what
    if error is None and not (how == "sibling" and fingerprint(run) == exact):
        # taken: exactly what the file says (or a node the run has no place for ignored)
        again = path.with_name("again.nsc")
        namedschema.save(ckpt.state(ckpt.step, **ckpt.loop), again, metadata=META)
        back, file = namedschema.load(again), namedschema.load(forged)
        # Deliberate leniencies: an env attribute the file does not name keeps the run's
        # value (files of an older version of the env lack attributes added since), and
        # so does torch's global generator (a file saved before torch was imported has
        # none). The rest is exact.
        _only_named_env_attributes(back, file)
        _torch_generators_as_torch_keeps_them(file)
        if how == "delete" and keys in (("rng", "torch"), ("rng", "torch_cuda")):
            _pop(back, keys)
        got, want = _state(back), _state(file)
        assert got == want, f"{what}: restored, but {_first_difference(got, want)}"


def _torch_generators_as_torch_keeps_them(file):
    """The file's torch generator states as torch stores them (it ignores some bytes of
    a state: the upper half of each 64-bit word of the Mersenne Twister, for one)."""
    for keys in (("rng", "torch"), ("components", "gen", "state")):
        parent = file
        for key in keys[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        value = parent.get(keys[-1]) if isinstance(parent, dict) else None
        if isinstance(value, torch.Tensor):
            try:
                parent[keys[-1]] = torch.Generator().set_state(value).get_state()
            except (RuntimeError, TypeError, ValueError):
                pass


def _only_named_env_attributes(back, file):
    try:
        layers = file["components"]["env"]["state"]["captured"]["layers"]
        ours = back["components"]["env"]["state"]["captured"]["layers"]
    except (KeyError, TypeError):
        return
    for theirs, mine in zip(layers, ours, strict=False):
        if isinstance(theirs, dict) and isinstance(theirs.get("attributes"), dict):
            named = theirs["attributes"]
            mine["attributes"] = {k: v for k, v in mine["attributes"].items() if k in named}


def _pop(tree, keys):
    for key in keys[:-1]:
        tree = tree[key]
    tree.pop(keys[-1], None)


def _first_difference(got, want, where="") -> str:
    if type(got) is not type(want) or not isinstance(got, (tuple, list)) \
            or len(got) != len(want):
        return f"at {where or 'the top'} the run has {got!r:.200}, the file {want!r:.200}"
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if a != b:
            label = a[0] if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str) \
                and a[0].startswith("'") else str(i)
            return _first_difference(a, b, f"{where}/{label}" if label != str(i) or
                                     not isinstance(got, list) else f"{where}[{i}]")
    return "no difference found"


# -- what the property found (kept as fixed cases) --------------------------------------

_STEP = ("components", "opt", "state", "state", "namedschema.keyed", 0, 1, "step")


@pytest.mark.parametrize("value", [None, "delete"])
def test_an_optimizer_state_its_optimizer_would_refuse_is_refused_first(saved, value):
    """The optimizer's own ``load_state_dict`` refused a per-parameter ``step`` that is
    None or missing, after the network had been restored: now refused before."""
    path, _content, _tree, _exact = saved
    tree = namedschema.load(path)
    entry = tree
    for key in _STEP[:-1]:
        entry = entry[key]
    if value == "delete":
        del entry["step"]
    else:
        entry["step"] = value
    forged = path.with_name("forged-step.nsc")
    namedschema.save(tree, forged, metadata=META)
    _ckpt, _run, error = _restore(forged)
    assert error is not None and "nothing in the run changed" in str(error)
