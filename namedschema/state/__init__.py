"""Layer 2, run state as plain data: RNGs, JSON-safe values, environments.

These capture the state a training run needs beyond its arrays, as values that
save without pickle. They import only the standard library and numpy (torch only
when the run imported it). Each kind of state is read and written here once, for
every resume path (the rows of ``namedschema.training.state_kinds``, and through
them ``RunCheckpoint``, ``namedschema.sb3`` and ``namedschema.rlpyt.resumable``).

rng     every generator kind (random, numpy, torch), the global ones, PCG64 words
plain   plain (JSON-safe) values with non-str keys and big ints
env     capture_env / restore_env for gym-style environments; Atari emulators
"""

from .env import EnvStateError, capture_env, restore_env

__all__ = ["capture_env", "restore_env", "EnvStateError"]
