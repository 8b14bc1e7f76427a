"""The fake rlpyt (tests/rlpyt/fake_rlpyt.py) behaves like the real one.

The fake reproduces rlpyt's patterns for tests that need patterns the real rlpyt
cannot produce on demand; wherever both have a behaviour, this test runs the same
cases through both ``rlpyt.utils.collections`` modules and compares the outcomes:
the reserved names, ``namedarraytuple`` (class layout, names with and without
suffixes, indexing, writes including ``None`` fields and values, errors), the
``is_*`` predicates on every kind of class, and ``namedarraytuple_like``.
"""

from __future__ import annotations

import ast
import collections
import importlib.util
import os
import sys
import types

import numpy as np
import pytest

from namedschema import NamedArrayTupleSchema, NamedTupleSchema
from tests.rlpyt.fake_rlpyt import FILES


@pytest.fixture(scope="module")
def real(rlpyt_root):
    path = os.path.join(rlpyt_root, "rlpyt", "utils", "collections.py")
    spec = importlib.util.spec_from_file_location("real_rlpyt_collections", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # the file imports only the standard library
    yield module
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def fake():
    module = types.ModuleType("fake_rlpyt_collections")
    sys.modules[module.__name__] = module
    exec(compile(FILES["rlpyt/utils/collections.py"], "fake collections", "exec"),
         module.__dict__)
    yield module
    del sys.modules[module.__name__]


def _outcome(func):
    """What calling ``func`` did: ('ok', value description) or ('raised', type, message)."""
    try:
        value = func()
    except Exception as exc:
        # rlpyt's own messages (naming the failing field) must match; a TypeError
        # from a predicate may word its reason differently.
        message = str(exc).replace("real_rlpyt_collections", "M")
        message = message.replace("fake_rlpyt_collections", "M")
        if not message.startswith("Occured in"):
            message = "..."
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else None
        return ("raised", type(exc).__name__, message, cause)
    return ("ok", _describe(value))


def _describe(value):
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes().hex())
    if isinstance(value, type):
        return ("class", value.__name__, len(value.mro()))
    if isinstance(value, tuple):
        return (type(value).__name__, tuple(_describe(v) for v in value))
    if isinstance(value, list):
        return [_describe(v) for v in value]
    if isinstance(value, types.GeneratorType):
        return ("iterator", [_describe(v) for v in value])
    return value


def _both(real, fake, case):
    ours, theirs = _outcome(lambda: case(fake)), _outcome(lambda: case(real))
    assert ours == theirs, f"fake: {ours}\nreal: {theirs}"
    return theirs


def test_reserved_names(real, fake):
    assert fake.RESERVED_NAMES == real.RESERVED_NAMES
    for name in real.RESERVED_NAMES:
        assert _both(real, fake, lambda m, n=name: m.namedarraytuple("X", ["a", n]))[0] \
            == "raised"


def test_class_layout_and_names(real, fake):
    for kwargs in ({}, {"classname_suffix": True}, {"return_namedtuple_cls": True},
                   {"return_namedtuple_cls": True, "classname_suffix": True}):
        _both(real, fake, lambda m, kw=kwargs: m.namedarraytuple("Pt", ["x", "y"], **kw))
    _both(real, fake, lambda m: m.namedarraytuple("Pt", "x y")._fields)
    _both(real, fake, lambda m: m.namedarraytuple("Pt", ["x", "y"]).__module__)


def _make(m):
    P = m.namedarraytuple("P", ["a", "b", "c"])
    return P, P(np.arange(4.0), np.zeros((4, 2)), None)


@pytest.mark.parametrize("loc", [1, slice(1, 3), [0, 2], 7, (0, 5)])
def test_reads(real, fake, loc):
    _both(real, fake, lambda m: _make(m)[1][loc])


@pytest.mark.parametrize("value", [
    "same fields", "same fields, None into a None field", "None field given a value",
    "broadcast 5", "broadcast None", "wrong shape", "a plain tuple",
])
@pytest.mark.parametrize("loc", [1, slice(0, 2), 9])
def test_writes(real, fake, value, loc):
    def case(m):
        P, p = _make(m)
        values = {
            "same fields": lambda: P(7.0, np.ones(2), None),
            "same fields, None into a None field": lambda: P(None, None, None),
            "None field given a value": lambda: P(1.0, np.ones(2), 3.0),
            "broadcast 5": lambda: 5,
            "broadcast None": lambda: None,
            "wrong shape": lambda: P(1.0, np.ones(5), None),
            "a plain tuple": lambda: (1.0, 2.0, 3.0),
        }
        p[loc] = values[value]()
        return p
    _both(real, fake, case)


