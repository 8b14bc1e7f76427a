"""Factory calls type checkers must reject (see fail_class_syntax.py for the markers)."""

from namedschema import NamedArrayTupleSchema, NamedTupleSchema, namedarraytuple, namedtuple

NamedTupleSchema("P", "x y", (0,))  # expect-error: defaults are keyword-only
NamedTupleSchema("P", "x y", default=(0,))  # expect-error: wrong keyword
NamedArrayTupleSchema("P")  # expect-error: missing field names
namedtuple("P", 3)  # expect-error: field names must be strings
namedarraytuple("S", "a", rename=True)  # expect-error: rlpyt's signature has no rename
P = namedtuple("P", "x")
P(1)._replace(1)  # expect-error: _replace takes keywords only
