"""The structure's node kinds, each defined once: encode, decode and describe.

A structure is a tree of JSON nodes (the grammar is in the package
documentation, generated from ``KINDS``). Each kind below gives, in one place,

``encode``    the node for a Python object (``save``)
``parse``     the node's checked operands: the single validation of untrusted
              nodes, shared by decoding and describing so load and inspect
              accept exactly the same files
``decode``    the Python object for a parsed node (``load``)
``describe``  the node's lines in ``inspect``'s tree

A new kind (say, for a later feature) is one new class added to ``KINDS``.
Kinds with ``refs`` point into the array or schema tables and are not allowed
in schema defaults.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

from .._core import pickling as _pickle
from .._core.instance import printable
from .._core.schema import is_classic_namedtuple_class, is_classic_nat_class
from .._core.tree import join_path
from ..errors import FormatError
from .arrays import ArrayTable, is_storable
from .constants import ALLOWED_DTYPES
from .header import ArrayEntry, SchemaEntry, fail

_MAX_INT_BITS = 10_000      # beyond what json.loads will parse back
_TREE_LINES = 2000          # inspect's tree stops after this many lines


class NotData(Exception):
    """The graph holds an object the data path cannot describe (so it needs pickle)."""

    def __init__(self, path: str, obj: Any, why: str = "") -> None:
        cls = type(obj)
        self.path = path or "<root>"
        self.type_name = f"{cls.__module__}.{cls.__qualname__}"
        self.why = why
        super().__init__(f"{self.path}: {self.type_name}" + (f" ({why})" if why else ""))


def _why_not_data(obj: Any) -> str:
    """For arrays and numpy scalars: the dtype that keeps them off the data path."""
    dtype = getattr(obj, "dtype", None)
    if isinstance(obj, np.ndarray | np.generic) and isinstance(dtype, np.dtype):
        if dtype.str not in ALLOWED_DTYPES:
            return (f"dtype {dtype} is not one of the bool, integer, float and complex "
                    "dtypes a checkpoint stores as data")
        return f"a {type(obj).__qualname__}, not a plain numpy array"
    return ""


def _is_schema_class(cls: Any) -> bool:
    return _pickle.is_registered_schema(cls)


def _stored_as_instance(cls: type) -> bool:
    """The format's policy: which named tuple classes an instance node stores.

    Registered schemas, classes made by ``namedtuple()`` itself and rlpyt's
    classic named array tuples; other named tuple classes (subclasses with
    their own code) need pickle.
    """
    return _is_schema_class(cls) or (
        is_classic_namedtuple_class(cls)
        and (cls.__bases__ == (tuple,) or is_classic_nat_class(cls)))


# --------------------------------------------------------------------------
# The three walkers the kinds are called from
# --------------------------------------------------------------------------

class Encoder:
    """Describe a graph as nodes, or raise NotData at the first non-data object."""

    def __init__(self) -> None:
        self.arrays = ArrayTable()
        self.schemas: list[SchemaEntry] = []
        self._schema_index: dict[int, int] = {}  # id(class) -> index (classes compare by value)
        self._classes: list[type] = []           # keeps classes alive so ids stay unique

    def encode(self, obj: Any, path: str = "") -> Any:
        """The structure node of ``obj`` at ``path`` (NotData if it is not data)."""
        kind = _ENCODE_BY_TYPE.get(type(obj))
        if kind is None:
            kind = next((k for k in _ENCODE_BY_TEST if k.encodes(obj)), None)
            if kind is None:
                raise NotData(path, obj, _why_not_data(obj))
        return kind.encode(self, obj, path)

    def schema(self, cls: type, path: str) -> int:
        """The index of schema ``cls`` in the schema table, adding it first if new."""
        index = self._schema_index.get(id(cls))
        if index is not None:
            return index
        defaults_enc = Encoder()
        defaults = [_NUMPY.encode(defaults_enc, v, path) if _NUMPY.encodes(v)
                    else defaults_enc.encode(v, f"{path}<defaults>")
                    for v in cls._field_defaults.values()]  # type: ignore[attr-defined]
        if defaults_enc.arrays.entries or defaults_enc.schemas:
            raise NotData(path, cls, "schema defaults that are arrays or schemas")
        module = cls.__module__ if isinstance(cls.__module__, str) else None
        fields = tuple(cls._fields)  # type: ignore[attr-defined]
        if _is_schema_class(cls):
            entry = SchemaEntry(type(cls).__name__, cls._typename,  # type: ignore[attr-defined]
                                fields, cls._schema_id, tuple(defaults), module)  # type: ignore[attr-defined]
        else:
            kind = ("NamedArrayTupleSchema" if is_classic_nat_class(cls)
                    else "NamedTupleSchema")
            # A stable id per definition (the one derivation, _pickle's), so every
            # load of it is one class; "classic-" keeps it apart from the id of a
            # module-level schema of the same definition, which is another class.
            derived = _pickle.derived_schema_id(kind, module, cls.__name__, fields, defaults)
            entry = SchemaEntry(kind, cls.__name__, fields, f"classic-{derived}",
                                tuple(defaults), module)
        index = len(self.schemas)
        self.schemas.append(entry)
        self._schema_index[id(cls)] = index
        self._classes.append(cls)
        return index


class _Walker:
    """What decoding and describing share: the file's name and tables, and ``fail``."""

    def __init__(self, name: str, schemas: Sequence[SchemaEntry],
                 entries: Sequence[ArrayEntry]) -> None:
        self.name, self.schemas, self.entries = name, schemas, entries

    def fail(self, message: str, cause: BaseException | None = None) -> NoReturn:
        fail(self.name, f"structure: {message}", cause)

    def parse(self, node: Any, allow_refs: bool = True) -> tuple[NodeKind, Any]:
        """(kind, checked operands) of ``node``; FormatError for anything else."""
        if node is None or type(node) in (bool, int, float, str):
            return _PLAIN, node
        kind = _DECODE_BY_KEYS.get(frozenset(node)) if type(node) is dict else None
        if kind is None or (kind.refs and not allow_refs):
            self.fail(f"unknown node {node!r:.60}")
        return kind, kind.parse(self, node)

    def index(self, value: Any, count: int, what: str) -> int:
        if type(value) is not int or not 0 <= value < count:
            self.fail(f"refers to {what} {value!r}, which does not exist")
        return value


