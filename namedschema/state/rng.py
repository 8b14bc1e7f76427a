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

__all__ = ["rng_state", "set_rng_state", "check_rng_state", "pcg64_words", "set_pcg64_words"]

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


def check_rng_state(state: Any) -> None:
    """Raise (TypeError, ValueError) if :func:`set_rng_state` cannot take ``state``; set nothing.

    Each part is tried on a scratch generator (``random.Random``, ``RandomState``,
    ``torch.Generator``), never on the global ones.
    """
    if not isinstance(state, dict) or not {"python", "numpy"} <= set(state) or \
            not set(state) <= {"python", "numpy", "torch", "torch_cuda"}:
        raise TypeError("not a global generator state (python, numpy[, torch])")
    py = state["python"]
    if not isinstance(py, (tuple, list)) or len(py) != 3 or py[0] != 3:
        raise TypeError("not a version 3 Python random state")
    internal = np.asarray(py[1]) if isinstance(py[1], (np.ndarray, tuple, list)) else None
    if internal is None or internal.shape != (625,) or internal.dtype.kind not in "ui" or \
            not (internal[:624] < 1 << 32).all() or not (py[2] is None or
                                                        isinstance(py[2], float)):
        raise TypeError("not a Python random state (625 ints, the first 624 of 32 bits)")
    random.Random().setstate((3, tuple(int(x) for x in internal), py[2]))
    n = state["numpy"]
    if not isinstance(n, dict) or set(n) != {"kind", "keys", "pos", "has_gauss", "gauss"} \
            or n["kind"] != "MT19937" or not isinstance(n["keys"], np.ndarray) or \
            n["keys"].dtype != np.uint32 or n["keys"].shape != (624,) or \
            not isinstance(n["pos"], (int, np.integer)) or not 0 <= n["pos"] <= 624 or \
            n["has_gauss"] not in (0, 1) or not isinstance(n["gauss"], (float, np.floating)):
        raise TypeError("not a numpy MT19937 state")
    np.random.RandomState().set_state((n["kind"], n["keys"], int(n["pos"]),
                                       int(n["has_gauss"]), float(n["gauss"])))
    if "torch" in state:
        torch = import_torch()
        if not isinstance(state["torch"], torch.Tensor) or state["torch"].dtype != torch.uint8:
            raise TypeError("torch's generator state must be a uint8 tensor")
        torch.Generator().set_state(state["torch"].clone())
    cuda = state.get("torch_cuda", [])
    if not isinstance(cuda, list) or len(cuda) > 1024:
        raise TypeError("torch's CUDA generator states must be a list")


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
