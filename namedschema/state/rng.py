"""Random generators' states, each kind captured, checked and set in one place.

Every resume path reads and writes generators through these functions: the rows of
``namedschema.training.state_kinds`` (one tracked generator), :func:`rng_state` (the
global ones, for ``RunCheckpoint`` and ``namedschema.rlpyt.resumable``, its sampler
workers included) and ``namedschema.state.env`` (an env's and its spaces' generators).
Capturing a state never draws from the generator, so a checkpointed run draws exactly
what it would have drawn without namedschema. torch is optional and never imported
here: its generators are captured only when something else imported it already.

python_*       a ``random.Random`` (or the ``random`` module): getstate / setstate
numpy_*        a ``numpy.random.RandomState`` (or ``numpy.random``): MT19937 words
torch_*        a ``torch.Generator`` (or the ``torch`` module's default one)
generator_*    a ``numpy.random.Generator``: its bit generator's state dict
rng_state / check_rng_state / set_rng_state   the global generators (Python, numpy, torch)
pcg64_words / set_pcg64_words   one PCG64 ``Generator`` as six uint64 words (replay buffers)

A ``*_check`` raises (TypeError, ValueError) when a state cannot be set, trying it on
a scratch generator, never on the run's; a ``*_apply`` sets a state that passed it.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from .._core.tree import import_torch, torch_if_loaded

__all__ = ["python_capture", "python_check", "python_apply",
           "numpy_capture", "numpy_check", "numpy_apply",
           "torch_capture", "torch_check", "torch_apply",
           "generator_capture", "generator_set", "BIT_GENERATORS",
           "rng_state", "set_rng_state", "check_rng_state", "pcg64_words", "set_pcg64_words"]

_MASK64 = (1 << 64) - 1

# The bit generators a saved state may name (a file never chooses other code to run).
BIT_GENERATORS: dict[str, type] = {
    "PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM, "MT19937": np.random.MT19937,
    "Philox": np.random.Philox, "SFC64": np.random.SFC64}


# -- random.Random ------------------------------------------------------------------------

def python_capture(gen: Any) -> dict[str, Any]:
    """``{"version", "internal" (625 uint64), "gauss"}`` of a ``random.Random`` (or ``random``)."""
    version, internal, gauss = gen.getstate()
    return {"version": version, "internal": np.array(internal, np.uint64), "gauss": gauss}


def _python_tuple(state: Any) -> tuple[Any, ...]:
    """The ``setstate`` tuple of :func:`python_capture`'s dict or of a ``getstate()`` tuple."""
    if isinstance(state, dict):
        if set(state) != {"version", "internal", "gauss"}:
            raise TypeError("not a random.Random state (version, internal, gauss)")
        version, internal, gauss = state["version"], state["internal"], state["gauss"]
    elif isinstance(state, (tuple, list)) and len(state) == 3:
        version, internal, gauss = state
        if not isinstance(internal, np.ndarray):
            internal = np.asarray(internal) if isinstance(internal, (tuple, list)) else None
    else:
        raise TypeError("not a random.Random state")
    if not isinstance(internal, np.ndarray) or internal.shape != (625,) or \
            internal.dtype.kind not in "ui" or not (internal[:624] < 1 << 32).all():
        raise TypeError("a random.Random's internal state must be 625 ints, the first 624 "
                        "of 32 bits")
    if version != 3 or not (gauss is None or isinstance(gauss, float)):
        raise ValueError("not a version 3 random.Random state")
    return (3, tuple(int(x) for x in internal), gauss)


def python_check(state: Any) -> None:
    """Check a Python ``random`` state on a scratch generator (errors as it raises them)."""
    random.Random().setstate(_python_tuple(state))   # a scratch one


def python_apply(gen: Any, state: Any) -> None:
    """Set the Python ``random`` generator ``gen`` to ``state``."""
    gen.setstate(_python_tuple(state))


# -- numpy.random.RandomState ---------------------------------------------------------------

