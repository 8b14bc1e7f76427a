"""The iteration offsets of a resumed async run (``AsyncRl``, ``AsyncRlEval``).

rlpyt's async loop counts iterations from 0 in local variables, and its sampler
runs ``range(n_itr)`` in its own process; a resumed run lets both count from 0
again and adds the checkpoint's counts where the counts leave the loop
(:mod:`namedschema.rlpyt.resume`).

Offset         a callable with offsets added to chosen arguments
OffsetSampler  the async sampler as its process sees it, iterations shifted
"""

from __future__ import annotations

__all__ = ["Offset", "OffsetSampler"]


class Offset:
    """Calls ``function`` with ``offset`` added to the chosen positional/keyword args."""

    def __init__(self, function, offsets, keywords=None):
        self.function = function
        self.offsets = offsets            # {position: offset}
        self.keywords = keywords or {}    # {name: offset}

    def __call__(self, *args, **kwargs):
        values = list(args)
        for i, off in self.offsets.items():
            if i < len(values):
                values[i] = values[i] + off
        for name, off in self.keywords.items():
            if kwargs.get(name) is not None:
                kwargs[name] = kwargs[name] + off
        return self.function(*values, **kwargs)


class OffsetSampler:
    """The async sampler as its process sees it: iteration ``i`` is ``i + offset``."""

    def __init__(self, sampler, offset):
        self._sampler = sampler
        self._offset = offset

    def obtain_samples(self, itr, *args, **kwargs):
        return self._sampler.obtain_samples(itr + self._offset, *args, **kwargs)

    def evaluate_agent(self, itr, *args, **kwargs):
        return self._sampler.evaluate_agent(itr + self._offset, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._sampler, name)