class Decoder(_Walker):
    """Rebuild the graph from checked nodes, the loaded arrays and the schema table."""

    def __init__(self, name: str, schemas: Sequence[SchemaEntry],
                 entries: Sequence[ArrayEntry], arrays: list[Any]) -> None:
        super().__init__(name, schemas, entries)
        self.arrays = arrays
        self._classes: list[Any] = [None] * len(schemas)

    def decode(self, node: Any, allow_refs: bool = True) -> Any:
        """The object a structure node stands for."""
        kind, operands = self.parse(node, allow_refs)
        return kind.decode(self, operands, allow_refs)

    def schema_class(self, index: int) -> Any:
        """Schema class ``index`` of the file, rebuilt once and then reused."""
        cls = self._classes[index]
        if cls is None:
            entry = self.schemas[index]
            try:
                defaults = tuple(self.decode(d, allow_refs=False) for d in entry.defaults)
                cls = _pickle.rebuild_schema(entry.kind, entry.id, entry.typename,
                                             entry.fields, defaults, entry.module)
            except FormatError:
                raise
            except (ValueError, TypeError) as exc:
                self.fail(f"schema {index} is invalid: {exc}", exc)
            self._classes[index] = cls
        return cls


class Describer(_Walker):
    """Lines of ``inspect``'s tree: one per node, children indented.

    ``array_text[i]`` is the text for array ``i`` (dtype, shape, size).
    """

    def __init__(self, name: str, schemas: Sequence[SchemaEntry],
                 entries: Sequence[ArrayEntry], array_text: Sequence[str]) -> None:
        super().__init__(name, schemas, entries)
        self.array_text = array_text
        self.lines: list[str] = []

    def describe(self, node: Any, label: str = "", depth: int = 0) -> None:
        """Add the lines describing ``node`` (labelled ``label``) at ``depth``."""
        if len(self.lines) >= _TREE_LINES:
            if len(self.lines) == _TREE_LINES:
                self.lines.append("  " * depth + "...")
            return
        kind, operands = self.parse(node)
        kind.describe(self, operands, label, depth)

    def line(self, depth: int, text: str) -> None:
        """Add one line of text at ``depth``, its control characters escaped."""
        # Names, keys and values come from the file: escape control characters.
        self.lines.append("  " * depth + printable(text))


# --------------------------------------------------------------------------
# The node kinds
# --------------------------------------------------------------------------

