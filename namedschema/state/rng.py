"""The global random generators' states: Python's ``random``, numpy's and torch's.

Capturing a state never draws from the generator, so a run that is checkpointed
draws exactly what it would have drawn without namedschema. torch is optional
and never imported here: its generators are captured only when something else
imported it already. Used by ``namedschema.rlpyt`` and ``namedschema.RunCheckpoint``.

``pcg64_words`` / ``set_pcg64_words`` hold one ``numpy.random.Generator`` (PCG64)
as six uint64 words, plain data: the replay buffers' and the sharded replay's own
generators travel in checkpoints that way.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from .._core.optional import import_torch, torch_if_loaded

__all__ = ["rng_state", "set_rng_state", "pcg64_words", "set_pcg64_words"]

_MASK64 = (1 << 64) - 1


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


def rng_state() -> dict[str, Any]:
    """States of Python's ``random``, numpy's global generator and torch's (CPU, CUDA)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": {"kind": kind, "keys": keys, "pos": int(pos),
                       "has_gauss": int(has_gauss), "gauss": float(gauss)}}
    torch = torch_if_loaded()
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["torch_cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], np.asarray(n["keys"], dtype=np.uint32), n["pos"],
                         n["has_gauss"], n["gauss"]))
    if "torch" in state:
        torch = import_torch()
        torch.set_rng_state(_cpu_byte_tensor(torch, state["torch"]))
        if "torch_cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([_cpu_byte_tensor(torch, s)
                                          for s in state["torch_cuda"]])


def _cpu_byte_tensor(torch, value):
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.uint8).clone()
