"""AttrDict: a dict whose keys are also attributes (rlpyt's config container).

An AttrDict is its own ``__dict__``. The default pickling of a dict subclass
loses that: it makes the object with ``cls.__new__`` (a fresh, separate
``__dict__``), fills the items, then copies the old ``__dict__`` (the items
again) into the new one, so after a round trip ``d.x += 1`` changes the
attribute but not the item. The reduction here rebuilds the object as its own
``__dict__`` first, and ``__setstate__`` repairs objects from pickles written
with the default reduction. The patch for rlpyt installs the same two
functions on rlpyt's own ``AttrDict``.

AttrDict               the class
reduce_attrdict        its ``__reduce_ex__`` (works for any dict-with-self-dict class)
setstate_attrdict      its ``__setstate__``
rebuild_attrdict       what its pickles call to make the object
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Self, SupportsIndex, TypeVar

__all__ = ["AttrDict", "reduce_attrdict", "setstate_attrdict", "rebuild_attrdict"]

DictT = TypeVar("DictT", bound=dict[Any, Any])  # a dict subclass that is its own __dict__


def rebuild_attrdict(cls: type[DictT]) -> DictT:
    """An empty instance of the dict subclass ``cls`` that is its own ``__dict__``."""
    obj = dict.__new__(cls)
    obj.__dict__ = obj
    return obj


def reduce_attrdict(self: dict[Any, Any], protocol: SupportsIndex) -> tuple[
        Callable[[type[dict[Any, Any]]], dict[Any, Any]], tuple[type[dict[Any, Any]]], None,
        None, Iterator[tuple[Any, Any]]]:
    """``__reduce_ex__``: rebuild empty and self-dict first, then set the items.

    The items go through pickle's SETITEMS, so an AttrDict that contains itself
    (or objects referring back to it) round-trips too.
    """
    return rebuild_attrdict, (type(self),), None, None, iter(dict.items(self))


def setstate_attrdict(self: dict[Any, Any], state: Mapping[Any, Any] | None) -> None:
    """``__setstate__`` for pickles made with the default reduction.

    Their state is the old ``__dict__``, i.e. the object itself (already
    filled by then) or, if it was not self-dict, a dict of attributes.
    """
    self.__dict__ = self
    if state is not None and state is not self:
        dict.update(self, state)


class AttrDict(dict[str, Any]):
    """A dict with attribute access: ``d['key']`` and ``d.key`` are one entry.

    Subclasses must call ``AttrDict.__init__``. ``copy()`` copies nested
    AttrDicts too, but not other values (arrays are shared). Pickling,
    ``copy.copy`` and ``copy.deepcopy`` keep keys and attributes one entry.

    >>> d = AttrDict(lr=1e-3)
    >>> d.batch = 32
    >>> d['batch'], d.lr
    (32, 0.001)
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.__dict__ = self

    if TYPE_CHECKING:  # keys are attributes: ``d.lr`` is ``d["lr"]``
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    __reduce_ex__ = reduce_attrdict
    __setstate__ = setstate_attrdict

    def copy(self) -> Self:
        """Copy, recursing into nested AttrDicts only."""
        return type(self)(**{k: v.copy() if isinstance(v, AttrDict) else v
                             for k, v in self.items()})
