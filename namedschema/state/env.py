"""Exact state of gymnasium environments (Atari included), as plain data.

capture_env    an env's or a synchronous vector env's whole state, or None with the reason
check_env      raise what restore_env would, changing nothing (a restore checks first)
restore_env    write a captured state into a freshly built env of the same construction
env_settings   an env's settings as built (``TimeLimit``'s step limit...), name -> value
keep_env_settings  put settings back into an env (a changed setting the run accepts)
capture_layer  one object's state attributes (a vector env wrapper's, say), or the reason not
restore_layer  write what capture_layer gave into the same kind of object
emulator_capture / emulator_check / emulator_apply  an Atari emulator's whole state (ale-py, atari_py), once
emulator_kind  which of those an emulator is, or None
StateMismatchError  a captured state does not fit the env it is restored into (EnvStateError,
               its old name, is exported here too)

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
Capturing never steps an env and never draws from a generator. A state is
untrusted input: :func:`check_env` walks it exactly as :func:`restore_env` does
without writing anything (kinds, classes, layer counts, array dtypes and shapes,
generator states tried on a scratch generator of an allow-listed bit generator
class: a file never names code to run), so a restore checks before it writes.
"""

from __future__ import annotations

import collections
import enum
import types
from typing import Any

import numpy as np

from .._core.tree import join_path
from ..errors import EnvStateError, StateMismatchError
from . import rng as _rng

__all__ = ["capture_env", "check_env", "restore_env", "env_settings", "keep_env_settings",
           "capture_layer", "restore_layer", "emulator_kind", "emulator_capture",
           "emulator_check", "emulator_apply", "ATARI_PY_METHODS", "EnvStateError"]

# Attributes of wrapper layers that are settings chosen in code, not state: compared
# between a checkpoint and the run it is restored into (RunCheckpoint's accept_changes).
_SETTING_NAMES = ("_max_episode_steps", "frame_skip", "noop_max", "terminal_on_life_loss",
                  "repeat_action_probability", "_skip", "stack_size")
_MAX_DEPTH = 64    # nesting of captured values (a file could nest lists without end)

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
    def __init__(self, path: str, value: Any) -> None:
        super().__init__(f"{path} ({type(value).__module__}.{type(value).__qualname__})")


_CONFIG = object()  # marker: an attribute that is configuration, not state


def _is_space(value: Any) -> bool:
    return any(c.__module__.startswith("gymnasium.spaces") and c.__name__ == "Space"
               for c in type(value).__mro__)


def _is_ale(value: Any) -> bool:
    return emulator_kind(value) == "ale_py"


def _generator_state(gen: np.random.Generator) -> dict[str, Any]:
    st = _rng.generator_capture(gen)
    return {"bit_generator": st["bit_generator"], "state": _exact(st)}


def _exact(value: Any) -> Any:
    """A generator state with its 128-bit ints as decimal strings (JSON-safe data)."""
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 62:
        return {"int": str(value)}
    return value


def _unexact(value: Any, depth: int = 0) -> Any:
    if isinstance(value, dict):
        if depth > 4:     # a generator state is two levels deep; a file could nest more
            raise StateMismatchError("a generator state nested too deep")
        if set(value) == {"int"}:
            text = value["int"]
            if not isinstance(text, str) or len(text) > 50 or not text.lstrip("-").isdigit():
                raise StateMismatchError(f"a generator state holds an invalid int {text!r:.60}")
            return int(text)
        return {k: _unexact(v, depth + 1) for k, v in value.items()}
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
        return ["ale", _ale_py_bytes(value)]
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


def _layers(env: Any) -> list[Any]:
    """The env and the envs it wraps, outermost first."""
    out = [env]
    while hasattr(out[-1], "env") and out[-1].env is not None and len(out) < 100:
        out.append(out[-1].env)
    return out


def _layer_state(layer: Any, path: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
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
    _restore_layer(obj, state, path, {}, True)


def _sub_envs(env: Any) -> list[Any] | None:
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


def _restore_value(owner: Any, name: str, item: Any, path: str, memo: dict[int, Any],
                   write: bool) -> None:
    kind, data = _item(item, path)
    value = _rebuilt(getattr(owner, name, None), kind, data, path, memo, write, 0)
    if write:
        setattr(owner, name, value)


def _item(item: Any, path: str) -> tuple[str, Any]:
    if not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[0], str):
        raise StateMismatchError(f"{path}: not a captured value ([kind, data] expected, got "
                            f"{type(item).__name__})")
    return item[0], item[1]


