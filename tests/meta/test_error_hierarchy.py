"""Every exception namedschema raises to users derives from NamedSchemaError (one place to
catch), also the ones defined outside namedschema.errors."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import namedschema
from namedschema.errors import NamedSchemaError

# Exceptions that never leave namedschema: internal control flow, caught where raised.
INTERNAL = {
    "namedschema.checkpoint.tracking.TooMuch",
    "namedschema.checkpoint.nodes.NotData",
    "namedschema.state.plain.NotDataValue",
    "namedschema.checkpoint.journal.Unusable",
    # The adapter imports nothing of namedschema: the twin tests load it from its file in
    # runs of rlpyt alone (namedschema never imported), so its error is a plain ImportError.
    "namedschema.rlpyt.atari_py_adapter.AdapterError",
}
# Modules that need an optional dependency this test does not install for.
OPTIONAL = ("namedschema.integrations.torch",)


def _modules():
    for info in pkgutil.walk_packages(namedschema.__path__, "namedschema."):
        if info.name.startswith(OPTIONAL) or info.name.endswith("__main__"):
            continue
        yield importlib.import_module(info.name)


def test_every_public_exception_is_a_namedschema_error():
    outside = []
    for module in _modules():
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException)
                    and not issubclass(obj, Warning) and obj.__module__ == module.__name__):
                qual = f"{module.__name__}.{name}"
                if not name.startswith("_") and qual not in INTERNAL and not issubclass(obj, NamedSchemaError):
                    outside.append(qual)
    assert outside == [], f"exceptions outside NamedSchemaError: {outside}"
