"""Property: a class statement and the factory make the same schema for any definition."""

from __future__ import annotations

import inspect
import pickle
import types
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from namedschema import NamedArrayTuple, NamedArrayTupleSchema, NamedTuple, NamedTupleSchema
from namedschema._core.schema import declared_dtypes, has_class_body
from tests.strategies import field_lists, identifiers, plain_values

pytestmark = pytest.mark.slow


def _class_statement(base, typename, fields, defaults):
    def body(namespace):
        namespace["__qualname__"] = f"made.<locals>.{typename}"
        namespace["__module__"] = __name__
        namespace["__annotations__"] = dict.fromkeys(fields, Any)
        for name, value in zip(fields[len(fields) - len(defaults):], defaults, strict=True):
            namespace[name] = value
        namespace["describe"] = lambda self: f"{typename} of {len(self)}"
    return types.new_class(typename, (base,), exec_body=body)


@given(array=st.booleans(), typename=identifiers, fields=field_lists, data=st.data())
def test_class_statement_matches_factory_and_round_trips(array, typename, fields, data):
    n_defaults = data.draw(st.integers(0, len(fields)))
    defaults = tuple(data.draw(st.lists(plain_values, min_size=n_defaults,
                                        max_size=n_defaults)))
    base, kind = ((NamedArrayTuple, NamedArrayTupleSchema) if array
                  else (NamedTuple, NamedTupleSchema))
    cls = _class_statement(base, typename, fields, defaults)
    factory = kind(typename, fields, defaults=defaults or None)
    assert type(cls) is kind and has_class_body(cls) and not has_class_body(factory)
    assert cls._fields == factory._fields == tuple(fields)
    assert cls._field_defaults == factory._field_defaults
    assert str(inspect.signature(cls)) == str(inspect.signature(factory))
    assert declared_dtypes(cls) == dict.fromkeys(fields)
    values = data.draw(st.lists(plain_values, min_size=len(fields), max_size=len(fields)))
    x = cls(*values)
    assert x == factory(*values) and x._asdict() == dict(zip(fields, values, strict=True))
    protocol = data.draw(st.integers(0, pickle.HIGHEST_PROTOCOL))
    back = pickle.loads(pickle.dumps(x, protocol))
    assert type(back) is cls and back == x and back.describe() == x.describe()
    assert pickle.loads(pickle.dumps(cls, protocol)) is cls
