"""Generated, unrolled ``__getitem__`` / ``__setitem__`` for named array tuples.

These two methods run in RL inner loops (``buffer[t] = step``,
``samples[idx]``). A loop over the fields pays for a frame, an iterator and
per-item bookkeeping; unrolling removes most of that, which is what takes
indexing well below rlpyt's class-per-type ``namedarraytuple``. The code
depends only on the number of fields (names never appear in it), so one pair
of functions is compiled per field count and shared by all schemas with that
many fields. Errors are handed to the generic reporters in ``_instance``.

accessors_for   (getitem, setitem) for a field count, or None when too large
compile_source  compile generated code, its source registered in ``linecache``

Generated source is registered in ``linecache`` under its ``<namedschema ...>``
file name, so tracebacks through generated methods show their lines and
``inspect.getsource`` finds them. Entries are keyed by what the code depends
on (a field count here; field names for ``__new__``), so there is one per
distinct definition, not one per schema.
"""

from __future__ import annotations

import linecache

from .instance import SCALAR_RULES, check_write, raise_read_error, raise_write_error

__all__ = ["accessors_for", "compile_source", "MAX_UNROLLED_FIELDS"]

MAX_UNROLLED_FIELDS = 64
_cache: dict[int, tuple] = {}


def _source(n: int) -> str:
    names = [f"f{i}" for i in range(n)]
    values = [f"v{i}" for i in range(n)]
    unpack = (", ".join(names) + ("," if n == 1 else "")) if n else "()"
    unpack_values = (", ".join(values) + ("," if n == 1 else "")) if n else "()"
    reads = "".join(f"None if {f} is None else {f}[loc], " for f in names)
    # Writes field by field check first that every value's dtype is its
    # field's very dtype (one identity test each); anything else (other
    # dtypes, Python numbers, None, nested tuples) goes through _check_write,
    # which refuses what would change a value before any field is written.
    same = " and ".join(f"{v}.dtype is {f}.dtype" for f, v in zip(names, values, strict=True))
    dtypes = "".join(f"{f}.dtype, " for f in names)
    lines = [
        "def __getitem__(self, loc):",
        f"    {unpack} = self",
        "    try:",
        f"        return _tuple_new(self.__class__, ({reads}))",
        "    except Exception as exc:",
        "        _raise_read_error(self, loc, exc)",
        "",
        "def __setitem__(self, loc, value):",
        f"    {unpack} = self",
        "    j = 0",
        "    if isinstance(value, tuple) and (value.__class__ is self.__class__"
        " or getattr(value, '_fields', None) == self._fields):",
        f"        {unpack_values} = value",
        "        try:",
        f"            same = {same or 'True'}",
        "        except AttributeError:",
        "            same = False",
        "        if same:",  # no None field or value, all dtypes matching: just write
        "            try:",
    ]
    for i, (f, v) in enumerate(zip(names, values, strict=True)):
        lines += [f"                j = {i}"] * (i > 0) + [f"                {f}[loc] = {v}"]
    lines += [
        "                return",
        "            except Exception as exc:",
        "                _raise_write_error(self, j, loc, value, exc)",
        "        _check_write(self, loc, value, True)",
        "        try:",
    ]
    # ``j`` tracks the field being written, for the error message; it starts at 0.
    for i, (f, v) in enumerate(zip(names, values, strict=True)):
        lines += [f"            j = {i}"] * (i > 0) + [
                  f"            if {f} is not None or {v} is not None:",
                  f"                {f}[loc] = {v}"]
    lines += ["            return",
              "        except Exception as exc:",
              "            _raise_write_error(self, j, loc, value, exc)",
              # A Python number broadcast within bounds that hold it in every
              # field (remembered per number type and field dtypes) is not checked.
              # 0 and 1 (also 0.0, 1.0, False, True) fit every dtype.
              "    kind = value.__class__",
              "    if not ((kind is _int or kind is _float or kind is _bool)"
              " and (value == 0 or value == 1)):",
              "        try:",
              f"            low, high, whole = _rules[(kind, {dtypes})]",
              "            fits = low <= value <= high and (not whole or value == int(value))",
              "        except Exception:",
              "            fits = False",
              "        if not fits:",
              "            _check_write(self, loc, value, False)",
              "    try:"] + ["        pass"] * (n == 0)
    for i, f in enumerate(names):
        lines += [f"        j = {i}"] * (i > 0) + [
                  f"        if {f} is not None:",
                  f"            {f}[loc] = value"]
    lines += ["    except Exception as exc:",
              "        _raise_write_error(self, j, loc, value, exc)", ""]
    return "\n".join(lines)


def compile_source(source: str, filename: str):
    """Compile ``source`` for ``exec`` and register it in ``linecache`` as ``filename``."""
    code = compile(source, filename, "exec")
    # mtime None: linecache.checkcache keeps the entry (there is no file to check).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return code


def accessors_for(n_fields: int):
    """Shared unrolled (``__getitem__``, ``__setitem__``) for ``n_fields`` fields."""
    if n_fields > MAX_UNROLLED_FIELDS:
        return None
    pair = _cache.get(n_fields)
    if pair is None:
        namespace = {"_tuple_new": tuple.__new__, "_raise_read_error": raise_read_error,
                     "_raise_write_error": raise_write_error, "_check_write": check_write,
                     "_rules": SCALAR_RULES, "_int": int, "_float": float, "_bool": bool}
        code = compile_source(_source(n_fields),
                              f"<namedschema accessors for {n_fields} fields>")
        exec(code, namespace)
        getitem, setitem = namespace["__getitem__"], namespace["__setitem__"]
        getitem.__doc__ = ("Return a new instance of the same schema with ``loc`` "
                           "applied to every field (None fields stay None).")
        setitem.__doc__ = ("Assign ``value`` at ``loc`` in every field: field by field "
                           "if it has the same fields, else broadcast.")
        pair = _cache.setdefault(n_fields, (getitem, setitem))
    return pair
