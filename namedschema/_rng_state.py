"""The global random generators' states: Python's ``random``, numpy's and torch's.

Capturing a state never draws from the generator, so a run that is checkpointed
draws exactly what it would have drawn without namedschema. torch is optional
and never imported here: its generators are captured only when something else
imported it already. Used by ``namedschema.rlpyt`` and ``namedschema.RunCheckpoint``.
"""

from __future__ import annotations

import random
import sys

import numpy as np

__all__ = ["rng_state", "set_rng_state"]


def torch_if_loaded():
    """The torch module if something imported it already, else None."""
    return sys.modules.get("torch")


def import_torch():
    """The torch module (imported on first use: torch is optional)."""
    import torch
    return torch


def rng_state() -> dict:
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


def set_rng_state(state: dict) -> None:
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
