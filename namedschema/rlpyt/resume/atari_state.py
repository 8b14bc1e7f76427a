"""Exact state of rlpyt's ``AtariEnv``: its emulator, with the emulator's RNG.

The env's own attributes (frame stack, max-pool and raw frames, lives, step
counter) are plain data that the generic ``Env`` handler pickles; its ``ale``
is an emulator object that must not be pickled. Two kinds are supported:

ale-py        ``ale_py.ALEInterface`` and its subclasses (the atari_py adapter's
              included): ``cloneState(include_rng=True).serialize()``, restored
              with ``restoreState(ALEState(bytes))``.
atari_py      atari_py's ctypes ``ALEInterface``, which holds a raw C pointer as an
              int (pickling it "works" and leaves a dangling pointer):
              ``encodeState(cloneSystemState())``, restored with
              ``restoreSystemState(decodeState(buffer))``; the native states
              are freed with ``deleteState``.

Either way the state goes into the checkpoint as a ``uint8`` array and back
into the emulator of the freshly built env (which loaded the same ROM with the
same settings). An emulator of another kind is said at start; such an env
starts a new episode on resume. The handler (``atari_*``) is listed in :mod:`.handlers`.
"""

from __future__ import annotations

import numpy as np

from .registry import ResumeContext, StateMismatchError

__all__ = ["emulator_kind", "emulator_state", "restore_emulator_state", "atari_capture",
           "atari_restore", "atari_check", "ATARI_ENV"]

ATARI_ENV = "rlpyt.envs.atari.atari_env.AtariEnv"
# atari_py's state API, as in atari_py/ale_python_interface.py.
ATARI_PY_METHODS = ("cloneSystemState", "restoreSystemState", "encodeState", "decodeState",
                    "deleteState")


def _class_names(obj) -> set:
    return {f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__}


def emulator_kind(ale) -> str | None:
    """``"ale_py"``, ``"atari_py"``, or None for an emulator this module cannot save."""
    names = _class_names(ale)
    if "ale_py._ale_py.ALEInterface" in names or "ale_py.ALEInterface" in names:
        return "ale_py"
    if "atari_py.ale_python_interface.ALEInterface" in names and \
            all(callable(getattr(ale, m, None)) for m in ATARI_PY_METHODS):
        return "atari_py"
    return None


def emulator_state(ale) -> dict:
    """The emulator's full state, RNG included, as ``{"kind", "state": uint8 array}``."""
    kind = emulator_kind(ale)
    if kind == "ale_py":
        data = ale.cloneState(include_rng=True).serialize()
        return {"kind": kind, "state": np.frombuffer(data, np.uint8).copy()}
    if kind == "atari_py":
        native = ale.cloneSystemState()
        try:
            data = np.array(ale.encodeState(native), dtype=np.uint8, copy=True)
        finally:
            ale.deleteState(native)
        return {"kind": kind, "state": data}
    return {"kind": None}


def restore_emulator_state(ale, saved: dict, where: str = "env.ale") -> None:
    """Put :func:`emulator_state`'s result back into the emulator ``ale``."""
    kind = emulator_kind(ale)
    if saved["kind"] != kind:
        raise StateMismatchError(f"{where}: the checkpoint holds a {saved['kind']} emulator "
                                 f"state, the built env has a {type(ale).__qualname__} "
                                 f"({kind or 'not supported'})")
    # A writable, contiguous copy: ctypes (atari_py) cannot take read-only maps.
    data = np.array(saved["state"], dtype=np.uint8, copy=True)
    if kind == "ale_py":
        from ale_py import ALEState  # importable: ``ale`` is one of its objects
        ale.restoreState(ALEState(data.tobytes()))
    else:
        native = ale.decodeState(data)
        try:
            ale.restoreSystemState(native)
        finally:
            ale.deleteState(native)


def atari_check(env, ctx: ResumeContext) -> list[str]:
    ale = getattr(env, "ale", None)
    if emulator_kind(ale) is None:
        return [f"env {type(env).__name__}: its emulator ({type(ale).__qualname__}) is "
                "neither ale-py's nor atari_py's ALEInterface, so its state cannot be "
                "saved; on resume the env starts a new episode"]
    return []


def atari_capture(env, ctx: ResumeContext) -> dict:
    return {"ale": emulator_state(env.ale)}


def atari_restore(env, state, ctx: ResumeContext) -> None:
    if ctx.new_envs:
        return                  # accepted new env arguments: the env starts afresh
    if state["ale"]["kind"] is None:
        ctx.fresh_envs.append(env)
        return
    restore_emulator_state(env.ale, state["ale"])
