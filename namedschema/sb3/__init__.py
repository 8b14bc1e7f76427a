"""Layer sb3: exact resume of Stable-Baselines3's ``learn()``, with one call.

resumable         wrap a built model; its ``learn(total_timesteps=N)`` resumes the run
                  saved at ``path`` (see :doc:`/sb3`)
algorithm_state   the algorithm's own counters as a row of RunCheckpoint's table

Replay buffers and vector envs are rows of the training layer
(``namedschema.training.sb3_buffers``, ``sb3_vec_envs``): a ``RunCheckpoint``
tracks them without this package.
"""

from .resumable import resumable

__all__ = ["resumable"]
