"""CPython's tests, applied to class-syntax schemas.

* ``test.test_collections.TestNamedTuple`` runs with ``namedtuple`` replaced by a function
  that makes every type with a class statement (``types.new_class``) below
  ``namedschema.NamedTuple``: the whole suite passes except the tests of ``rename=True`` and of
  duplicate field names, which a class body cannot express.
* ``test.test_typing.NamedTupleTests``, the tests of ``typing.NamedTuple``'s class syntax,
  adapted (rewritten here) to namedschema. Where namedschema deliberately differs it says so:
  ``__add__`` (tuple's own operator) may not be replaced, errors are SchemaClassError (a
  TypeError, where typing raises AttributeError for reserved names), and generic schemas are
  refused.
"""

import collections
import copy
import pickle
import sys
import types
import typing
import unittest

import pytest

from namedschema import NamedArrayTuple, NamedTuple, NamedTupleSchema, SchemaClassError

test_collections = pytest.importorskip("test.test_collections")

# What a class statement cannot say: renaming invalid names, and duplicate field names.
NOT_APPLICABLE = {
    "test_factory": "asserts that duplicate field names raise ValueError",
    "test_keyword_only_arguments": "uses rename=True",
    "test_name_fixer": "uses rename=True",
}


def class_syntax_namedtuple(typename, field_names, *, rename=False, defaults=None, module=None):
    """``collections.namedtuple``'s signature, making the type by a class statement."""
    if isinstance(field_names, str):
        field_names = field_names.replace(",", " ").split()
    field_names = list(map(str, field_names))
    defaults = () if defaults is None else tuple(defaults)
    if len(defaults) > len(field_names):
        raise TypeError("Got more default values than field names")
    if module is None:
        module = sys._getframe(1).f_globals.get("__name__", "__main__")

    def body(namespace):
        namespace["__module__"] = module
        namespace["__annotations__"] = dict.fromkeys(field_names, typing.Any)
        for name, value in zip(field_names[len(field_names) - len(defaults):], defaults,
                               strict=True):
            namespace[name] = value
    cls = types.new_class(str(typename), (NamedTuple,), exec_body=body)
    assert "_schema_body" in cls.__dict__  # made by the class-syntax path
    return cls


@pytest.mark.slow
def test_cpython_testnamedtuple_passes_with_class_statements():
    mod = test_collections
    saved = {name: mod.__dict__[name] for name in ("namedtuple", "collections", "TestNT")}
    patched = types.ModuleType("collections")
    patched.__dict__.update(collections.__dict__)
    patched.namedtuple = class_syntax_namedtuple
    mod.namedtuple = class_syntax_namedtuple
    mod.collections = patched
    mod.TestNT = class_syntax_namedtuple("TestNT", "x y z", module=mod.__name__)
    try:
        suite = unittest.TestLoader().loadTestsFromTestCase(mod.TestNamedTuple)
        result = unittest.TestResult()
        suite.run(result)
        assert isinstance(mod.TestNT, NamedTupleSchema)
    finally:
        mod.__dict__.update(saved)
    failed = {t.id().rsplit(".", 1)[-1]: tb.splitlines()[-1]
              for t, tb in result.failures + result.errors}
    assert set(failed) <= set(NOT_APPLICABLE), failed
    assert result.testsRun >= 22 and result.testsRun - len(failed) >= 19
    assert result.skipped == []


# The module-level definitions test_typing uses, in namedschema's terms.
class CoolEmployee(NamedTuple):
    name: str
    cool: int


class CoolEmployeeWithDefault(NamedTuple):
    name: str
    cool: int = 0


class XMeth(NamedTuple):
    x: int

    def double(self):
        return 2 * self.x


class XRepr(NamedTuple):
    x: int
    y: int = 1

    def __str__(self):
        return f"{self.x} -> {self.y}"

    def __sub__(self, other):  # typing's test uses __add__, which tuples already have
        return 0


