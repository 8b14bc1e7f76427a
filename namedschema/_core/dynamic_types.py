"""What type checkers see of factory-made schemas (nothing here exists at run time).

A schema made by a call (``NamedArrayTupleSchema("Samples", "obs reward")``,
``namedarraytuple(...)``) has fields no type checker can know. The factories
are annotated to return ``type[DynamicNamedTuple]`` /
``type[DynamicNamedArrayTuple]``: instances whose field attributes are ``Any``
but whose schema methods (``_replace``, ``_fields``, indexing returning the
same type, ...) keep their types. Class-syntax schemas need none of this:
their annotations are their fields.

DynamicNamedTuple        instances of a factory-made NamedTupleSchema
DynamicNamedArrayTuple   instances of a factory-made NamedArrayTupleSchema
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__: list[str] = []

if TYPE_CHECKING:
    from .instance import NamedArrayTuple, NamedTuple
    from .schema import NamedArrayTupleSchema, NamedTupleSchema

    class DynamicNamedTuple(NamedTuple, metaclass=NamedTupleSchema):
        def __init__(self, *args: Any, **kwargs: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...

    class DynamicNamedArrayTuple(NamedArrayTuple, metaclass=NamedArrayTupleSchema):
        def __init__(self, *args: Any, **kwargs: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...
