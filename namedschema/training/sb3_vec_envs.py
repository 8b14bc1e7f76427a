"""Stable-Baselines3's vector envs as a state kind, SubprocVecEnv's workers included.

is_sb3_vec_env   whether an object is an SB3 ``VecEnv`` (a wrapper chain or a base one)
capture          every layer's state, and every sub-env's (in its worker for SubprocVecEnv)
check            whether a captured state fits the vector env (same layers, same sub-envs)
apply            put a checked state in

A vector env is captured layer by layer, outermost first: each ``VecEnvWrapper``
(``VecFrameStack``'s stacked frames, ``VecNormalize``'s running statistics,
``VecMonitor``'s episode counters...) down to the base ``DummyVecEnv`` or
``SubprocVecEnv`` (its buffers, pending seeds, spaces' generators), then each
sub-env with its gymnasium wrappers down to the base env, ALE emulators included
(:mod:`namedschema.state.env` does the layers). Spaces are restored in place, so
the model and the env keep sharing one space object.

A ``SubprocVecEnv``'s sub-envs live in its worker processes, reachable only
through ``env_method``; pickling them back (``get_attr``) would give freshly
constructed envs for every ``EzPickle`` env (Atari, Box2D, MuJoCo) without any
error. So the state is captured and restored *inside* each worker: the command
carries a marker whose unpickling, in the worker, adds two methods to
``gymnasium.Env`` (``_namedschema_capture_env`` / ``_namedschema_restore_env``,
which call :func:`~namedschema.state.env.capture_env` /
:func:`~namedschema.state.env.restore_env` on the worker's env); nothing else
in the worker changes, nothing is stepped or drawn. A sub-env that cannot be
captured exactly is named in a warning and restarted rather than resumed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import StateMismatchError
from ..state.env import capture_env, capture_layer, restore_env, restore_layer

if TYPE_CHECKING:
    from .state_kinds import KindContext

__all__ = ["is_sb3_vec_env", "capture", "check", "apply"]

_BASE = "stable_baselines3.common.vec_env.base_vec_env"
_CAPTURE = "_namedschema_capture_env"
_RESTORE = "_namedschema_restore_env"


def _has_class(obj: Any, name: str, module: str = _BASE) -> bool:
    return any(c.__name__ == name and c.__module__ == module for c in type(obj).__mro__)


def is_sb3_vec_env(obj: Any) -> bool:
    """Whether ``obj`` is a Stable-Baselines3 VecEnv (wrapped or not)."""
    return _has_class(obj, "VecEnv")


def _chain(venv: Any) -> list[Any]:
    """The vector env and the vector envs it wraps, outermost first."""
    out = [venv]
    while _has_class(out[-1], "VecEnvWrapper") and len(out) < 100:
        out.append(out[-1].venv)
    return out


def _is_subproc(venv: Any) -> bool:
    return _has_class(venv, "SubprocVecEnv", "stable_baselines3.common.vec_env.subproc_vec_env")


# -- inside SubprocVecEnv's workers ----------------------------------------------------

def _worker_capture(env: Any, _marker: Any) -> tuple[Any, ...]:
    return capture_env(env, "env")


def _worker_restore(env: Any, _marker: Any, state: Any) -> None:
    restore_env(env, state, "env")


def _install_in_worker() -> _Installed:
    """Run where the command is unpickled (the worker): give envs the two methods."""
    import gymnasium

    setattr(gymnasium.Env, _CAPTURE, _worker_capture)
    setattr(gymnasium.Env, _RESTORE, _worker_restore)
    return _Installed()


class _Installed:
    """The marker sent with the command; unpickling it installs the methods first."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_install_in_worker, ())


def _sub_states(base: Any) -> list[tuple[Any, str | None]]:
    if _is_subproc(base):
        return [tuple(item) for item in base.env_method(_CAPTURE, _Installed())]
    envs = getattr(base, "envs", None)
    if not isinstance(envs, list):
        return [(None, f"{type(base).__qualname__} is a vector env this library does not "
                 "know how to reach into")] * base.num_envs
    return [capture_env(env, f"envs[{i}]") for i, env in enumerate(envs)]


# -- the row ---------------------------------------------------------------------------

def capture(obj: Any, ctx: KindContext) -> dict[str, Any]:
    """Every layer's state and every sub-env's; uncapturable parts named in a warning."""
    layers, missing = [], []
    for layer in _chain(obj):
        state, reason = capture_layer(layer, f"{ctx.name}.{type(layer).__qualname__}")
        if state is None:
            missing.append(reason)
        layers.append(state)
    subs = _sub_states(_chain(obj)[-1])
    missing += [f"sub-env {i}: {reason}" for i, (state, reason) in enumerate(subs)
                if state is None]
    if missing:
        ctx.warn_once(ctx.name, f"vector env {ctx.name!r} cannot be captured exactly "
                      f"({'; '.join(str(m) for m in missing)}); a resumed run restarts "
                      "those parts with their fresh state")
    return {"layers": [{"restarted": ""} if s is None else {"captured": s} for s in layers],
            "envs": [{"restarted": reason} if state is None else {"captured": state}
                     for state, reason in subs]}


def check(obj: Any, state: Any, ctx: KindContext) -> None:
    """The same layers (by class) and the same number of sub-envs, or StateMismatchError."""
    chain = _chain(obj)
    saved = [layer["captured"]["class"] if "captured" in layer else "?"
             for layer in state["layers"]]
    built = [type(layer).__qualname__ for layer in chain]
    if len(saved) != len(built) or any(s not in ("?", b) for s, b in zip(saved, built, strict=False)):
        raise StateMismatchError(f"RunCheckpoint: {ctx.name!r} was saved as the vector envs "
                                 f"{saved}, this one is {built}", where=ctx.name)
    if len(state["envs"]) != chain[-1].num_envs:
        raise StateMismatchError(f"RunCheckpoint: {ctx.name!r} was saved with "
                                 f"{len(state['envs'])} sub-envs, this one has "
                                 f"{chain[-1].num_envs}", where=ctx.name)


def apply(obj: Any, state: Any, ctx: KindContext) -> None:
    """Put every captured layer and sub-env back; name those that are restarted."""
    chain = _chain(obj)
    for layer, saved in zip(chain, state["layers"], strict=True):
        if "captured" in saved:
            restore_layer(layer, saved["captured"], f"{ctx.name}.{type(layer).__qualname__}")
    base = chain[-1]
    restarted = []
    for i, saved in enumerate(state["envs"]):
        if "captured" not in saved:
            restarted.append(f"sub-env {i}: {saved['restarted']}")
        elif _is_subproc(base):
            base.env_method(_RESTORE, _Installed(), saved["captured"], indices=[i])
        else:
            restore_env(base.envs[i], saved["captured"], f"{ctx.name}.envs[{i}]")
    if any("captured" not in saved for saved in state["layers"]):
        restarted.append("a vector env layer")
    if restarted:
        ctx.restarted[ctx.name] = "; ".join(restarted)
        ctx.warn_once(ctx.name, f"vector env {ctx.name!r}: {'; '.join(restarted)} were not "
                      "captured and keep their fresh state")
