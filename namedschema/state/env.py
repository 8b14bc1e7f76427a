"""Exact state of gymnasium environments (Atari included), as plain data.

capture_env    an env's or a synchronous vector env's whole state, or None with the reason
restore_env    write a captured state into a freshly built env of the same construction
capture_layer  one object's state attributes (a vector env wrapper's, say), or the reason not
restore_layer  write what capture_layer gave into the same kind of object
EnvStateError  a captured state does not fit the env it is restored into

An env is captured layer by layer: the vector env (``SyncVectorEnv``), then for
each sub-env every wrapper down to the base env. Of each layer, the attributes
that are state are captured: arrays, numbers, strings, lists/tuples/deques/dicts
of those, numpy ``Generator`` s (the layer's own and its spaces', which
``action_space.sample()`` draws from) and ALE emulators (ale-py's
``cloneState(include_rng=True)``, serialized: frame, RAM, and the emulator's own
random generator for sticky actions), and the few helper objects of
Stable-Baselines3's vector envs that are data (``RunningMeanStd``,
``StackedObservations``), restored in place. Attributes that are configuration and
never change while running are left out: functions and methods, classes, enums,
``EnvSpec`` s, and the wrappers' bookkeeping (``env``, ``spec``, ``metadata``,
``_saved_kwargs``...). Anything else (a MuJoCo ``MjData``, a pygame window, a
handle to another process, as in ``AsyncVectorEnv``) cannot be captured exactly:
:func:`capture_env` then returns None and names the attribute, and the caller
restarts the env instead (``RunCheckpoint`` warns).

Restoring gives the fresh env new arrays (arrays that were one array when
captured, such as a frame stack's repeated padding, are one array again) and
writes generator and emulator states into its generators and emulators, so an
env built the same way continues the episode exactly.
Capturing never steps an env and never draws from a generator.
"""

from __future__ import annotations

import collections
import enum
import types
from typing import Any

import numpy as np

from .._core.tree import join_path
from ..errors import EnvStateError

__all__ = ["capture_env", "restore_env", "capture_layer", "restore_layer", "EnvStateError"]

# Wrapper bookkeeping and configuration: never state. (``venv``, ``class_attributes``,
# ``remotes``, ``work_remotes``, ``processes``: SB3's vector env wrappers and workers.)
_CONFIG_NAMES = frozenset({
    "env", "envs", "env_fns", "_saved_kwargs", "_ezpickle_args", "_ezpickle_kwargs", "spec",
    "_cached_spec", "metadata", "_metadata", "render_mode", "_action_set",
    "venv", "class_attributes", "remotes", "work_remotes", "processes",
})

# Helper objects that are data (their attributes are arrays and numbers), restored in place.
_DATA_OBJECTS = frozenset({
    ("stable_baselines3.common.running_mean_std", "RunningMeanStd"),
    ("stable_baselines3.common.vec_env.stacked_observations", "StackedObservations"),
    ("gymnasium.wrappers.utils", "RunningMeanStd"),
})


class _Unknown(Exception):
    def __init__(self, path: str, value: Any):
        super().__init__(f"{path} ({type(value).__module__}.{type(value).__qualname__})")


_CONFIG = object()  # marker: an attribute that is configuration, not state


def _is_space(value: Any) -> bool:
    return any(c.__module__.startswith("gymnasium.spaces") and c.__name__ == "Space"
               for c in type(value).__mro__)


def _is_ale(value: Any) -> bool:
    return any(c.__module__.startswith("ale_py") and c.__name__ == "ALEInterface"
               for c in type(value).__mro__)


def _generator_state(gen: np.random.Generator) -> dict:
    st = gen.bit_generator.state
    return {"bit_generator": st["bit_generator"], "state": _exact(st)}


def _exact(value: Any) -> Any:
    """A generator state with its 128-bit ints as decimal strings (JSON-safe data)."""
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 62:
        return {"int": str(value)}
    return value


def _unexact(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"int"}:
            return int(value["int"])
        return {k: _unexact(v) for k, v in value.items()}
    return value


