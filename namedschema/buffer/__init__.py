"""Layer 3, buffers: arrays shaped like one example, in process or shared memory.

builders        buffer_from_example and rlpyt's buffer helpers (torchify, buffer_to ...)
shared_memory   arrays in shared memory that pickle as a reference, not a copy
owned_memory    which arrays a buffer owns, so saves may treat them as its own
"""

from .builders import (
    buffer_from_example,
    buffer_func,
    buffer_method,
    buffer_to,
    build_array,
    get_leading_dims,
    is_shared_memory,
    np_mp_array,
    numpify_buffer,
    to_shared_memory,
    torchify_buffer,
)

__all__ = [
    "buffer_from_example", "build_array", "np_mp_array", "to_shared_memory",
    "is_shared_memory", "torchify_buffer", "numpify_buffer", "buffer_to",
    "buffer_method", "buffer_func", "get_leading_dims",
]
