"""Property tests: random schema changes load by the evolution rules, or fail as documented."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from namedschema import NamedArrayTupleSchema, upgrade
from namedschema.errors import SchemaEvolutionError
from tests.evolution import pairs as ep

# Leading sizes differ from every element size (2, 3): with equal sizes the saved
# shapes alone cannot tell leading from element dimensions (docs/evolution.rst).
LEADING = st.sampled_from([(5,), (5, 4), (0, 4)])


def make_schema(typename, fields, defaults=None):
    return NamedArrayTupleSchema(typename, fields, defaults=defaults or None)


@given(ep.pairs(), LEADING, st.sampled_from(ep.EXTRAS), st.sampled_from(ep.CASTINGS))
def test_random_schema_changes_follow_the_rules(pair, leading, extra, casting):
    """Compatible pairs upgrade to exactly what the rules say; others raise a documented error naming the field."""
    old = ep.old_instance(pair, leading, make_schema)
    classes = ep.new_schemas(pair, make_schema)
    errors = ep.expected_errors(pair, extra, casting)
    holder = {"buf": old}
    try:
        result, report = upgrade(holder, list(classes.values()), extra=extra,
                                 casting=casting, report=True)
    except SchemaEvolutionError as exc:
        got = (type(exc).__name__, exc.schema, exc.field)
        assert got in errors, (got, errors)
        assert exc.field in str(exc) and exc.schema in str(exc)
        assert holder["buf"] is old          # nothing changed
        return
    assert not errors, f"expected one of {errors}, but it upgraded"
    assert result is holder
    ep.check_upgraded(holder["buf"], old, pair, classes, leading, extra, report, "buf")


@given(ep.pairs(compatible=True), LEADING, st.sampled_from(["ignore", "keep"]))
def test_compatible_changes_give_what_the_rules_say(pair, leading, extra):
    """Pairs the rules accept always upgrade, to exactly the values the rules give."""
    old = ep.old_instance(pair, leading, make_schema)
    classes = ep.new_schemas(pair, make_schema)
    assert not ep.expected_errors(pair, extra, "unsafe")
    holder = {"buf": old}
    _result, report = upgrade(holder, list(classes.values()), extra=extra,
                              casting="unsafe", report=True)
    ep.check_upgraded(holder["buf"], old, pair, classes, leading, extra, report, "buf")


@given(ep.pairs(depth=0), LEADING)
def test_reordering_alone_keeps_every_array(pair, leading):
    """Permuting the fields (nothing added, removed or retyped) maps every array by name."""
    old = ep.old_instance(pair, leading, make_schema)
    New = make_schema(pair.typename, list(reversed(old._fields)))
    new = upgrade(old, [New])
    assert type(new) is New
    for name in old._fields:
        assert getattr(new, name) is getattr(old, name)


@given(ep.pairs(), LEADING, st.sampled_from(ep.CASTINGS))
def test_upgrade_is_idempotent(pair, leading, casting):
    """Upgrading an upgraded structure again changes nothing."""
    old = ep.old_instance(pair, leading, make_schema)
    classes = list(ep.new_schemas(pair, make_schema).values())
    try:
        once = upgrade(old, classes, extra="ignore", casting=casting)
    except SchemaEvolutionError:
        return
    assert upgrade(once, classes, extra="error", casting="no") is once
