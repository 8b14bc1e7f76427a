"""Class-syntax schemas defined at module level (imported again by fresh interpreters and spawn
workers, which then see the class bodies).

Nothing here runs on import except the class statements.
"""

import numpy as np
import numpy.typing as npt

from namedschema import NamedArrayTuple, NamedTuple


class Transition(NamedArrayTuple):
    """One step of experience."""

    observation: npt.NDArray[np.uint8]
    action: npt.NDArray[np.int64]
    reward: npt.NDArray[np.float32]
    done: npt.NDArray[np.bool_] | None = None

    def total_reward(self) -> float:
        return float(np.sum(self.reward))

    @property
    def steps(self) -> int:
        return len(self.action)


class Config(NamedTuple):
    lr: float
    gamma: float = 0.99

    def discount(self, t: int) -> float:
        return self.gamma ** t


def make_local():
    """A class-syntax schema made inside a function: pickled by value only."""
    class Local(NamedArrayTuple):
        x: np.ndarray

        def double(self):
            return Local(self.x * 2)
    return Local


def reply_with_methods(queue, received):
    """Spawn child: is what arrived this module's class, and do its methods work?"""
    queue.put((type(received) is Transition, received.total_reward(), received.steps,
               Transition(np.zeros((2, 3), np.uint8), np.arange(2), np.ones(2, np.float32))))


def sum_local(batch):
    """Pool worker for a function-local schema: fields work, its method is not here."""
    return float(batch.x.sum()), hasattr(batch, "double"), type(batch).__name__


def write_step(buffer, t):
    """Spawn child: write step ``t`` into a shared-memory buffer with a method of the class."""
    buffer[t] = Transition(np.full((2, 2), t, np.uint8), t, np.float32(t), True)
    return type(buffer) is Transition, buffer.total_reward()
