"""Optional dependencies: torch used only where loaded, and how to install an extra.

Standard library only.

torch, where loaded
-------------------

torch, used only where it is already loaded: namedschema never imports it to look.

A tensor can exist only once something imported torch, so "is this a tensor?"
never needs to import it: :func:`torch_if_loaded` reads ``sys.modules``. Code
that must have torch (to make a tensor) calls :func:`import_torch`.

torch_if_loaded   the torch module if something imported it already, else None
is_tensor         whether a value is a torch tensor (a subclass such as a Parameter too)
import_torch      the torch module, imported now (ImportError if it is not installed)

Installing an extra
-------------------

How to install an optional extra, said for the way this namedschema was installed.

``pip install 'namedschema[torch]'`` only works once namedschema is on a package index; a
user who installed from a clone needs ``pip install -e '/their/clone[torch]'``, and one who
runs from a source tree without installing needs the requirement itself. Messages about a
missing optional dependency end with :func:`extra_hint`.

extra_hint   "install the torch extra: pip install -e '/path/to/clone[torch]' ..."
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from importlib import metadata
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = ["extra_hint", "import_torch", "is_tensor", "torch_if_loaded"]


# --------------------------------------------------------------------------
# torch, where loaded
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# Installing an extra
# --------------------------------------------------------------------------

# Used only when namedschema runs without being installed (no metadata to read).
_FALLBACK = {"torch": ["torch>=2.0"], "plot": ["matplotlib>=3.7"], "ray": ["ray>=2.9"],
             "optree": ["optree>=0.11"], "docs": ["sphinx>=7"]}

_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # project


def _distribution() -> metadata.Distribution | None:
    """The installed distribution this very copy of namedschema belongs to, if any."""
    try:
        dist = metadata.distribution("namedschema")
    except metadata.PackageNotFoundError:
        return None
    source = _local_source(dist)
    if source is not None:
        return dist if os.path.realpath(source) == os.path.realpath(_HERE) else None
    located = dist.locate_file("namedschema")
    return dist if os.path.realpath(str(located)) == os.path.realpath(
        os.path.join(_HERE, "namedschema")) else None


def _local_source(dist: metadata.Distribution) -> str | None:
    """The folder pip installed ``dist`` from (PEP 610 direct_url.json), if a folder."""
    try:
        info = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        return None
    if not isinstance(info, dict) or "dir_info" not in info:
        return None
    url = urlparse(str(info.get("url", "")))
    return unquote(url.path) if url.scheme == "file" else None


def _editable(dist: metadata.Distribution) -> bool:
    try:
        info = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        return False
    return bool(isinstance(info, dict) and info.get("dir_info", {}).get("editable"))


def _requirements(dist: metadata.Distribution | None, extra: str) -> list[str]:
    if dist is None:
        return _FALLBACK.get(extra, [])
    found = []
    for requirement in dist.requires or []:
        spec, _, marker = requirement.partition(";")
        if re.search(rf"""extra\s*==\s*['"]{re.escape(extra)}['"]""", marker):
            found.append(spec.strip().replace(" ", ""))
    return found


def extra_hint(extra: str) -> str:
    """The command that installs the optional extra ``extra`` where namedschema is.

    >>> hint = extra_hint("torch")
    >>> hint.startswith("install the torch extra") and "pip install" in hint
    True
    """
    dist = _distribution()
    requirements = _requirements(dist, extra)
    plain = " ".join(shlex.quote(r) for r in requirements)
    source = _local_source(dist) if dist is not None else None
    if dist is not None and source is not None:
        flag = "-e " if _editable(dist) else ""
        target = shlex.quote(f"{source}[{extra}]")
        command = f"pip install {flag}{target}"
        return (f"install the {extra} extra: {command} (namedschema was installed from "
                f"that folder)" + (f", or pip install {plain}" if plain else ""))
    if dist is None:
        return (f"install the {extra} extra's requirements: pip install {plain} "
                "(namedschema runs here from a source tree, not installed)")
    return (f"install the {extra} extra: pip install {shlex.quote(f'namedschema[{extra}]')}"
            + (f" (or pip install {plain})" if plain else ""))
