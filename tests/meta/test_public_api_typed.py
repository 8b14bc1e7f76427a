"""Every public function and class of namedschema is fully annotated, without bare generics.

Public: the names of ``namedschema`` (``__all__`` and the lazy ones), and the ``__all__`` of
every public subpackage and of the modules the docs document on their own. mypy --strict
refuses calls to unannotated functions in a user's file, and pyright's strict mode refuses
``dict``/``tuple``/``PathLike`` without their type arguments ("partially unknown"), so
both are checked here for all of them; tests/meta/typing/pass_readme.py checks the README's
calls with both checkers.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import namedschema

# Documented on their own, besides the subpackages' front doors.
MODULES = ("namedschema.errors", "namedschema.rlpyt.resume.state",
           "namedschema.rlpyt.atari_py_adapter", "namedschema.integrations.torch")
# Programs, not an API.
NOT_API = ("namedschema.apps",)
OPTIONAL = {"namedschema.integrations.torch": "torch"}
# A generic written without its type arguments.
BARE = re.compile(r"\b(dict|list|tuple|set|frozenset|type|PathLike|Callable|Iterable|Iterator|"
                  r"Mapping|Sequence|deque|Generator)\b(?!\[)")
# Dunder methods users call (through syntax) whose types matter.
DUNDERS = {"__init__", "__call__", "__getitem__", "__setitem__", "__len__", "__iter__",
           "__enter__", "__exit__"}


def _public_modules():
    yield namedschema
    for info in pkgutil.walk_packages(namedschema.__path__, "namedschema."):
        name = info.name
        if (info.ispkg and not any(p.startswith("_") for p in name.split("."))
                and not name.startswith(NOT_API)):
            yield importlib.import_module(name)
    for name in MODULES:
        if name in OPTIONAL:
            try:
                importlib.import_module(OPTIONAL[name])
            except ImportError:
                continue
        yield importlib.import_module(name)


def _public_objects():
    seen = set()
    for module in _public_modules():
        names = list(getattr(module, "__all__", ())) + list(getattr(module, "_LAZY", ()))
        for name in names:
            obj = getattr(module, name)
            if id(obj) not in seen and (inspect.isfunction(obj) or inspect.isclass(obj)):
                seen.add(id(obj))
                yield f"{module.__name__}.{name}", obj


def _functions(qualname, obj):
    if inspect.isfunction(obj):
        yield qualname, obj
        return
    for name, member in vars(obj).items():
        if name.startswith("_") and name not in DUNDERS:
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if isinstance(member, property):
            member = member.fget
        if inspect.isfunction(member) and member.__qualname__.startswith(obj.__qualname__):
            yield f"{qualname}.{name}", member


def _problems(qualname, function):
    signature = inspect.signature(function)
    params = [p for p in signature.parameters.values() if p.name not in ("self", "cls")]
    for p in params:
        if p.annotation is inspect.Parameter.empty:
            yield f"{qualname}: parameter {p.name} has no annotation"
    if signature.return_annotation is inspect.Signature.empty and function.__name__ != "__init__":
        yield f"{qualname}: no return annotation"
    annotations = {p.name: p.annotation for p in params}
    annotations["return"] = signature.return_annotation
    for where, annotation in annotations.items():
        text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
        if annotation is not inspect.Parameter.empty and BARE.search(text):
            yield f"{qualname}: {where}: {text!r} lacks type arguments"


def _attribute_problems(qualname, cls):
    """Annotated attributes of public classes (dataclass fields) without type arguments."""
    for name, annotation in vars(cls).get("__annotations__", {}).items():
        text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
        if not name.startswith("_") and BARE.search(text):
            yield f"{qualname}.{name}: {text!r} lacks type arguments"


@pytest.fixture(scope="module")
def public():
    found = dict(_public_objects())
    for name in ("namedschema.save", "namedschema.upgrade", "namedschema.rlpyt.resumable",
                 "namedschema.buffer.buffer_from_example", "namedschema.RunCheckpoint",
                 "namedschema.ray.ShardedReplay", "namedschema.declared_dtypes"):
        assert name in found, name  # the walk does reach the API
    return found


def test_every_public_function_and_method_is_fully_annotated(public):
    problems = [problem for qualname, obj in public.items()
                for name, function in _functions(qualname, obj)
                for problem in _problems(name, function)]
    assert problems == [], "\n".join(problems)


def test_public_classes_annotate_their_attributes_with_type_arguments(public):
    problems = [problem for qualname, obj in public.items() if inspect.isclass(obj)
                for problem in _attribute_problems(qualname, obj)]
    assert problems == [], "\n".join(problems)


def test_string_choices_are_literal_types():
    """``load``/``upgrade``'s ``extra`` and ``casting`` take exactly the choices they check."""
    from typing import get_args

    from namedschema.evolution import CASTING_CHOICES, EXTRA_CHOICES, CastingChoice, ExtraChoice
    assert get_args(ExtraChoice) == EXTRA_CHOICES == ("error", "ignore", "keep")
    assert get_args(CastingChoice) == CASTING_CHOICES
    for function in (namedschema.load, namedschema.upgrade):
        parameters = inspect.signature(function).parameters
        assert parameters["extra"].annotation == "ExtraChoice", function
        assert parameters["casting"].annotation == "CastingChoice", function
