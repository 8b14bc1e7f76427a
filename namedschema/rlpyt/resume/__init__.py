"""Resume an rlpyt run exactly: ``resumable(runner, path)``.

runner              resumable(), the entry point: checkpoints every N iterations, resumes on
                    start; what it checks and says at start; the async runners' offsets
state               the public face: this process's handler table, register_handler, capture,
                    restore, check, prepare
table               the handler table's machinery, the context handlers get, attribute-wise
                    data state, rlpyt's run-time named tuples saved as schemas
handlers            every handler of rlpyt's classes, in one table (agents, algorithms,
                    replay buffers, envs and Atari's emulator, collectors, samplers, runners)
workers             the parallel samplers' workers: save and restore in place; a failed
                    worker raises in the main process, never a hang
arguments           changed hyperparameters: refuse, or accept_changes
checkpoint_writer   the save call resumable makes (background, incremental)

What is not rlpyt's own (torch modules, optimizers, schedulers, Atari emulators,
generators) is captured and restored by its row of the one table of state kinds,
``namedschema.training.state_kinds``, which ``RunCheckpoint`` and
``namedschema.sb3`` use too.
"""

from .runner import CHECKPOINT_KIND, ResumeError, ResumeWarning, resumable

__all__ = ["resumable", "ResumeError", "ResumeWarning", "CHECKPOINT_KIND"]