def test_instance_helpers(real, fake):
    _both(real, fake, lambda m: _make(m)[1].get(0))
    _both(real, fake, lambda m: ("a" in _make(m)[1], "get" in _make(m)[1]))
    _both(real, fake, lambda m: list(_make(m)[1].items()))
    _both(real, fake, lambda m: _make(m)[1]._asdict()["a"])


def _classes(m):
    Std = collections.namedtuple("Std", "a b")

    class SubStd(Std):
        pass

    Nat = m.namedarraytuple("Nat", ["a", "b"])

    class SubNat(Nat):
        pass

    class WithMeta(tuple, metaclass=type("Meta", (type,), {})):
        _fields, _asdict, _make, _replace = ("a",), None, None, None

    return {"namedtuple": Std, "namedtuple subclass": SubStd, "namedarraytuple": Nat,
            "namedarraytuple subclass": SubNat, "tuple": tuple, "type": type, "int": int,
            "other metaclass": WithMeta, "schema": NamedTupleSchema("S", "a b"),
            "array schema": NamedArrayTupleSchema("S", "a b"), "not a class": 3}


@pytest.mark.parametrize("predicate", ["is_namedtuple_class", "is_namedarraytuple_class"])
def test_class_predicates(real, fake, predicate):
    for name in _classes(real):
        _both(real, fake, lambda m, n=name: (n, getattr(m, predicate)(_classes(m)[n])))


@pytest.mark.parametrize("predicate", ["is_namedtuple", "is_namedarraytuple"])
def test_instance_predicates(real, fake, predicate):
    def instances(m):
        made = _classes(m)
        return {"namedtuple": made["namedtuple"](1, 2),
                "namedarraytuple": made["namedarraytuple"](1, 2),
                "schema": made["schema"](1, 2), "tuple": (1, 2), "int": 1}
    for name in instances(real):
        _both(real, fake, lambda m, n=name: (n, getattr(m, predicate)(instances(m)[n])))


@pytest.mark.parametrize("example", ["namedtuple", "namedtuple instance", "namedarraytuple",
                                     "namedarraytuple instance", "tuple", "schema"])
def test_namedarraytuple_like(real, fake, example):
    def case(m):
        made = _classes(m)
        chosen = {"namedtuple": made["namedtuple"],
                  "namedtuple instance": made["namedtuple"](1, 2),
                  "namedarraytuple": made["namedarraytuple"],
                  "namedarraytuple instance": made["namedarraytuple"](1, 2),
                  "tuple": (1, 2), "schema": made["schema"]}[example]
        result = m.namedarraytuple_like(chosen)
        return result, result is chosen or result is type(chosen)
    _both(real, fake, case)


def _defines(source: str) -> dict:
    """What a module defines at its top level: name -> how (class bases, arguments, value)."""
    found: dict = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = ("class", tuple(ast.unparse(b) for b in node.bases))
        elif isinstance(node, ast.FunctionDef):
            found[node.name] = ("function", tuple(a.arg for a in node.args.args))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                found[alias.asname or alias.name.split(".")[0]] = ("import", alias.name)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                args = [ast.unparse(a) for a in value.args]   # fields, as written
                if value.func.id in ("namedtuple", "namedarraytuple"):
                    args[1:] = [str(ast.literal_eval(a) if a[:1] in "[(" else a)
                                for a in args[1:]]
                found[node.targets[0].id] = ("call", value.func.id, tuple(args))
            else:
                found[node.targets[0].id] = ("value", ast.unparse(value))
    return found


def test_stand_in_modules_mirror_the_real_ones(rlpyt_root):
    """Each stand-in module is where rlpyt has it, and defines what it defines there alike.

    Classes with the same bases, functions with the same leading arguments, the same
    imports, module-level named tuples with the same fields, the same ``None`` globals.
    """
    differences = []
    for path in sorted(p for p, source in FILES.items() if source):
        with open(os.path.join(rlpyt_root, *path.split("/")), encoding="utf-8") as f:
            real = _defines(f.read())
        for name, how in _defines(FILES[path]).items():
            theirs = real.get(name)
            if theirs and how[0] == "function":   # the stand-in may leave out trailing ones
                theirs = (theirs[0], theirs[1][:len(how[1])])
            if how != theirs:
                differences.append(f"{path}: {name} is {how} in the stand-in, {theirs} in rlpyt")
    assert not differences, "\n".join(differences)
