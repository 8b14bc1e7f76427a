"""torch, used only where it is already loaded: namedschema never imports it to look.

A tensor can exist only once something imported torch, so "is this a tensor?"
never needs to import it: :func:`torch_if_loaded` reads ``sys.modules``. Code
that must have torch (to make a tensor) calls :func:`import_torch`.

torch_if_loaded   the torch module if something imported it already, else None
is_tensor         whether a value is a torch tensor (a subclass such as a Parameter too)
import_torch      the torch module, imported now (ImportError if it is not installed)
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["torch_if_loaded", "is_tensor", "import_torch"]


def torch_if_loaded() -> Any:
    """The torch module if something imported it already, else None."""
    return sys.modules.get("torch")


def is_tensor(value: Any) -> bool:
    """Whether ``value`` is a ``torch.Tensor`` (or a subclass); never imports torch."""
    torch = torch_if_loaded()
    return torch is not None and isinstance(value, torch.Tensor)


def import_torch() -> Any:
    """The torch module, imported on first use (torch is optional)."""
    import torch
    return torch
