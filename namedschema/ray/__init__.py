"""Replay sharded over Ray actors, checkpointed as one consistent cut.

For runs that outgrow one machine: ``N`` Ray actors each hold a shard (a
:class:`namedschema.ReplayBuffer`, or a :class:`namedschema.PrioritizedReplayBuffer`),
any process of the cluster writes to them, the learner samples across them,
and ``checkpoint(path)`` saves all shards at one logical point so that
``restore(path)`` continues exactly, or onto another number of shards.

ShardedReplay        the replay (extend, add, sample, update_priorities, checkpoint, restore)
WorkerError          a shard died or failed, or a checkpoint could not be taken or restored
                     (``ShardedReplayError``, its deprecated name, is the same class)
CheckpointInfo       what one checkpoint wrote and how long writes were held

Importing this module does not import Ray; making a ``ShardedReplay`` does.
"""

from .sharded import CheckpointInfo, ShardedReplay, ShardedReplayError, WorkerError

__all__ = ["ShardedReplay", "WorkerError", "ShardedReplayError", "CheckpointInfo"]
