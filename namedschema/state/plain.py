"""``state_dict()`` results as checkpoint data, and back.

torch's state dicts are almost data: ``OrderedDict`` s (a dict subclass), an
optimizer's ``state`` keyed by parameter number (int keys), tuples, tensors,
maybe on a GPU. :func:`to_data` turns them into what a checkpoint stores without
pickle (str-keyed dicts, lists, tuples, numbers, arrays, CPU tensors), and
:func:`from_data` turns that back into what ``load_state_dict`` expects, the
tensors and arrays copied out of the loaded file. Values that are not data (a
scheduler's function, say) raise :class:`NotDataValue` naming where they are,
or, when pickling is allowed, are kept as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.tree import is_named, join_path, torch_if_loaded
from ..errors import FormatError

__all__ = ["to_data", "from_data", "NotDataValue", "BadData", "MAX_DEPTH"]

_KEYED = "namedschema.keyed"   # a dict whose keys are not all str: [[key, value], ...]
_BIG_INT = "namedschema.int"   # an int beyond 64 bits, as decimal text
_SCALARS = (bool, float, str, type(None), np.generic)
MAX_DEPTH = 200   # nesting from_data follows (a state dict is a few levels deep)


# A value that to_data cannot have given (a damaged or forged file).
BadData = FormatError


class NotDataValue(TypeError):
    """A value a checkpoint can only store by pickling; ``path`` says where it is."""

    def __init__(self, path: str, value: Any) -> None:
        self.path = path
        super().__init__(f"{path} is a {type(value).__module__}.{type(value).__qualname__}, "
                         "which is not data")


def to_data(value: Any, path: str, allow_pickle: bool = False) -> Any:
    """``value`` as checkpoint data (see the module docstring)."""
    torch = torch_if_loaded()
    if isinstance(value, (*_SCALARS, np.ndarray)):
        return value
    if isinstance(value, int):
        return value if -(1 << 63) <= value < 1 << 63 else {_BIG_INT: str(value)}
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach() if value.device.type == "cpu" else value.detach().cpu()
    if isinstance(value, dict):
        # a dict that looks like one of the markers is stored keyed, so it stays a dict
        if all(isinstance(k, str) for k in value) and set(value) not in ({_KEYED}, {_BIG_INT}):
            return {k: to_data(v, join_path(path, k), allow_pickle) for k, v in value.items()}
        return {_KEYED: [[to_data(k, f"{path} key", allow_pickle),
                          to_data(v, join_path(path, k), allow_pickle)]
                         for k, v in value.items()]}
    if isinstance(value, tuple) and not is_named(value):
        return tuple(to_data(v, join_path(path, i), allow_pickle) for i, v in enumerate(value))
    if isinstance(value, tuple):   # schema instances and named tuples are data as they are
        return value
    if isinstance(value, list):
        return [to_data(v, join_path(path, i), allow_pickle) for i, v in enumerate(value)]
    if allow_pickle:
        return value
    raise NotDataValue(path, value)


def from_data(value: Any, copy: bool = True, depth: int = 0) -> Any:
    """What :func:`to_data` gave, back as state-dict values (arrays and tensors copied).

    ``copy=False`` leaves arrays and tensors as they are (to look at a state before
    restoring it). A file is untrusted: markers of the wrong shape and nesting
    deeper than ``MAX_DEPTH`` raise :class:`BadData` (a ValueError).
    """
    if depth > MAX_DEPTH:
        raise BadData(f"nested deeper than {MAX_DEPTH} levels")
    torch = torch_if_loaded()
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True) if copy else value
    if torch is not None and isinstance(value, torch.Tensor):
        return value.clone() if copy else value
    if isinstance(value, dict):
        if set(value) == {_KEYED}:
            pairs = value[_KEYED]
            if not isinstance(pairs, list) or not all(
                    isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
                raise BadData(f"{_KEYED} must hold [key, value] pairs")
            out = {}
            for k, v in pairs:
                key = _key(from_data(k, copy, depth + 1))
                try:
                    hash(key)
                except TypeError:
                    raise BadData(f"a dict key cannot be a {type(key).__name__}") from None
                out[key] = from_data(v, copy, depth + 1)
            return out
        if set(value) == {_BIG_INT}:
            text = value[_BIG_INT]
            if not isinstance(text, str) or len(text) > 4000 or not text.lstrip("-").isdigit():
                raise BadData(f"{_BIG_INT} must hold decimal digits")
            return int(text)
        return {k: from_data(v, copy, depth + 1) for k, v in value.items()}
    if isinstance(value, tuple) and not is_named(value):
        return tuple(from_data(v, copy, depth + 1) for v in value)
    if isinstance(value, list):
        return [from_data(v, copy, depth + 1) for v in value]
    return value


def _key(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key
