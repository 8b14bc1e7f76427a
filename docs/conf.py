"""Sphinx configuration for the namedschema docs (built with -W in the test suite)."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import namedschema  # noqa: E402

project = "namedschema"
author = "the namedschema developers"
release = version = namedschema.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
exclude_patterns = ["_build"]
html_theme = "alabaster"
suppress_warnings = ["autodoc.import_object"]
nitpicky = False
