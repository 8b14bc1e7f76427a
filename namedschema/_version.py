"""The version of namedschema (one place: the package and setup.cfg read it here)."""

__version__ = "0.1.0"