def _rebuilt(current: Any, kind: str, data: Any, path: str, memo: dict[int, Any], write: bool,
             depth: int) -> Any:
    """The value to put in place of ``current`` (often ``current`` itself, updated).

    With ``write`` False nothing is changed (what is returned is then not to be used):
    the same walk checks a state before any of it is written.
    """
    if depth > _MAX_DEPTH:
        raise StateMismatchError(f"{path}: nested deeper than {_MAX_DEPTH} levels")
    if kind == "value":
        if not (data is None or isinstance(data, (bool, int, float, str, np.generic))):
            raise StateMismatchError(f"{path}: a value must be a number, a string or None, the "
                                f"checkpoint has a {type(data).__name__}")
        return data
    if kind == "array":
        if not isinstance(data, np.ndarray) or data.dtype.hasobject:
            raise StateMismatchError(f"{path}: the checkpoint has no array here (a "
                                f"{type(data).__name__})")
        # An empty array is a placeholder the env replaces as it runs (VecNormalize's
        # old_reward starts as float64 (0,)); any other array keeps its dtype and shape.
        if isinstance(current, np.ndarray) and current.size and (
                current.dtype != data.dtype or current.shape != data.shape):
            raise StateMismatchError(f"{path}: the checkpoint has an array of {data.dtype} "
                                f"{data.shape}, the env {current.dtype} {current.shape}")
        # A fresh array, never a write into the env's: the env's arrays may alias one
        # another (a frame stack repeats one padding array). Arrays that were one array
        # when captured are one array again (the file keeps identity; ``memo`` too).
        key = id(data)
        if key not in memo:
            memo[key] = np.array(data, copy=True) if write else data
        return memo[key]
    if kind == "generator":
        gen = current if isinstance(current, np.random.Generator) else None
        return _set_generator(gen, data, path, write)
    if kind == "space":
        if current is None or not _is_space(current):
            raise StateMismatchError(f"{path}: the checkpoint has a space here, the env "
                                f"{type(current).__name__}")
        if data is not None:
            gen = _set_generator(getattr(current, "_np_random", None), data, path, write)
            if write:
                current._np_random = gen
        return current
    if kind == "ale":
        if current is None or not _is_ale(current):
            raise StateMismatchError(f"{path}: the checkpoint has an ALE emulator here, the env "
                                f"{type(current).__name__}")
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 1:
            raise StateMismatchError(f"{path}: an emulator state must be a uint8 array, the "
                                f"checkpoint has {getattr(data, 'dtype', type(data).__name__)}")
        _ale_py_put(current, data, write)
        return current
    if kind == "sequence":
        if not isinstance(data, dict) or not isinstance(data.get("items"), list) or \
                data.get("kind") not in ("list", "tuple", "deque"):
            raise StateMismatchError(f"{path}: not a captured list, tuple or deque")
        maxlen = data.get("maxlen")
        if maxlen is not None and (isinstance(maxlen, bool) or not isinstance(
                maxlen, (int, np.integer)) or maxlen < 0):
            raise StateMismatchError(f"{path}: a deque's maxlen must be None or an int >= 0, "
                                f"got {maxlen!r:.40}")
        olds = list(current) if isinstance(current, (list, tuple, collections.deque)) else []
        items = [_rebuilt(olds[i] if i < len(olds) else None, *_item(d, join_path(path, i)),
                          join_path(path, i), memo, write, depth + 1)
                 for i, d in enumerate(data["items"])]
        if data["kind"] == "deque":
            return collections.deque(items, maxlen=None if maxlen is None else int(maxlen))
        return tuple(items) if data["kind"] == "tuple" else items
    if kind == "dict":
        if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
            raise StateMismatchError(f"{path}: not a captured dict")
        old = current if isinstance(current, dict) else {}
        return {k: _rebuilt(old.get(k), *_item(d, join_path(path, k)), join_path(path, k),
                            memo, write, depth + 1)
                for k, d in data.items()}
    if kind == "ordered_dict":
        if not isinstance(data, list) or not all(
                isinstance(pair, (list, tuple)) and len(pair) == 2 for pair in data):
            raise StateMismatchError(f"{path}: not a captured ordered dict")
        old = current if isinstance(current, dict) else {}
        return collections.OrderedDict(
            (k, _rebuilt(old.get(k), *_item(d, join_path(path, str(k))),
                         join_path(path, str(k)), memo, write, depth + 1))
            for k, d in data)
    if kind == "object":
        if not isinstance(data, dict) or not isinstance(data.get("class"), str):
            raise StateMismatchError(f"{path}: not a captured object")
        if current is None or type(current).__qualname__ != data["class"]:
            raise StateMismatchError(f"{path}: the checkpoint has a {data['class']:.60} here, the "
                                f"env {type(current).__name__}")
        _restore_layer(current, data, path, memo, write)
        return current
    raise StateMismatchError(f"{path}: unknown captured kind {kind!r:.40}")


