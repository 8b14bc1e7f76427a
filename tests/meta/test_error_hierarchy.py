"""Every exception namedschema raises to users derives from NamedSchemaError and every warning
it gives from NamedSchemaWarning (one place to catch), and all of them are defined in
namedschema.errors. The classes are found by reading every module of the package (class
statements at any depth), not from a list, so a new one cannot slip past."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import namedschema
from namedschema import errors
from namedschema.errors import NamedSchemaError, NamedSchemaWarning

pytestmark = pytest.mark.slow

PACKAGE = Path(namedschema.__file__).parent

# Exceptions that never leave namedschema: internal control flow, caught where raised.
INTERNAL = {
    "namedschema.checkpoint._tracking.TooMuch",
    "namedschema.checkpoint._graph.NotData",
    "namedschema.state.plain.NotDataValue",
    "namedschema.state.env._Unknown",
    "namedschema.checkpoint._journal.Unusable",
    "namedschema.checkpoint._squeezed._Stop",
    "namedschema.checkpoint._squeezed._ToChild",   # a _Stop: the snapshot child compares
}
# The adapter imports nothing of namedschema: the twin tests load it from its file in runs
# of rlpyt alone (namedschema never imported), so its error is a plain ImportError.
STANDALONE = {"namedschema.rlpyt.atari_py_adapter.AdapterError": ImportError}
# Modules that need an optional dependency; skipped (with the reason) when it is missing.
OPTIONAL = {"namedschema.integrations.torch": "torch"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _class_statements():
    """(module, qualname, nested_in_function, base names) of every class statement."""
    def visit(module, node, prefix, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                bases = [ast.unparse(b) for b in child.bases]
                yield module, prefix + child.name, in_function, bases
                yield from visit(module, child, prefix + child.name + ".", in_function)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from visit(module, child, prefix + child.name + ".<locals>.", True)
            else:
                yield from visit(module, child, prefix, in_function)

    for path in sorted(PACKAGE.rglob("*.py")):
        yield from visit(_module_name(path), ast.parse(path.read_text(), str(path)), "", False)


def _exception_classes():
    """qualified name -> class, for every exception or warning class the package defines."""
    found, unreachable = {}, []
    for module_name, qualname, in_function, bases in _class_statements():
        looks_like_one = any(b.rsplit(".", 1)[-1].endswith(("Error", "Exception", "Warning"))
                             for b in bases)
        if in_function or module_name.endswith("__main__"):
            # A class made by a function cannot be reached by name: no exception may be one.
            if looks_like_one and in_function:
                unreachable.append(f"{module_name}.{qualname}")
            continue
        if module_name in OPTIONAL:
            pytest.importorskip(OPTIONAL[module_name])
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        if obj is None:  # a class for type checkers only (under TYPE_CHECKING)
            if looks_like_one:
                unreachable.append(f"{module_name}.{qualname}")
            continue
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            found[f"{module_name}.{qualname}"] = obj
    assert unreachable == [], f"exception classes defined inside functions: {unreachable}"
    return found


@pytest.fixture(scope="module")
def classes():
    found = _exception_classes()
    assert "namedschema.errors.FormatError" in found  # the walk does find classes
    return found


def test_every_exception_is_a_namedschema_error(classes):
    outside = [name for name, cls in classes.items()
               if not issubclass(cls, (Warning, NamedSchemaError))
               and name not in INTERNAL and name not in STANDALONE]
    assert outside == [], f"exceptions outside NamedSchemaError: {outside}"


def test_every_warning_is_a_namedschema_warning(classes):
    outside = [name for name, cls in classes.items()
               if issubclass(cls, Warning) and not issubclass(cls, NamedSchemaWarning)]
    assert outside == [], f"warnings outside NamedSchemaWarning: {outside}"
    assert issubclass(NamedSchemaWarning, UserWarning)


def test_every_public_error_and_warning_is_defined_and_exported_by_namedschema_errors(classes):
    public = {name: cls for name, cls in classes.items()
              if issubclass(cls, (NamedSchemaError, NamedSchemaWarning))}
    elsewhere = sorted(name for name in public if not name.startswith("namedschema.errors."))
    assert elsewhere == [], f"define these in namedschema.errors (re-export them): {elsewhere}"
    unlisted = sorted(cls.__name__ for cls in public.values()
                      if cls.__name__ not in errors.__all__)
    assert unlisted == [], f"missing from namedschema.errors.__all__: {unlisted}"
    undocumented = sorted(name for name in errors.__all__
                          if isinstance(getattr(errors, name), type)
                          and f"\n{name} " not in errors.__doc__
                          # FieldError's subclasses for one builtin, and deprecated names
                          and not (name.startswith("Field") and name in errors.__doc__)
                          and not (name in errors.DEPRECATED_NAMES and name in errors.__doc__))
    assert undocumented == [], f"not listed in namedschema.errors' docstring: {undocumented}"


def test_the_exceptions_outside_the_hierarchy_are_the_listed_ones(classes):
    assert set(classes) >= INTERNAL, f"stale INTERNAL entries: {INTERNAL - set(classes)}"
    for name, base in STANDALONE.items():
        cls = classes[name]
        assert issubclass(cls, base) and not issubclass(cls, NamedSchemaError)
        assert cls.__name__ in errors.__doc__, f"document {name} in namedschema.errors"


def test_errors_keep_the_builtin_class_their_layer_raised_before():
    """The classes moved into namedschema.errors stay what callers may catch, and their
    modules still export them."""
    expected = {
        "namedschema.state.EnvStateError": ValueError,
        "namedschema.training.RunCheckpointError": ValueError,
        "namedschema.ray.ShardedReplayError": RuntimeError,
        "namedschema.rlpyt.RlpytImportError": ImportError,
        "namedschema.rlpyt.ResumeError": RuntimeError,
        "namedschema.rlpyt.resume.state.StateMismatchError": ValueError,
        "namedschema.rlpyt.SamplerWorkerError": RuntimeError,
        "namedschema.training.RunCheckpointWarning": UserWarning,
        "namedschema.rlpyt.ResumeWarning": UserWarning,
    }
    for dotted, builtin in expected.items():
        module, name = dotted.rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        assert cls is getattr(errors, name), dotted
        assert issubclass(cls, builtin), dotted


@pytest.mark.subprocess
def test_import_namedschema_errors_stays_light():
    """namedschema.errors (imported by ``import namedschema``) needs nothing heavier."""
    from tests.helpers import run_fresh
    proc = run_fresh("""
        import sys
        import namedschema.errors
        heavy = [m for m in sys.modules if m.split(".")[0] in ("numpy", "torch", "ray", "rlpyt")
                 or m.startswith(("namedschema.checkpoint", "namedschema.rlpyt",
                                  "namedschema.training", "namedschema.ray"))]
        print(heavy)
    """)
    assert proc.stdout.decode().strip() == "[]"
