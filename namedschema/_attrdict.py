"""AttrDict: a dict whose keys are also attributes (rlpyt's config container)."""

from __future__ import annotations

__all__ = ["AttrDict"]


class AttrDict(dict):
    """A dict with attribute access: ``d['key']`` and ``d.key`` are one entry.

    Subclasses must call ``AttrDict.__init__``. ``copy()`` copies nested
    AttrDicts too, but not other values (arrays are shared).

    >>> d = AttrDict(lr=1e-3)
    >>> d.batch = 32
    >>> d['batch'], d.lr
    (32, 0.001)
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.__dict__ = self

    def copy(self):
        """Copy, recursing into nested AttrDicts only."""
        return type(self)(**{k: v.copy() if isinstance(v, AttrDict) else v
                             for k, v in self.items()})