def _set_generator(gen: np.random.Generator | None, data: Any, path: str,
                   write: bool) -> np.random.Generator:
    """``gen`` (or a new generator) set to the captured state; with ``write`` False,
    a scratch generator is set instead, which checks the state and changes nothing."""
    name = data.get("bit_generator") if isinstance(data, dict) else None
    if not isinstance(name, str) or name not in _rng.BIT_GENERATORS:
        raise StateMismatchError(f"{path}: the checkpoint names the bit generator {name!r:.40}; "
                            f"only {sorted(_rng.BIT_GENERATORS)} are accepted")
    state = _unexact(data.get("state"))
    if not isinstance(state, dict) or state.get("bit_generator") != name:
        raise StateMismatchError(f"{path}: not a {name:.40} generator state")
    try:
        return _rng.generator_set(gen, state, write)
    except (TypeError, ValueError) as exc:
        raise StateMismatchError(f"{path}: {exc}") from None


def _layer_checked(layer: Any, state: Any, path: str) -> dict[str, Any]:
    if not isinstance(state, dict) or not isinstance(state.get("attributes"), dict) or \
            not all(isinstance(k, str) for k in state["attributes"]):
        raise StateMismatchError(f"{path}: not a captured wrapper layer")
    if type(layer).__qualname__ != state.get("class"):
        raise StateMismatchError(f"{path}: the checkpoint has a {state.get('class')!r:.80} here, the "
                            f"env a {type(layer).__qualname__} (was it built differently?)")
    attributes: dict[str, Any] = state["attributes"]    # a dict with str keys: checked above
    return attributes


def _restore_layer(layer: Any, state: Any, path: str, memo: dict[int, Any], write: bool) -> None:
    for name, item in _layer_checked(layer, state, path).items():
        _restore_value(layer, name, item, join_path(path, name), memo, write)


def _restore_chain(env: Any, states: Any, path: str, memo: dict[int, Any], write: bool) -> None:
    layers = _layers(env)
    if not isinstance(states, list) or len(layers) != len(states):
        n = len(states) if isinstance(states, list) else "no list of"
        raise StateMismatchError(f"{path}: the checkpoint has {n} wrapper layers, the env "
                            f"{len(layers)} ({[type(x).__qualname__ for x in layers]})")
    for layer, state in zip(layers, states, strict=True):
        _restore_layer(layer, state, path, memo, write)


def _walk(env: Any, state: Any, name: str, write: bool) -> None:
    subs = _sub_envs(env)
    memo: dict[int, Any] = {}
    if not isinstance(state, dict) or not ("layers" in state or "envs" in state):
        raise StateMismatchError(f"{name}: not a captured env state")
    if "layers" in state:
        if subs is not None:
            raise StateMismatchError(f"{name}: the checkpoint has a single env, this is a vector env")
        _restore_chain(env, state["layers"], name, memo, write)
        return
    envs = state["envs"]
    if subs is None or not isinstance(envs, list) or len(subs) != len(envs):
        raise StateMismatchError(f"{name}: the checkpoint has a vector env of "
                            f"{len(envs) if isinstance(envs, list) else 'no list of'} envs, "
                            f"this env has {'none' if subs is None else len(subs)}")
    _restore_layer(env, state.get("vector"), name, memo, write)
    for i, (sub, chain) in enumerate(zip(subs, envs, strict=True)):
        _restore_chain(sub, chain, f"{name}.envs[{i}]", memo, write)


def check_env(env: Any, state: Any, name: str = "env") -> None:
    """Raise the :class:`StateMismatchError` :func:`restore_env` would raise; change nothing."""
    _walk(env, state, name, write=False)


def restore_env(env: Any, state: dict[str, Any], name: str = "env") -> None:
    """Put a :func:`capture_env` state into ``env``, built as the captured one was.

    The whole state is checked first (:func:`check_env`): a state that does not fit
    raises before anything in the env changed.
    """
    _walk(env, state, name, write=False)
    _walk(env, state, name, write=True)


def _setting_layers(env: Any, name: str) -> list[Any]:
    """``(prefix, layer)`` for every layer of ``env`` (and of its sub-envs)."""
    subs = _sub_envs(env)
    chains = [(name, env)] if subs is None else \
        [(f"{name}.envs[{i}]", sub) for i, sub in enumerate(subs)]
    out = []
    for prefix, chain in chains:
        seen: dict[str, Any] = {}
        for layer in _layers(chain):
            cls = type(layer).__qualname__
            seen[cls] = seen.get(cls, 0) + 1
            out.append((f"{prefix}.{cls}" + ("" if seen[cls] == 1 else f"#{seen[cls]}"),
                        layer))
    return out


