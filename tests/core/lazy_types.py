"""A module in rlpyt's style: a global type that stays None until a constructor assigns it."""

from namedschema import namedarraytuple

SamplesToBuffer = None


class Replay:
    """Builds its sample type lazily on construction, as rlpyt's replay buffers do."""

    def __init__(self, size):
        global SamplesToBuffer
        SamplesToBuffer = namedarraytuple("SamplesToBuffer", ["observation", "reward"])
        import numpy as np
        self.samples = SamplesToBuffer(np.zeros((size, 2)), np.zeros(size))
