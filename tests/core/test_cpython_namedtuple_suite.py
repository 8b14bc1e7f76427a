"""CPython's own namedtuple tests, run with NamedTupleSchema in place of collections.namedtuple."""

import collections
import types
import unittest

import pytest

from namedschema import NamedTupleSchema

test_collections = pytest.importorskip("test.test_collections")


def _run_suite_with_schemas():
    """Run TestNamedTuple with every namedtuple reference pointing at NamedTupleSchema."""
    mod = test_collections
    saved = {name: mod.__dict__[name] for name in ("namedtuple", "collections", "TestNT")}
    patched_collections = types.ModuleType("collections")
    patched_collections.__dict__.update(collections.__dict__)
    patched_collections.namedtuple = NamedTupleSchema
    mod.namedtuple = NamedTupleSchema
    mod.collections = patched_collections
    mod.TestNT = NamedTupleSchema("TestNT", "x y z", module=mod.__name__)
    try:
        suite = unittest.TestLoader().loadTestsFromTestCase(mod.TestNamedTuple)
        result = unittest.TestResult()
        suite.run(result)
        assert type(mod.TestNT(1, 2, 3)) is mod.TestNT and isinstance(mod.TestNT, NamedTupleSchema)
    finally:
        mod.__dict__.update(saved)
    return result


def test_cpython_testnamedtuple_passes_in_full():
    """Every test of test.test_collections.TestNamedTuple passes against NamedTupleSchema."""
    result = _run_suite_with_schemas()
    problems = [f"{t.id()}: {tb.splitlines()[-1]}" for t, tb in result.failures + result.errors]
    assert problems == []
    assert result.testsRun >= 22
    assert result.skipped == []