class NodeKind:
    """One node kind: its JSON keys, its spec line, and its four operations."""

    keys: frozenset[str] = frozenset()   # the node is a JSON object with exactly these keys
    refs = False                         # refers to the array or schema table
    spec = ""                            # the grammar line in the package documentation

    def encodes(self, obj: Any) -> bool:
        """Whether this kind stores ``obj`` (for types not in the exact-type table)."""
        return False

    def encode(self, enc: Encoder, obj: Any, path: str) -> Any:
        """The node of ``obj`` (one of this kind) at ``path``."""
        raise NotImplementedError

    def parse(self, walker: _Walker, node: dict[str, Any]) -> Any:
        """The operands of a node of this kind, checked."""
        raise NotImplementedError

    def decode(self, dec: Decoder, operands: Any, allow_refs: bool) -> Any:
        """The object a node of this kind stands for, from its operands."""
        raise NotImplementedError

    def describe(self, desc: Describer, operands: Any, label: str, depth: int) -> None:
        """Describe a node of this kind through ``desc``."""
        raise NotImplementedError


class _Plain(NodeKind):
    spec = "JSON ``null``/``true``/``false``/numbers/strings: None, bool, int, float, str"

    def encode(self, enc, obj, path):
        if type(obj) is int and obj.bit_length() > _MAX_INT_BITS:
            raise NotData(path, obj, "an int too large for JSON")
        return obj

    def parse(self, walker, node):  # pragma: no cover - plain nodes are parsed by _Walker
        return node

    def decode(self, dec, operands, allow_refs):
        return operands

    def describe(self, desc, operands, label, depth) -> None:
        desc.line(depth, f"{label}{json.dumps(operands)[:60]}")


class _Float(NodeKind):
    keys = frozenset({"float"})
    spec = '``{"float": "nan"|"inf"|"-inf"}``: a float that is not finite'

    def encode(self, enc, obj, path):
        return obj if math.isfinite(obj) else {"float": repr(obj)}

    def parse(self, walker, node):
        if node["float"] not in ("nan", "inf", "-inf"):
            walker.fail(f"unknown node {node!r:.60}")
        return float(node["float"])

    def decode(self, dec, operands, allow_refs):
        return operands

    def describe(self, desc, operands, label, depth) -> None:
        desc.line(depth, f"{label}{operands!r}")


class _Sequence(NodeKind):
    """``{"list": [...]}`` and ``{"tuple": [...]}``."""

    def __init__(self, python_type: type) -> None:
        self.python_type = python_type
        self.key = python_type.__name__
        self.keys = frozenset({self.key})
        self.spec = f'``{{"{self.key}": [node, ...]}}``: a {self.key}'

    def encode(self, enc, obj, path):
        return {self.key: [enc.encode(v, join_path(path, i)) for i, v in enumerate(obj)]}

    def parse(self, walker, node):
        if type(node[self.key]) is not list:
            walker.fail(f"unknown node {node!r:.60}")
        return node[self.key]

    def decode(self, dec, operands, allow_refs):
        return self.python_type(dec.decode(v, allow_refs) for v in operands)

    def describe(self, desc, operands, label, depth) -> None:
        desc.line(depth, f"{label}{self.key} of {len(operands)}")
        for i, item in enumerate(operands):
            desc.describe(item, f"[{i}]: ", depth + 1)


class _Dict(NodeKind):
    keys = frozenset({"dict"})
    spec = ('``{"dict": [[key, node], ...]}``: a dict with str keys, in order')

    def encode(self, enc, obj, path):
        items = []
        for key, value in obj.items():
            if type(key) is not str:
                raise NotData(path, key, "dict key that is not a str")
            items.append([key, enc.encode(value, join_path(path, key))])
        return {"dict": items}

    def parse(self, walker, node):
        items = node["dict"]
        if type(items) is not list:
            walker.fail(f"unknown node {node!r:.60}")
        for item in items:
            if type(item) is not list or len(item) != 2 or type(item[0]) is not str:
                walker.fail("malformed dict item")
        return items

    def decode(self, dec, operands, allow_refs):
        return {key: dec.decode(value, allow_refs) for key, value in operands}

    def describe(self, desc, operands, label, depth) -> None:
        desc.line(depth, f"{label}dict of {len(operands)}")
        for key, value in operands:
            desc.describe(value, f"{key!r}: ", depth + 1)


class _Array(NodeKind):
    keys = frozenset({"array"})
    refs = True
    spec = ('``{"array": i}``: entry ``i`` of ``arrays`` (a numpy array or torch '
            'tensor; one object stored once is one object after loading)')

    def encodes(self, obj):
        return is_storable(obj)

    def encode(self, enc, obj, path):
        return {"array": enc.arrays.add(obj, path)}

    def parse(self, walker, node):
        return walker.index(node["array"], len(walker.entries), "array")

    def decode(self, dec, operands, allow_refs):
        return dec.arrays[operands]

    def describe(self, desc, operands, label, depth) -> None:
        desc.line(depth, f"{label}{desc.array_text[operands]}")