class TestNamedTupleClassSyntax:
    class NestedEmployee(NamedTuple):
        name: str
        cool: int

    def test_annotation_usage(self):
        tim = CoolEmployee("Tim", 9000)
        assert isinstance(tim, CoolEmployee) and isinstance(tim, tuple)
        assert (tim.name, tim.cool) == ("Tim", 9000)
        assert CoolEmployee.__name__ == "CoolEmployee"
        assert CoolEmployee._fields == ("name", "cool")
        assert CoolEmployee.__annotations__ == {"name": str, "cool": int}

    def test_annotation_usage_with_default(self):
        jelle = CoolEmployeeWithDefault("Jelle")
        assert isinstance(jelle, CoolEmployeeWithDefault) and isinstance(jelle, tuple)
        assert (jelle.name, jelle.cool) == ("Jelle", 0)
        assert CoolEmployeeWithDefault("Sjoerd", 1).cool == 1
        assert CoolEmployeeWithDefault._fields == ("name", "cool")
        assert CoolEmployeeWithDefault.__annotations__ == {"name": str, "cool": int}
        assert CoolEmployeeWithDefault._field_defaults == {"cool": 0}
        with pytest.raises(TypeError):
            class NonDefaultAfterDefault(NamedTuple):
                x: int = 3
                y: int

    def test_annotation_usage_with_methods(self):
        assert XMeth(1).double() == 2 and XMeth(42).x == XMeth(42)[0]
        assert str(XRepr(42)) == "42 -> 1" and XRepr(1, 2) - XRepr(3) == 0
        with pytest.raises(TypeError, match="'_fields' cannot be defined"):
            class XMethBad(NamedTuple):
                x: int

                def _fields(self):
                    return "no chance for this"
        with pytest.raises(TypeError, match="'__add__' cannot be defined"):
            class XAdd(NamedTuple):
                x: int

                def __add__(self, other):
                    return 0

    def test_multiple_inheritance(self):
        class A:
            pass

        class B(NamedTuple):
            x: int
        for bases in [(NamedTuple, A), (NamedTuple, tuple), (NamedTuple, B),
                      (NamedArrayTuple, NamedTuple)]:
            with pytest.raises(TypeError):
                types.new_class("X", bases, exec_body=lambda ns: ns.update(
                    __annotations__={"y": str}))
        with pytest.raises(TypeError):
            # the duplicate base is the case under test
            class Z(NamedTuple, NamedTuple):  # noqa: PLE0241
                x: int

    def test_generic_is_refused(self):
        T = typing.TypeVar("T")
        with pytest.raises(SchemaClassError, match="exactly one base class"):
            class X(NamedTuple, typing.Generic[T]):
                x: T

    def test_non_generic_subscript(self):
        T = typing.TypeVar("T")

        class Group(NamedTuple):
            key: T
            group: list[T]
        alias = Group[int]
        assert alias.__origin__ is Group and alias.__args__ == (int,)
        a = alias(1, [2])
        assert type(a) is Group and a == (1, [2])

    def test_special_keyword_names(self):
        class NT(NamedTuple):
            cls: type
            self: object
            typename: str
            fields: list
        a = NT(cls=str, self=42, typename="foo", fields=[("bar", tuple)])
        assert NT._fields == ("cls", "self", "typename", "fields")
        assert (a.cls, a.self, a.typename, a.fields) == (str, 42, "foo", [("bar", tuple)])

    def test_empty_namedtuple(self):
        class CNT(NamedTuple):
            pass
        assert CNT._fields == () and CNT._field_defaults == {} and CNT.__annotations__ == {}
        assert isinstance(CNT(), CNT)

    @pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
    def test_copy_and_pickle(self, protocol):
        for cls in (CoolEmployee, self.NestedEmployee):
            jane = cls("jane", 37)
            back = pickle.loads(pickle.dumps(jane, protocol))
            assert back == jane and type(back) is cls
            for copier in (copy.copy, copy.deepcopy):
                assert copier(jane) == jane and type(copier(jane)) is cls
        assert self.NestedEmployee.__qualname__ == "TestNamedTupleClassSyntax.NestedEmployee"