def _value(value: Any, path: str) -> Any:
    """The captured form of one attribute value, ``_CONFIG``, or raise ``_Unknown``."""
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        return ["value", value]
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise _Unknown(path, value)
        return ["array", value]   # not copied: arrays that alias stay one array in the file
    if isinstance(value, (enum.Enum, type, types.FunctionType, types.BuiltinFunctionType,
                          types.MethodType, types.ModuleType)) or callable(value) and \
            not hasattr(value, "__dict__"):
        return _CONFIG
    if type(value).__name__ == "EnvSpec":
        return _CONFIG
    if isinstance(value, np.random.Generator):
        return ["generator", _generator_state(value)]
    if _is_space(value):
        gen = getattr(value, "_np_random", None)
        return ["space", None if gen is None else _generator_state(gen)]
    if _is_ale(value):
        state = value.cloneState(include_rng=True)
        return ["ale", np.frombuffer(state.serialize(), np.uint8).copy()]
    if isinstance(value, (list, tuple, collections.deque)):
        items = [_value(v, join_path(path, i)) for i, v in enumerate(value)]
        if items and all(item is _CONFIG for item in items):
            return _CONFIG
        if any(item is _CONFIG for item in items):
            raise _Unknown(path, value)
        kind = "deque" if isinstance(value, collections.deque) else type(value).__name__
        maxlen = value.maxlen if isinstance(value, collections.deque) else None
        return ["sequence", {"kind": kind, "maxlen": maxlen, "items": items}]
    if type(value) is dict and all(isinstance(k, str) for k in value):
        entries = {k: _value(v, join_path(path, k)) for k, v in value.items()}
        if entries and all(item is _CONFIG for item in entries.values()):
            return _CONFIG
        if any(item is _CONFIG for item in entries.values()):
            raise _Unknown(path, value)
        return ["dict", entries]
    if type(value) is collections.OrderedDict and \
            all(k is None or isinstance(k, str) for k in value):   # SB3's buffers: key None
        pairs = [[k, _value(v, join_path(path, str(k)))] for k, v in value.items()]
        if any(item is _CONFIG for _k, item in pairs):
            raise _Unknown(path, value)
        return ["ordered_dict", pairs]
    if (type(value).__module__, type(value).__qualname__) in _DATA_OBJECTS:
        return ["object", _layer_state(value, path)]
    raise _Unknown(path, value)


def _layers(env: Any) -> list:
    """The env and the envs it wraps, outermost first."""
    out = [env]
    while hasattr(out[-1], "env") and out[-1].env is not None and len(out) < 100:
        out.append(out[-1].env)
    return out


def _layer_state(layer: Any, path: str) -> dict:
    attributes: dict = {}
    out = {"class": type(layer).__qualname__, "attributes": attributes}
    for name, value in vars(layer).items():
        if name in _CONFIG_NAMES:
            continue
        item = _value(value, join_path(path, name))
        if item is not _CONFIG:
            attributes[name] = item
    return out


def capture_layer(obj: Any, path: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(state, None)`` of one object's state attributes, else ``(None, reason)``.

    The object's own attributes only (a wrapper's ``env`` / ``venv`` is left out);
    :func:`restore_layer` puts them back into an object of the same class.
    """
    try:
        return _layer_state(obj, path), None
    except _Unknown as exc:
        return None, f"{exc} is not data this library can capture exactly"


def restore_layer(obj: Any, state: dict[str, Any], path: str) -> None:
    """Put what :func:`capture_layer` gave back into ``obj`` (of the captured class)."""
    _restore_layer(obj, state, path, {})


def _sub_envs(env: Any) -> list | None:
    """A synchronous vector env's sub-envs, or None for a single env."""
    envs = getattr(env, "envs", None)
    if isinstance(envs, list) and hasattr(env, "num_envs"):
        return envs
    return None


def capture_env(env: Any, name: str = "env") -> tuple[dict[str, Any] | None, str | None]:
    """``(state, None)`` for an env that can be captured exactly, else ``(None, reason)``.

    ``env`` is a gymnasium env (with its wrappers) or a synchronous vector env.
    """
    if type(env).__name__ == "AsyncVectorEnv":
        return None, (f"{name} is an AsyncVectorEnv: its sub-envs live in other processes "
                      "(use SyncVectorEnv to resume exactly)")
    try:
        subs = _sub_envs(env)
        if subs is None:
            return {"layers": [_layer_state(layer, name) for layer in _layers(env)]}, None
        return {"vector": _layer_state(env, name),
                "envs": [[_layer_state(layer, f"{name}.envs[{i}]") for layer in _layers(sub)]
                         for i, sub in enumerate(subs)]}, None
    except _Unknown as exc:
        return None, f"{exc} is not data this library can capture exactly"


def _restore_value(owner: Any, name: str, item: Any, path: str, memo: dict) -> None:
    kind, data = item
    setattr(owner, name, _rebuilt(getattr(owner, name, None), kind, data, path, memo))


