"""Worker functions for multiprocessing tests (importable by spawn/forkserver children).

This module never defines a schema: whatever schemas the workers see arrive by value.
"""

import numpy as np


def echo_types(queue, *objs):
    """Send back the objects, plus whether objects of one schema share one class."""
    classes = {}
    same = True
    for obj in objs:
        cls = type(obj)
        same &= classes.setdefault(cls._schema_id, cls) is cls
    queue.put((objs, same))


def double_obs(batch):
    """Pool worker: return a new instance of the same schema with obs doubled."""
    return batch._replace(obs=batch.obs * 2)


def receive_and_reply(conn_queue, reply_queue):
    """Take an instance from a queue at run time, mutate a copy, send it back."""
    obj = conn_queue.get(timeout=60)
    obj = obj._replace(obs=np.asarray(obj.obs) + 1)
    reply_queue.put(obj)