def env_settings(env: Any, name: str = "env") -> dict[str, Any]:
    """The settings chosen in code of every wrapper layer (``"env.TimeLimit._max_episode_steps"``).

    Names are relative to ``name`` and without it: ``"TimeLimit._max_episode_steps"``,
    ``"envs[0].TimeLimit._max_episode_steps"``.
    """
    out: dict[str, Any] = {}
    for prefix, layer in _setting_layers(env, name):
        for attr in _SETTING_NAMES:
            value = vars(layer).get(attr)
            if isinstance(value, (bool, int, float, str)):
                out[f"{prefix[len(name) + 1:]}.{attr}".lstrip(".")] = value
    return out


def keep_env_settings(env: Any, values: dict[str, Any], name: str = "env") -> None:
    """Set the settings :func:`env_settings` named (those of ``values``) to ``values``."""
    for prefix, layer in _setting_layers(env, name):
        for attr in _SETTING_NAMES:
            key = f"{prefix[len(name) + 1:]}.{attr}".lstrip(".")
            if key in values and attr in vars(layer):
                setattr(layer, attr, values[key])


# -- Atari emulators: one capture (with the emulator's own generator), one restore -------

# atari_py's state API, as in atari_py/ale_python_interface.py.
ATARI_PY_METHODS = ("cloneSystemState", "restoreSystemState", "encodeState", "decodeState",
                    "deleteState")


def emulator_kind(ale: Any) -> str | None:
    """``"ale_py"`` (ale-py's ``ALEInterface`` and subclasses, the atari_py adapter's
    included), ``"atari_py"`` (atari_py's ctypes one), or None for another emulator."""
    names = {f"{c.__module__}.{c.__qualname__}" for c in type(ale).__mro__}
    if "ale_py._ale_py.ALEInterface" in names or "ale_py.ALEInterface" in names:
        return "ale_py"
    if "atari_py.ale_python_interface.ALEInterface" in names and \
            all(callable(getattr(ale, m, None)) for m in ATARI_PY_METHODS):
        return "atari_py"
    return None


def _ale_py_bytes(ale: Any) -> np.ndarray:
    """ale-py's whole emulator state, its random generator (sticky actions) included."""
    return np.frombuffer(ale.cloneState(include_rng=True).serialize(), np.uint8).copy()


def _ale_py_put(ale: Any, data: np.ndarray, write: bool = True) -> None:
    from ale_py import ALEState  # importable: ``ale`` is one of its objects
    state = ALEState(np.ascontiguousarray(data, np.uint8).tobytes())
    if write:
        ale.restoreState(state)


def emulator_capture(ale: Any) -> dict[str, Any]:
    """The emulator's full state, RNG included: ``{"kind", "state": uint8 array}``
    (``{"kind": None}`` for an emulator of another kind).

    atari_py's ctypes emulator holds a raw C pointer as an int (pickling it leaves a
    dangling pointer): its state is ``encodeState(cloneSystemState())``, the native
    state freed with ``deleteState``.
    """
    kind = emulator_kind(ale)
    if kind == "ale_py":
        return {"kind": kind, "state": _ale_py_bytes(ale)}
    if kind == "atari_py":
        native = ale.cloneSystemState()
        try:
            data = np.array(ale.encodeState(native), dtype=np.uint8, copy=True)
        finally:
            ale.deleteState(native)
        return {"kind": kind, "state": data}
    return {"kind": None}


def emulator_check(ale: Any, saved: Any) -> None:
    """Raise StateMismatchError if :func:`emulator_apply` cannot put ``saved`` into ``ale``."""
    kind = emulator_kind(ale)
    saved_kind = saved.get("kind") if isinstance(saved, dict) else None
    if saved_kind != kind or kind is None:
        raise StateMismatchError(f"the checkpoint holds a {saved_kind} emulator state, the built "
                            f"env has a {type(ale).__qualname__} ({kind or 'not supported'})")
    data = saved.get("state")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 1:
        raise StateMismatchError("an emulator state must be a uint8 array, the checkpoint has "
                            f"{getattr(data, 'dtype', type(data).__name__)}")


def emulator_apply(ale: Any, saved: dict[str, Any], where: str = "env.ale") -> None:
    """Put :func:`emulator_capture`'s state back into ``ale`` (an emulator of the same
    kind that loaded the same ROM with the same settings); StateMismatchError if it cannot."""
    try:
        emulator_check(ale, saved)
    except StateMismatchError as exc:
        raise StateMismatchError(f"{where}: {exc}") from None
    # A writable, contiguous copy: ctypes (atari_py) cannot take read-only maps.
    data = np.array(saved["state"], dtype=np.uint8, copy=True)
    if emulator_kind(ale) == "ale_py":
        _ale_py_put(ale, data)
        return
    native = ale.decodeState(data)
    try:
        ale.restoreSystemState(native)
    finally:
        ale.deleteState(native)
