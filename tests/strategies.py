"""Hypothesis strategies shared by the property tests: names, schemas, example values."""

from __future__ import annotations

import keyword

import numpy as np
from hypothesis import strategies as st

from namedschema import NamedArrayTupleSchema, NamedTupleSchema

_first = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZéλ")
_rest = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_ßπ", max_size=8)

identifiers = st.builds(lambda a, b: a + b, _first, _rest).filter(
    lambda s: s.isidentifier() and not keyword.iskeyword(s))
field_names = identifiers.filter(lambda s: s not in ("get", "items"))
field_lists = st.lists(field_names, max_size=10, unique=True)

NUMERIC_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                  "uint64", "float16", "float32", "float64", "complex64", "complex128"]


@st.composite
def arrays(draw, leading: int | None = None, max_dims: int = 3):
    """A numpy array of any numeric dtype; first dimension ``leading`` if given."""
    dtype = np.dtype(draw(st.sampled_from(NUMERIC_DTYPES)))
    shape = draw(st.lists(st.integers(0, 4), max_size=max_dims))
    if leading is not None:
        shape = [leading] + shape
    size = int(np.prod(shape)) if shape else 1
    raw = draw(st.binary(min_size=size * dtype.itemsize, max_size=size * dtype.itemsize))
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy() if size else np.zeros(shape, dtype)


plain_values = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=False), st.text(max_size=5))


@st.composite
def schemas(draw, array: bool | None = None):
    """A fresh NamedTupleSchema or NamedArrayTupleSchema with random names and defaults."""
    kind = NamedArrayTupleSchema if (draw(st.booleans()) if array is None else array) \
        else NamedTupleSchema
    fields = draw(field_lists)
    n_defaults = draw(st.integers(0, len(fields)))
    defaults = tuple(draw(st.lists(plain_values, min_size=n_defaults, max_size=n_defaults)))
    return kind(draw(identifiers), fields, defaults=defaults or None)


@st.composite
def nested_instances(draw, depth: int = 2, leading: int = 3):
    """A NamedArrayTuple whose leaves are arrays with first dim ``leading``, None, or nested."""
    schema = draw(schemas(array=True))
    values = []
    for _ in schema._fields:
        choice = draw(st.integers(0, 4 if depth > 0 else 3))
        if choice == 4:
            values.append(draw(nested_instances(depth=depth - 1, leading=leading)))
        elif choice == 0:
            values.append(None)
        else:
            values.append(draw(arrays(leading=leading)))
    return schema(*values)


@st.composite
def plain_instances(draw):
    """An instance of a random NamedTupleSchema holding plain picklable values."""
    schema = draw(schemas(array=False))
    return schema._make(draw(st.lists(plain_values, min_size=len(schema._fields),
                                      max_size=len(schema._fields))))
