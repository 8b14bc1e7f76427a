"""Helpers for using schema instances with torch (this module imports torch).

``torch.load(weights_only=True)``, ``torch.multiprocessing`` queues and
``torch.utils._pytree`` (hence ``torch.func``) already accept schema
instances (importing this module puts the schema entries on torch's
allowlist, as ``namedschema.integrations`` does when a schema is made,
unpickled or pickled); these helpers cover what is left to the user: an explicit allowlist for code that manages torch's safe globals
itself, the ``in_dims`` / ``out_dims`` that ``torch.func.vmap`` needs when
some fields are ``None``, and moving every tensor to shared memory.

safe_globals            allowlist entries for torch.serialization.safe_globals
register_safe_globals   add them to torch's allowlist now
batch_dims              vmap in_dims/out_dims matching an instance's structure
share_memory_           move every tensor field (nested too) to shared memory
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch

from .._core import tree as _tree
from . import _torch_hook

_Tree = TypeVar("_Tree")

__all__ = ["safe_globals", "register_safe_globals", "batch_dims", "share_memory_"]

_torch_hook.register()   # torch is imported: its allowlist takes the schema entries now


def safe_globals() -> list[tuple[Any, str]]:
    """The entries ``torch.load(weights_only=True)`` needs for schema instances.

    ``namedschema.integrations`` registers them already; use this list where code
    clears torch's allowlist or wants them only inside a
    ``torch.serialization.safe_globals(...)`` block.

    Returns:
        ``(object, "dotted.name")`` pairs, the form torch accepts.
    """
    return _torch_hook.safe_globals()


def register_safe_globals() -> bool:
    """Add :func:`safe_globals` to torch's allowlist now (idempotent).

    Returns:
        True when registered; False on torch older than 2.4, which has no
        weights-only allowlist.
    """
    if _torch_hook.is_registered():
        # Someone may have cleared torch's list since: make sure they are in.
        torch.serialization.add_safe_globals(_torch_hook.safe_globals())
        return True
    return _torch_hook.register()


def batch_dims(tree: Any, dim: int | None = 0) -> Any:
    """Return ``tree`` with ``dim`` at every tensor and ``None`` elsewhere.

    ``torch.func.vmap`` refuses ``in_dims=0`` when an input holds a ``None``
    field (or any non-tensor), and refuses a ``None`` in the output unless
    ``out_dims`` says so. Passing ``batch_dims(example)`` gives a per-leaf
    spec of the same schema types.

    Args:
        tree: a schema instance, or any tuple / list / dict nesting of them.
        dim: the batch dimension for tensor leaves.

    Returns:
        The same structure (same schema types) holding ``dim`` or ``None``.

    >>> import torch, namedschema as ns
    >>> S = ns.NamedArrayTupleSchema('S', 'obs mask')
    >>> batch_dims(S(torch.zeros(4, 2), None))
    S(obs=0, mask=None)
    """
    def spec(leaf: Any, _path: str | None) -> int | None:
        return dim if isinstance(leaf, torch.Tensor) else None

    return _tree.map_structure(tree, spec, subclasses=True, shared=False)


def share_memory_(tree: _Tree) -> _Tree:
    """Move every tensor in ``tree`` to shared memory, in place, and return ``tree``.

    After this, passing the instance through a ``torch.multiprocessing``
    queue shares the storage with the receiving process instead of copying
    it, so writes on either side are seen by the other.

    Args:
        tree: a schema instance, or any tuple / list / dict nesting of them.

    Returns:
        ``tree`` itself.
    """
    def share(leaf: Any, _path: str | None) -> Any:
        if isinstance(leaf, torch.Tensor):
            leaf.share_memory_()  # type: ignore[no-untyped-call]  # unannotated in torch
        return leaf

    _tree.map_structure(tree, share, subclasses=True)
    return tree
