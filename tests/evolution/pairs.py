"""Random (old schema, new schema) pairs and what the evolution rules say about them.

A *pair* describes one schema before and after a code change: fields added
(with or without a default), removed, reordered, retyped (a declared dtype or
element shape that differs from the saved one), and one optionally nested
pair. From a pair the tests build the old instance (saved data), the new
schema (today's code, possibly as module source for a fresh interpreter),
and the expected outcome: the set of errors the rules allow, or the values
the upgraded instance must hold.

Declarations go through numpy-typed defaults, which namedtuple semantics put
on the rightmost fields: the new field order is the undeclared fields, then
the defaulted ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32",
          "float64"]
ELEMENT_SHAPES = [(), (2,), (3,)]
NAMES = ["obs", "action", "reward", "done", "value", "mask", "prev_action", "timeout",
         "info", "rnn", "cost", "step"]
NESTED_NAMES = ["pos", "vel", "goal", "angle", "speed", "height", "width", "color"]
CASTINGS = ["no", "equiv", "safe", "same_kind", "unsafe"]
EXTRAS = ["error", "ignore", "keep"]


@dataclass
class Field:
    name: str
    dtype: str = "float32"                 # saved dtype (old) / default dtype (added)
    shape: tuple = ()                      # element shape
    nested: Pair | None = None             # a nested schema instead of an array
    # new-schema side
    kept: bool = True                      # present in the new schema (old fields)
    declared: tuple | None = None          # (dtype, shape) declared by a numpy default
    default: object = None                 # for added fields: "none" for no default


@dataclass
class Pair:
    typename: str
    old: list = field(default_factory=list)      # Field, in saved order
    added: list = field(default_factory=list)    # Field with default spec
    order: list = field(default_factory=list)    # new field names, in new order


@st.composite
def pairs(draw, depth: int = 1, typename: str = "Samples", names=NAMES,
          compatible: bool = False) -> Pair:
    """A random pair; the old schema always has a float32 field of element shape ().

    ``compatible`` draws only pairs that upgrade with ``casting="unsafe"`` and
    ``extra="ignore"``/``"keep"``: every added field has a default and no
    declared element shape differs from the saved one.
    """
    n_old = draw(st.integers(1, 4))
    chosen = draw(st.lists(st.sampled_from(names), min_size=n_old + 3, max_size=n_old + 3,
                           unique=True))
    old_names, spare = chosen[:n_old], chosen[n_old:]
    pair = Pair(typename)
    nested_at = draw(st.integers(0, n_old)) if depth > 0 else n_old
    for i, name in enumerate(old_names):
        if i == nested_at:
            inner = draw(pairs(depth - 1, typename="Inner", names=NESTED_NAMES,
                               compatible=compatible))
            pair.old.append(Field(name, nested=inner, kept=draw(st.booleans())))
            continue
        f = Field(name, draw(st.sampled_from(DTYPES)), draw(st.sampled_from(ELEMENT_SHAPES)))
        f.kept = draw(st.integers(0, 3)) > 0
        if f.kept and draw(st.booleans()):
            f.declared = (draw(st.sampled_from([f.dtype] * 3 + DTYPES)),
                          f.shape if compatible else
                          draw(st.sampled_from([f.shape] * 4 + ELEMENT_SHAPES)))
        pair.old.append(f)
    # The leading shape must be readable from the saved data: one field of shape ().
    pair.old.append(Field("scalar_" + typename.lower(), "float32", (),
                          kept=draw(st.booleans())))
    for name in spare[:draw(st.integers(0, len(spare)))]:
        kind = draw(st.sampled_from(["scalar", "scalar", "zero", "array"]
                                    + ([] if compatible else ["none"])))
        pair.added.append(Field(name, draw(st.sampled_from(DTYPES)),
                                draw(st.sampled_from(ELEMENT_SHAPES)) if kind == "array"
                                else (), kept=True, default=kind))
    undeclared = [f.name for f in pair.old if f.kept and f.declared is None] + \
        [f.name for f in pair.added if f.default == "none"]
    defaulted = [f.name for f in pair.old if f.kept and f.declared is not None] + \
        [f.name for f in pair.added if f.default != "none"]
    pair.order = draw(st.permutations(undeclared)) + draw(st.permutations(defaulted))
    return pair


# --------------------------------------------------------------------------
# Building values and schemas
# --------------------------------------------------------------------------

def array_for(dtype, shape, seed):
    n = int(np.prod(shape)) if shape else 1
    return (np.arange(seed, seed + n) % 7).reshape(shape).astype(dtype)


def default_value(f: Field):
    """The default an added field gets (a numpy scalar or array)."""
    dtype = np.dtype(f.dtype)
    if f.default == "zero":
        return dtype.type(0)
    if f.default == "array":
        return np.full(f.shape, 1, dtype)
    return dtype.type(1)


def declared_value(decl):
    dtype, shape = decl
    return np.zeros(shape, dtype) if shape else np.dtype(dtype).type(0)


def _field_by_name(pair):
    return {f.name: f for f in pair.old + pair.added}


def new_defaults(pair):
    """The new schema's defaults, as values, for the defaulted suffix of ``order``."""
    by_name = _field_by_name(pair)
    out = []
    for name in pair.order:
        f = by_name[name]
        if f in pair.added and f.default != "none":
            out.append(default_value(f))
        elif f in pair.old and f.declared is not None:
            out.append(declared_value(f.declared))
    return tuple(out)


