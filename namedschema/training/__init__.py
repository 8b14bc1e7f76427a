"""Layer 7, training loops: replay buffers and run checkpoints for any PyTorch loop.

replay           ReplayBuffer, PrioritizedReplayBuffer (seeded, resume exactly), and
                 PrioritizedSample, the type of a prioritized sample
sum_tree         the sum tree behind prioritized sampling
run_checkpoint   RunCheckpoint: model, optimizer, buffers, RNGs and env in one save
state_kinds      the one table of state kinds RunCheckpoint captures (one row a kind)
sb3_buffers      the row of Stable-Baselines3's (and CleanRL's) ReplayBuffer, DictReplayBuffer
"""

from .replay import PrioritizedReplayBuffer, PrioritizedSample, ReplayBuffer
from .run_checkpoint import RunCheckpoint, RunCheckpointError, RunCheckpointWarning

__all__ = ["ReplayBuffer", "PrioritizedReplayBuffer", "PrioritizedSample", "RunCheckpoint",
           "RunCheckpointError", "RunCheckpointWarning"]
