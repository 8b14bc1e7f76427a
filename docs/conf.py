"""Sphinx configuration for the namedschema docs (built with -n -W in the test suite)."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import namedschema  # noqa: E402

project = "namedschema"
author = "the namedschema developers"
release = version = namedschema.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode",
              "sphinx.ext.intersphinx"]
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
exclude_patterns = ["_build", "inventories"]
html_theme = "alabaster"
suppress_warnings = ["autodoc.import_object"]

# Links to Python, numpy and torch. The inventories are read from docs/inventories first
# (small files listing the outside names these docs use, written by make_inventories.py
# there), so the build needs no network; online, the projects' own inventories are the
# fallback for names missing from them.
_here = os.path.dirname(os.path.abspath(__file__))
intersphinx_mapping = {
    name: (url, (os.path.join(_here, "inventories", f"{name}.inv"), None))
    for name, url in [("python", "https://docs.python.org/3"),
                      ("numpy", "https://numpy.org/doc/stable"),
                      ("torch", "https://docs.pytorch.org/docs/stable")]}
intersphinx_timeout = 5

# Every cross-reference must resolve (sphinx-build -n -W), except these names, which
# exist only for type checkers (namedschema._core.schema, TypeVars of overloads) and show up in
# signatures; each is explained in the text where it matters (typed.rst).
# numpy's alias by its public name, not spelled out into numpy's private types
autodoc_type_aliases = {"DTypeLike": "numpy.typing.DTypeLike"}
nitpicky = True
nitpick_ignore = [
    ("py:class", "DynamicNamedTuple"),
    ("py:class", "DynamicNamedArrayTuple"),
    ("py:class", "namedschema._core.schema.DynamicNamedTuple"),
    ("py:class", "namedschema._core.schema.DynamicNamedArrayTuple"),
    ("py:class", "namedschema._core.schema._NAT"),
    ("py:class", "namedschema.buffer.builders._ArrayTuple"),
    # type variables of generic signatures (the argument's type comes back)
    ("py:class", "namedschema.buffer.builders._Buffer"),
    ("py:class", "namedschema.rlpyt.resume.runner._Runner"),
    # type parameters of the replay buffers (generic in the example's array tuple type)
    ("py:class", "namedschema.training.replay.BatchT"),
    ("py:class", "namedschema.training.replay._ArrayTupleT"),
    ("py:class", "namedschema.ray.sharded.SampleT"),
    ("py:class", "namedschema.ray.sharded._ArrayTupleT"),
    # load's evolution options, imported for type checkers only (load imports evolution
    # only when schemas= is given); namedschema.upgrade's signature spells them out
    ("py:class", "SchemaSpec"),
    ("py:class", "ExtraChoice"),
    ("py:class", "CastingChoice"),
]