def old_instance(pair, leading, make_schema, seed=0):
    """The saved instance; ``make_schema(typename, fields)`` makes the old class."""
    cls = make_schema(pair.typename, [f.name for f in pair.old])
    values = []
    for i, f in enumerate(pair.old):
        if f.nested is not None:
            values.append(old_instance(f.nested, leading, make_schema, seed + 100 * (i + 1)))
        else:
            values.append(array_for(f.dtype, leading + f.shape, seed + i))
    return cls(*values)


def new_schemas(pair, make_schema):
    """{typename: class} of the new schemas, nested ones included."""
    out = {}
    for f in pair.old:
        if f.nested is not None:
            out.update(new_schemas(f.nested, make_schema))
    out[pair.typename] = make_schema(pair.typename, pair.order, new_defaults(pair))
    return out


def _literal(value):
    if isinstance(value, np.ndarray):
        return f"np.full({value.shape!r}, {value.flat[0].item()!r}, np.{value.dtype.name})" \
            if value.size else f"np.zeros({value.shape!r}, np.{value.dtype.name})"
    return f"np.{value.dtype.name}({value.item()!r})"


def module_source(pair):
    """Python source of a module defining the new schemas at module level."""
    lines = ["import numpy as np", "from namedschema import NamedArrayTupleSchema", ""]

    def emit(p):
        for f in p.old:
            if f.nested is not None:
                emit(f.nested)
        defaults = ", ".join(_literal(v) for v in new_defaults(p))
        lines.append(f"{p.typename} = NamedArrayTupleSchema({p.typename!r}, {p.order!r}, "
                     f"defaults=({defaults}{',' if defaults else ''}))")
    emit(pair)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# What the rules say
# --------------------------------------------------------------------------

def expected_errors(pair, extra, casting, path=None):
    """{(error class name, typename, field)} the rules allow; empty when compatible.

    A missing field, an extra one and a dtype or shape mismatch are all a
    SchemaEvolutionError (issue 29 merged MissingFieldError, ExtraFieldError and
    FieldMismatchError into it; the old names are aliases)."""
    out = set()
    for f in pair.added:
        if f.default == "none":
            out.add(("SchemaEvolutionError", pair.typename, f.name))
    if extra == "error":
        for f in pair.old:
            if not f.kept:
                out.add(("SchemaEvolutionError", pair.typename, f.name))
    for f in pair.old:
        if not f.kept and extra == "ignore":
            continue   # dropped unseen
        if f.nested is not None:
            out |= expected_errors(f.nested, extra, casting)
            continue
        if f.kept and f.declared is not None:
            dtype, shape = f.declared
            if tuple(shape) != tuple(f.shape) or not np.can_cast(
                    np.dtype(f.dtype), np.dtype(dtype), casting):
                out.add(("SchemaEvolutionError", pair.typename, f.name))
    return out


def check_upgraded(new, old, pair, classes, leading, extra, report, path):
    """Assert that ``new`` is what the rules make of ``old``."""
    cls = classes[pair.typename]
    assert type(new) is cls, (type(new), cls)
    assert new._fields == tuple(pair.order)
    by_old = old._asdict()
    for f in pair.old:
        saved = by_old[f.name]
        if not f.kept:
            if extra == "keep":
                kept = report.kept_fields(path)
                assert f.name in kept, (path, f.name, report.kept)
                if f.nested is None:
                    assert kept[f.name] is saved
            else:
                assert f.name not in new._fields
            continue
        value = getattr(new, f.name)
        if f.nested is not None:
            check_upgraded(value, saved, f.nested, classes, leading, extra, report,
                           f"{path}.{f.name}")
        elif f.declared is None or np.dtype(f.declared[0]) == saved.dtype:
            assert value is saved, (path, f.name)
        else:
            assert value.dtype == np.dtype(f.declared[0])
            assert np.array_equal(value, saved.astype(f.declared[0]))
            assert value.shape == saved.shape
    for f in pair.added:
        value = getattr(new, f.name)
        want = default_value(f)
        assert value.shape == leading + np.shape(want), (f.name, value.shape, leading)
        assert value.dtype == np.asarray(want).dtype
        assert np.all(value == want)