class _Scalar(NodeKind):
    keys = frozenset({"scalar"})
    refs = True
    spec = ('``{"scalar": i}``: a numpy scalar (``np.float32(1.5)``), stored as the '
            '0-d array ``i`` of ``arrays`` and loaded as ``array[()]``')

    def encodes(self, obj):
        return isinstance(obj, np.generic) and obj.dtype.str in ALLOWED_DTYPES

    def encode(self, enc, obj, path):
        return {"scalar": enc.arrays.add(np.asarray(obj), path)}

    def parse(self, walker, node):
        index = walker.index(node["scalar"], len(walker.entries), "scalar")
        if walker.entries[index].torch is not None:
            walker.fail(f"refers to scalar {index!r}, which does not exist")
        return index

    def decode(self, dec, operands, allow_refs):
        return dec.arrays[operands][()]

    def describe(self, desc, operands, label, depth) -> None:
        desc.line(depth, f"{label}{np.dtype(desc.entries[operands].dtype).name} scalar")


class _Schema(NodeKind):
    keys = frozenset({"schema"})
    refs = True
    spec = '``{"schema": s}``: the schema class ``s`` of ``schemas`` itself'

    def encodes(self, obj):
        return isinstance(obj, type)

    def encode(self, enc, obj, path):
        if not _is_schema_class(obj):
            raise NotData(path, obj, f"the class {obj.__qualname__}")
        return {"schema": enc.schema(obj, path)}

    def parse(self, walker, node):
        return walker.index(node["schema"], len(walker.schemas), "schema")

    def decode(self, dec, operands, allow_refs):
        return dec.schema_class(operands)

    def describe(self, desc, operands, label, depth) -> None:
        entry = desc.schemas[operands]
        desc.line(depth, f"{label}class {entry.typename} ({entry.kind})")


class _Instance(NodeKind):
    keys = frozenset({"nt", "values"})
    refs = True
    spec = ('``{"nt": s, "values": [node, ...]}``: an instance of schema ``s`` '
            '(a schema, a stdlib namedtuple or an rlpyt namedarraytuple)')

    def encodes(self, obj):
        return _stored_as_instance(type(obj))

    def encode(self, enc, obj, path):
        cls = type(obj)
        index = enc.schema(cls, path)
        base = path or (cls._typename if _is_schema_class(cls) else cls.__name__)
        return {"nt": index, "values": [enc.encode(v, join_path(base, f))
                                        for f, v in zip(cls._fields, obj, strict=True)]}

    def parse(self, walker, node):
        values = node["values"]
        if type(values) is not list:
            walker.fail(f"malformed schema instance node {node!r:.60}")
        index = walker.index(node["nt"], len(walker.schemas), "schema")
        entry = walker.schemas[index]
        if len(values) != len(entry.fields):
            walker.fail(f"{entry.typename} has {len(entry.fields)} fields, the file "
                        f"gives {len(values)} values")
        return index, values

    def decode(self, dec, operands, allow_refs):
        index, values = operands
        cls = dec.schema_class(index)
        return cls._make([dec.decode(v, allow_refs) for v in values])

    def describe(self, desc, operands, label, depth) -> None:
        index, values = operands
        entry = desc.schemas[index]
        desc.line(depth, f"{label}{entry.typename} ({entry.kind})")
        for fname, value in zip(entry.fields, values, strict=True):
            desc.describe(value, f"{fname}: ", depth + 1)


