"""Integrations of schemas with other libraries: torch, pytrees, Ray.

Most of them need no code: schema instances are tuples that pickle through
``__getnewargs__``, so Ray, ``torch.multiprocessing`` and protocol-5
out-of-band pickling handle them as they handle any tuple, and pytree
libraries recognise them as namedtuples. What does need code lives here,
and nothing in this package imports an optional dependency at import time.

_torch_hook   lets ``torch.load(..., weights_only=True)`` accept schema
              instances; installed by ``import namedschema``
torch         helpers for torch users (imports torch): ``safe_globals``,
              ``register_safe_globals``, ``batch_dims``, ``share_memory_``
"""
