"""Schemas defined at module level, as real code defines them (imported again by spawn children)."""

import numpy as np

from namedschema import NamedArrayTupleSchema, NamedTupleSchema, namedarraytuple

Traj = NamedArrayTupleSchema("Traj", "obs act")
Twin = NamedArrayTupleSchema("Traj", "obs act")  # same definition, second call: distinct
Info = namedarraytuple("Info", ["done"])
Point = NamedTupleSchema("Point", "x y", defaults=(0,))


def check_and_reply(queue, received):
    """Child side: is what arrived this module's own class? Reply with locally made instances."""
    queue.put((type(received) is Traj, isinstance(received.act, Info),
               Traj(np.ones(2), Info(np.zeros(2))), Point(5)))