def numpy_capture(gen: Any) -> dict[str, Any]:
    """``{"keys", "pos", "has_gauss", "gauss"}`` of a ``RandomState`` (or ``numpy.random``)."""
    _kind, keys, pos, has_gauss, gauss = gen.get_state()
    return {"keys": keys, "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)}


def _numpy_tuple(state: Any) -> tuple[Any, ...]:
    """The ``set_state`` tuple of :func:`numpy_capture`'s dict (a ``"kind"`` key allowed)."""
    fields = {"keys", "pos", "has_gauss", "gauss"}
    if not isinstance(state, dict) or set(state) - {"kind"} != fields or \
            state.get("kind", "MT19937") != "MT19937":
        raise TypeError("not a RandomState state (keys, pos, has_gauss, gauss)")
    keys = state["keys"]
    if not isinstance(keys, np.ndarray) or keys.shape != (624,) or keys.dtype != np.uint32:
        raise TypeError("a RandomState's keys must be 624 uint32")
    for label in ("pos", "has_gauss"):
        if isinstance(state[label], bool) or not isinstance(state[label], (int, np.integer)):
            raise TypeError(f"a RandomState's {label} must be an int")
    if not 0 <= state["pos"] <= 624 or state["has_gauss"] not in (0, 1) or \
            not isinstance(state["gauss"], (float, np.floating)):
        raise ValueError("a RandomState's pos, has_gauss or gauss is out of range")
    return ("MT19937", np.array(keys, np.uint32), int(state["pos"]), int(state["has_gauss"]),
            float(state["gauss"]))


def numpy_check(state: Any) -> None:
    """Check a ``RandomState`` state on a scratch generator (errors as it raises them)."""
    np.random.RandomState().set_state(_numpy_tuple(state))   # a scratch one


def numpy_apply(gen: Any, state: Any) -> None:
    """Set the ``RandomState`` ``gen`` to ``state``."""
    gen.set_state(_numpy_tuple(state))


# -- torch.Generator ----------------------------------------------------------------------

def torch_capture(gen: Any) -> Any:
    """A ``torch.Generator``'s state (or, for the ``torch`` module, its default CPU one)."""
    torch = torch_if_loaded()
    return (torch.get_rng_state() if gen is torch else gen.get_state()).clone()


def torch_check(gen: Any, state: Any) -> None:
    """Check a torch generator state on a scratch generator of ``gen``'s device."""
    torch = import_torch()
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.ndim != 1:
        raise TypeError("a torch generator state must be a uint8 tensor")
    device = "cpu" if gen is torch else gen.device
    torch.Generator(device=device).set_state(state.clone())    # a scratch one


def torch_apply(gen: Any, state: Any) -> None:
    """Set the torch generator ``gen`` (or torch's global one) to ``state``."""
    torch = import_torch()
    value = state.detach().to("cpu", torch.uint8).clone()
    (torch.set_rng_state if gen is torch else gen.set_state)(value)


# -- numpy.random.Generator ---------------------------------------------------------------

def generator_capture(gen: np.random.Generator) -> dict[str, Any]:
    """A ``Generator``'s ``bit_generator.state`` (a dict; its 128-bit words are Python ints)."""
    return dict(gen.bit_generator.state)


def generator_set(gen: np.random.Generator | None, state: Any,
                  write: bool = True) -> np.random.Generator:
    """``gen`` set to ``state`` (from :func:`generator_capture`); returns it.

    The state names its bit generator: one of :data:`BIT_GENERATORS` or ``gen``'s own
    class. When ``gen`` is None or of another class, a new generator of the named class
    is set and returned. With ``write`` False a scratch generator is set instead: that
    checks the state and changes nothing. Raises ValueError (TypeError) for a state
    that cannot be set.
    """
    name = state.get("bit_generator") if isinstance(state, dict) else None
    own = type(gen.bit_generator) if gen is not None else None
    cls = BIT_GENERATORS.get(name) if isinstance(name, str) else None
    if cls is None and own is not None and own.__name__ == name:
        cls = own
    if cls is None:
        raise ValueError(f"the state names the bit generator {name!r:.40}; only "
                         f"{sorted(BIT_GENERATORS)} are accepted")
    target = gen if write and gen is not None and own is cls else \
        np.random.Generator(cls())     # seeded by the OS: the run's generators untouched
    try:
        target.bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise ValueError(f"not a valid {name} generator state ({exc})") from None
    return target


# -- one PCG64 Generator as six words -----------------------------------------------------

def pcg64_words(rng: np.random.Generator) -> np.ndarray:
    """A PCG64 generator's whole state as six uint64 words (plain data)."""
    st = rng.bit_generator.state
    s, inc = st["state"]["state"], st["state"]["inc"]
    return np.array([s >> 64, s & _MASK64, inc >> 64, inc & _MASK64,
                     st["has_uint32"], st["uinteger"]], np.uint64)


def set_pcg64_words(rng: np.random.Generator, words: object, where: str) -> None:
    """Set ``rng`` (PCG64) to the state :func:`pcg64_words` gave; ``where`` names it in errors."""
    w = np.asarray(words)
    if w.shape != (6,) or w.dtype != np.uint64:
        raise ValueError(f"{where}: the generator state must be 6 uint64 words, got "
                         f"{w.dtype} {w.shape}")
    v = [int(x) for x in w]
    rng.bit_generator.state = {"bit_generator": "PCG64",
                               "state": {"state": (v[0] << 64) | v[1], "inc": (v[2] << 64) | v[3]},
                               "has_uint32": v[4], "uinteger": v[5]}


# -- the global generators ----------------------------------------------------------------

def rng_state() -> dict[str, Any]:
    """States of Python's ``random``, numpy's global generator and torch's (CPU, CUDA).

    Layout (written into checkpoints): ``"python"`` the ``random.getstate()`` tuple,
    ``"numpy"`` :func:`numpy_capture`'s dict with ``"kind": "MT19937"``, ``"torch"`` and
    ``"torch_cuda"`` (initialized devices) uint8 tensors.
    """
    state = {"python": random.getstate(),
             "numpy": {"kind": "MT19937", **numpy_capture(np.random)}}
    torch = torch_if_loaded()
    if torch is not None:
        state["torch"] = torch_capture(torch)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["torch_cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def check_rng_state(state: Any) -> None:
    """Raise (TypeError, ValueError) if :func:`set_rng_state` cannot take ``state``; set nothing.

    Each part is tried on a scratch generator, never on the global ones.
    """
    if not isinstance(state, dict) or not {"python", "numpy"} <= set(state) or \
            not set(state) <= {"python", "numpy", "torch", "torch_cuda"}:
        raise TypeError("not a global generator state (python, numpy[, torch])")
    python_check(state["python"])
    if not isinstance(state["numpy"], dict) or "kind" not in state["numpy"]:
        raise TypeError("not a numpy MT19937 state")
    numpy_check(state["numpy"])
    if "torch" in state:
        torch_check(import_torch(), state["torch"])
    cuda = state.get("torch_cuda", [])
    if not isinstance(cuda, list) or len(cuda) > 1024:
        raise TypeError("torch's CUDA generator states must be a list")


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    python_apply(random, state["python"])
    numpy_apply(np.random, state["numpy"])
    if "torch" in state:
        torch = import_torch()
        torch_apply(torch, state["torch"])
        if "torch_cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.detach().to("cpu", torch.uint8).clone()
                                          for s in state["torch_cuda"]])
