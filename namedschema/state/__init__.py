"""Layer 2, run state as plain data: RNGs, JSON-safe values, environments.

These capture the state a training run needs beyond its arrays, as values that
save without pickle. They import only the standard library and numpy.

rng     numpy / random / torch generator states, and PCG64 words
plain   plain (JSON-safe) values with non-str keys and big ints
env     capture_env / restore_env for gym-style environments
"""

from .env import EnvStateError, capture_env, restore_env

__all__ = ["capture_env", "restore_env", "EnvStateError"]