def _rebuilt(current: Any, kind: str, data: Any, path: str, memo: dict) -> Any:
    """The value to put in place of ``current`` (often ``current`` itself, updated)."""
    if kind == "value":
        return data
    if kind == "array":
        # A fresh array, never a write into the env's: the env's arrays may alias one
        # another (a frame stack repeats one padding array). Arrays that were one array
        # when captured are one array again (the file keeps identity; ``memo`` too).
        key = id(data)
        if key not in memo:
            memo[key] = np.array(data, copy=True)
        return memo[key]
    if kind == "generator":
        gen = current if isinstance(current, np.random.Generator) else None
        return _set_generator(gen, data)
    if kind == "space":
        if current is None or not _is_space(current):
            raise EnvStateError(f"{path}: the checkpoint has a space here, the env "
                                f"{type(current).__name__}")
        if data is not None:
            current._np_random = _set_generator(getattr(current, "_np_random", None), data)
        return current
    if kind == "ale":
        if current is None or not _is_ale(current):
            raise EnvStateError(f"{path}: the checkpoint has an ALE emulator here, the env "
                                f"{type(current).__name__}")
        from ale_py import ALEState
        current.restoreState(ALEState(bytes(np.asarray(data, np.uint8))))
        return current
    if kind == "sequence":
        olds = list(current) if isinstance(current, (list, tuple, collections.deque)) else []
        items = [_rebuilt(olds[i] if i < len(olds) else None, k, d, join_path(path, i), memo)
                 for i, (k, d) in enumerate(data["items"])]
        if data["kind"] == "deque":
            return collections.deque(items, maxlen=data["maxlen"])
        return tuple(items) if data["kind"] == "tuple" else items
    if kind == "dict":
        old = current if isinstance(current, dict) else {}
        return {k: _rebuilt(old.get(k), kk, d, join_path(path, k), memo)
                for k, (kk, d) in data.items()}
    if kind == "ordered_dict":
        old = current if isinstance(current, dict) else {}
        return collections.OrderedDict(
            (k, _rebuilt(old.get(k), kk, d, join_path(path, str(k)), memo))
            for k, (kk, d) in data)
    if kind == "object":
        if current is None or type(current).__qualname__ != data["class"]:
            raise EnvStateError(f"{path}: the checkpoint has a {data['class']} here, the env "
                                f"{type(current).__name__}")
        _restore_layer(current, data, path, memo)
        return current
    raise EnvStateError(f"{path}: unknown captured kind {kind!r}")


def _set_generator(gen: np.random.Generator | None, data: dict) -> np.random.Generator:
    state = _unexact(data["state"])
    if gen is None or type(gen.bit_generator).__name__ != data["bit_generator"]:
        gen = np.random.Generator(getattr(np.random, data["bit_generator"])())
    gen.bit_generator.state = state
    return gen


def _restore_layer(layer: Any, state: dict, path: str, memo: dict) -> None:
    if type(layer).__qualname__ != state["class"]:
        raise EnvStateError(f"{path}: the checkpoint has a {state['class']} here, the env a "
                            f"{type(layer).__qualname__} (was it built differently?)")
    for name, item in state["attributes"].items():
        _restore_value(layer, name, item, join_path(path, name), memo)


def _restore_chain(env: Any, states: list, path: str, memo: dict) -> None:
    layers = _layers(env)
    if len(layers) != len(states):
        raise EnvStateError(f"{path}: the checkpoint has {len(states)} wrapper layers "
                            f"({[s['class'] for s in states]}), the env {len(layers)} "
                            f"({[type(x).__qualname__ for x in layers]})")
    for layer, state in zip(layers, states, strict=True):
        _restore_layer(layer, state, path, memo)


def restore_env(env: Any, state: dict[str, Any], name: str = "env") -> None:
    """Put a :func:`capture_env` state into ``env``, built as the captured one was."""
    subs = _sub_envs(env)
    memo: dict = {}
    if "layers" in state:
        if subs is not None:
            raise EnvStateError(f"{name}: the checkpoint has a single env, this is a vector env")
        _restore_chain(env, state["layers"], name, memo)
        return
    if subs is None or len(subs) != len(state["envs"]):
        raise EnvStateError(f"{name}: the checkpoint has a vector env of "
                            f"{len(state['envs'])} envs, this env has "
                            f"{'none' if subs is None else len(subs)}")
    _restore_layer(env, state["vector"], name, memo)
    for i, (sub, chain) in enumerate(zip(subs, state["envs"], strict=True)):
        _restore_chain(sub, chain, f"{name}.envs[{i}]", memo)