class _Numpy(NodeKind):
    """A numpy scalar or small array held in the node itself (schema defaults)."""

    keys = frozenset({"numpy"})
    spec = ('``{"numpy": [dtype, shape, [value, ...]]}``: a numpy scalar (shape '
            '``[]``) or array of at most 4096 elements held in the node, values in C '
            'order (``"nan"``/``"inf"``/``"-inf"`` for such floats, ``[re, im]`` for '
            'complex); used for schema defaults such as ``np.float32(0)``, which '
            'declare a dtype, and listed as the feature ``"numpy-defaults"``')
    max_elements = 4096

    def encodes(self, obj):
        return ((type(obj) is np.ndarray or isinstance(obj, np.generic))
                and obj.dtype.str in ALLOWED_DTYPES and obj.size <= self.max_elements)

    def encode(self, enc, obj, path):
        arr = np.asarray(obj)
        values: list[Any]
        if arr.dtype.kind == "c":
            values = [[_float_value(v.real), _float_value(v.imag)] for v in arr.ravel().tolist()]
        elif arr.dtype.kind == "f":
            values = [_float_value(v) for v in arr.ravel().tolist()]
        else:
            values = arr.ravel().tolist()
        return {"numpy": [arr.dtype.str, list(arr.shape), values]}

    def parse(self, walker, node):
        operands = node["numpy"]
        if type(operands) is not list or len(operands) != 3:
            walker.fail(f"malformed numpy node {node!r:.60}")
        dtype_str, shape, values = operands
        if type(dtype_str) is not str or dtype_str not in ALLOWED_DTYPES:
            walker.fail(f"numpy node has a dtype that is not allowed: {dtype_str!r:.40}")
        if (type(shape) is not list or len(shape) > 64
                or not all(type(n) is int and 0 <= n <= self.max_elements for n in shape)
                or math.prod(shape) > self.max_elements):
            walker.fail(f"numpy node has an invalid shape {shape!r:.60}")
        if type(values) is not list or len(values) != math.prod(shape):
            walker.fail("numpy node's values do not match its shape")
        dtype = np.dtype(dtype_str)
        check = _NUMPY_VALUE_CHECKS[dtype.kind]
        if not all(check(v, dtype) for v in values):
            walker.fail(f"numpy node holds a value that is not a {dtype.name}")
        if dtype.kind == "c":
            values = [complex(float(re), float(im)) for re, im in values]
        elif dtype.kind == "f":
            values = [float(v) for v in values]
        return dtype, tuple(shape), values

    def decode(self, dec, operands, allow_refs):
        dtype, shape, values = operands
        arr = np.array(values, dtype=dtype).reshape(shape)
        return arr[()] if not shape else arr

    def describe(self, desc, operands, label, depth) -> None:
        dtype, shape, _values = operands
        desc.line(depth, f"{label}numpy {dtype.name} {shape}")


def _float_value(v: float) -> float | str:
    return v if math.isfinite(v) else repr(v)


def _is_float_value(v: Any, dtype: np.dtype) -> bool:
    return (type(v) in (int, float) and math.isfinite(v)) or v in ("nan", "inf", "-inf")


def _is_int_value(v: Any, dtype: np.dtype) -> bool:
    info = np.iinfo(dtype)
    return type(v) is int and info.min <= v <= info.max


_NUMPY_VALUE_CHECKS = {
    "b": lambda v, dtype: type(v) is bool,
    "i": _is_int_value,
    "u": _is_int_value,
    "f": _is_float_value,
    "c": lambda v, dtype: (type(v) is list and len(v) == 2
                           and all(_is_float_value(x, dtype) for x in v)),
}


_PLAIN = _Plain()
_FLOAT = _Float()
_LIST, _TUPLE = _Sequence(list), _Sequence(tuple)
_DICT = _Dict()
_ARRAY, _SCALAR, _SCHEMA, _INSTANCE = _Array(), _Scalar(), _Schema(), _Instance()
_NUMPY = _Numpy()

#: Every node kind, in the order the spec lists them.
KINDS: tuple[NodeKind, ...] = (_PLAIN, _FLOAT, _LIST, _TUPLE, _DICT, _ARRAY, _SCALAR,
                               _SCHEMA, _INSTANCE, _NUMPY)

#: The feature a file lists when a schema default is a ``numpy`` node.
NUMPY_DEFAULTS_FEATURE = "numpy-defaults"


def features_of(schemas: Sequence[SchemaEntry]) -> tuple[str, ...]:
    """The features a file with this schema table must list (readers refuse unknown ones)."""
    if any(isinstance(d, dict) and _NUMPY.keys == frozenset(d)
           for entry in schemas for d in entry.defaults):
        return (NUMPY_DEFAULTS_FEATURE,)
    return ()
# Encoding: exact builtin types first (subclasses such as IntEnum are not
# data), then the kinds that test the object, in this order.
_ENCODE_BY_TYPE: dict[type, NodeKind] = {
    type(None): _PLAIN, bool: _PLAIN, int: _PLAIN, str: _PLAIN, float: _FLOAT,
    list: _LIST, tuple: _TUPLE, dict: _DICT}
_ENCODE_BY_TEST: tuple[NodeKind, ...] = (_ARRAY, _SCALAR, _SCHEMA, _INSTANCE)
_DECODE_BY_KEYS: dict[frozenset[Any], NodeKind] = {k.keys: k for k in KINDS if k.keys}
