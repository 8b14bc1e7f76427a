"""Resume an rlpyt run exactly: ``resumable(runner, path)``.

runner              resumable(), the entry point: checkpoints every N iterations, resumes on start
state               capture and restore of the whole run through the handler table
handlers            the table: every handler of rlpyt's classes, in one place
registry            the handler table's machinery and the context handlers receive
learner_handlers    agent, algorithm, optimizer, replay buffer, runner counters
sampling_handlers   samplers, collectors, envs (serial and parallel)
atari_state         AtariEnv's emulator state (ale-py and atari_py)
data_state          attribute capture, trajectory infos, torch helpers
portable            rlpyt's run-time named tuples saved as schemas
workers             the parallel samplers' workers: save and restore in place
worker_guard        a failed worker raises in the main process, never a hang
async_offsets       the async sampler's double-buffer offsets
arguments           changed hyperparameters: refuse, or accept_changes
checkpoint_writer   the save call resumable makes (background, incremental)
"""

from .runner import CHECKPOINT_KIND, ResumeError, ResumeWarning, resumable

__all__ = ["resumable", "ResumeError", "ResumeWarning", "CHECKPOINT_KIND"]
