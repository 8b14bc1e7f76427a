"""Buffer utilities with rlpyt's names, building schema buffers that pickle.

A *buffer* is a nested structure of tuples, named tuples (stdlib, rlpyt's
classic classes or schemas) and named array tuples whose leaves are numpy
arrays or torch tensors; ``None`` fields are allowed anywhere and are kept.
Unlike rlpyt's, every buffer built here uses schema classes, so a whole buffer
pickles (any protocol) and loads in a fresh interpreter, and shared-memory
arrays keep working when passed to ``spawn``/``forkserver`` children or sent
through queues and pipes (see :doc:`/buffers`).

buffer_from_example   allocate a buffer shaped like an example, with leading dims
build_array           allocate one array like an example value
np_mp_array           allocate one zero-filled array in shared memory
to_shared_memory      copy a buffer's arrays into shared memory (restore a checkpoint)
is_shared_memory      whether an array lives in shared memory made here
torchify_buffer       numpy arrays to torch tensors (sharing memory)
numpify_buffer        torch tensors to numpy arrays
buffer_to             move every tensor to a device
buffer_method         call a method on every leaf
buffer_func           call a function on every leaf
get_leading_dims      the common leading dimensions of all leaves
"""

from __future__ import annotations

import errno
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

import numpy as np
from numpy.typing import DTypeLike

from .._core import tree
from .._core.instance import NamedArrayTuple
from .._core.schema import namedarraytuple_like
from .._core.tree import extra_hint, torch_if_loaded
from ..errors import BufferShapeError, SizeLimitError, StructureMismatchError, short_repr
from . import owned_memory as _owned_memory
from . import shared_memory as _shared_memory

_ArrayTuple = TypeVar("_ArrayTuple", bound=NamedArrayTuple)
_Buffer = TypeVar("_Buffer")
_Dims = int | tuple[int, ...] | list[int]

if TYPE_CHECKING:
    # A leaf of an example: its path, shape and dtype.
    _Leaf = tuple[str, tuple[int, ...], np.dtype[Any]]
    # What _plan makes of an example: None, a leaf's index in its list of leaves,
    # or a named tuple's array schema and the skeletons of its fields.
    _Skeleton = int | tuple[type[Any], list["_Skeleton"]] | None
    # A leaf's (path, leaf) -> its replacement, for _map_structure.
    _LeafFunc = Callable[[Any, str], Any]

__all__ = [
    "buffer_from_example", "build_array", "np_mp_array", "to_shared_memory",
    "is_shared_memory", "torchify_buffer", "numpify_buffer", "buffer_to",
    "buffer_method", "buffer_func", "get_leading_dims",
]


# Example class -> the array schema made for it, so buffers built from one
# example type share one schema. Entries go when the example class does.
_like_cache: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()


def _array_schema_for(example: Any) -> type[Any]:
    cls = type(example)
    schema = _like_cache.get(cls)
    if schema is None:
        schema = namedarraytuple_like(example)
        if schema is not cls:
            _like_cache[cls] = schema
    return schema


def _root_name(x: object, default: str) -> str:
    if tree.is_named(x):
        return getattr(type(x), "_typename", type(x).__name__)
    return default


def _leading_dims(leading_dims: object, where: str, label: str = "leading_dims"
                  ) -> tuple[int, ...]:
    """``leading_dims`` as a tuple of non-negative ints, or a clear error."""
    dims = leading_dims if isinstance(leading_dims, (list, tuple)) else (leading_dims,)
    out = []
    for d in dims:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
            raise StructureMismatchError(
                f"{where}: {label}", "an int or a tuple/list of ints",
                short_repr(leading_dims))
        if d < 0:
            raise BufferShapeError(f"{where}: {label} {short_repr(leading_dims)} "
                                   "has a negative dimension")
        out.append(int(d))
    return tuple(out)


def _example_array(value: Any, path: str) -> np.ndarray:
    """``np.asarray(value)``, refusing what cannot become a numeric array."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise StructureMismatchError(
            path, "a value numpy can turn into an array",
            f"{type(value).__name__} {short_repr(value)}", str(exc)) from exc
    if a.dtype.hasobject:
        raise StructureMismatchError(
            path, "an array, a scalar or a (nested) plain tuple of numbers",
            f"{type(value).__name__} {short_repr(value)}",
            "numpy would store it with dtype=object, which a buffer cannot hold")
    return a


def _plan(example: Any, path: str, leaves: list[_Leaf]) -> _Skeleton:
    """Walk ``example``: collect (path, shape, dtype) of leaves; return a skeleton.

    The skeleton is ``None``, an int (index into ``leaves``) or
    ``(schema, [children])``.
    """
    if example is None:
        return None
    if tree.is_named(example):
        schema = _array_schema_for(example)
        return (schema, [_plan(v, tree.join_path(path, name), leaves)
                         for name, v in zip(type(example)._fields, example, strict=True)])
    a = _example_array(example, path)
    leaves.append((path, a.shape, a.dtype))
    return len(leaves) - 1


def _assemble(skeleton: _Skeleton, arrays: Sequence[np.ndarray]) -> Any:
    if skeleton is None:
        return None
    if isinstance(skeleton, int):
        return arrays[skeleton]
    schema, children = skeleton
    return schema._make([_assemble(c, arrays) for c in children])


def _human_bytes(n: int) -> str:
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024 or unit == "EiB":
            break
        size /= 1024
    return f"{n:,} bytes ({size:.1f} {unit})"


def _check_sizes(leaves: Sequence[_Leaf],
                 shapes: Sequence[tuple[tuple[int, ...], np.dtype[Any]]]) -> int:
    """Total bytes of the arrays; SizeLimitError if one is more than numpy can address."""
    limit = int(np.iinfo(np.intp).max)
    total = 0
    for (path, _s, _d), (shape, dtype) in zip(leaves, shapes, strict=True):
        count = 1
        for n in shape:
            count *= n
        nbytes = count * dtype.itemsize
        if nbytes > limit or any(n > limit for n in shape):
            raise SizeLimitError(f"{path}: shape {shape} of {dtype} would take "
                                  f"{_human_bytes(nbytes)}, more than numpy can address; "
                                  "check leading_dims")
        total += nbytes
    return total


def _allocate(leaves: Sequence[_Leaf], leading: tuple[int, ...], share_memory: bool
              ) -> list[np.ndarray]:
    shapes = [(leading + shape, np.dtype(dtype)) for _path, shape, dtype in leaves]
    total = _check_sizes(leaves, shapes)
    try:
        return _allocate_checked(leaves, shapes, share_memory)
    except (MemoryError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno != errno.ENOMEM:
            raise
        raise SizeLimitError(
            f"{leaves[0][0] if len(leaves) == 1 else f'{len(leaves)} arrays'} with leading "
            f"dims {leading}: allocating {_human_bytes(total)} failed "
            f"({type(exc).__name__}: {exc}); check leading_dims") from exc


def _allocate_checked(leaves: Sequence[_Leaf],
                      shapes: Sequence[tuple[tuple[int, ...], np.dtype[Any]]],
                      share_memory: bool) -> list[np.ndarray]:
    try:
        if share_memory:
            return _shared_memory.allocate_many(shapes)
        arrays = []
        for (shape, dtype), (path, _s, _d) in zip(shapes, leaves, strict=True):
            try:
                arrays.append(_owned_memory.allocate(shape, dtype))
            except (ValueError, MemoryError) as exc:
                exc.add_note(f"while allocating {path} with shape {shape}, dtype {dtype}")
                raise
        return arrays
    except (ValueError, OSError) as exc:
        if share_memory:
            total = sum(int(np.prod(s, dtype=np.int64)) * d.itemsize for s, d in shapes)
            exc.add_note(f"while allocating {len(shapes)} shared arrays, "
                         f"{total} bytes in total")
        raise


@overload
def buffer_from_example(example: None, leading_dims: _Dims, share_memory: bool = ...,
                        use_NatSchema: Any = ...) -> None: ...
@overload
def buffer_from_example(example: _ArrayTuple, leading_dims: _Dims, share_memory: bool = ...,
                        use_NatSchema: Any = ...) -> _ArrayTuple: ...
@overload
def buffer_from_example(example: Any, leading_dims: _Dims, share_memory: bool = ...,
                        use_NatSchema: Any = ...) -> Any: ...


def buffer_from_example(example: Any, leading_dims: _Dims, share_memory: bool = False,
                        use_NatSchema: Any = None) -> Any:  # rlpyt's name
    """Allocate a zero-filled buffer with the structure of ``example``.

    Every leaf of ``example`` becomes an array of the leaf's dtype and shape
    with ``leading_dims`` prepended; ``None`` fields stay ``None``. Named
    tuples of any kind (stdlib, rlpyt's classic ``namedarraytuple``, schemas)
    become schema-based :class:`~namedschema.NamedArrayTuple` instances, so
    the buffer pickles and loads anywhere. A named array tuple schema in the
    example is reused as is; other named types get one array schema per
    example class (cached, so two buffers built from one example type share
    their schema). As in rlpyt, anything else, a plain ``tuple`` included, is
    a leaf and goes through ``np.asarray``: ``(1, 2)`` gives an int array of
    trailing shape ``(2,)``, not a tuple of two arrays.

    Args:
        example: the structure to copy, without leading dimensions.
        leading_dims: int or tuple of ints, such as ``(T, B)``.
        share_memory: allocate every array in one shared-memory segment that
            child processes see (see :func:`np_mp_array`).
        use_NatSchema: accepted for rlpyt compatibility and ignored: buffers
            are always schema based.

    Returns:
        The buffer, or ``None`` if ``example`` is ``None``.

    Raises:
        StructureMismatchError: (a TypeError) a leaf would need ``dtype=object``
            or cannot become an array; the message names its field path, such
            as ``Samples.agent_info.prev_action``. Also for ``leading_dims``
            that are not ints.
        BufferShapeError: (a ValueError) a leading dimension is negative.
        SizeLimitError: (a BufferShapeError, SchemaEvolutionError and MemoryError) an array would
            take more bytes than numpy can address, or the allocation failed;
            the message names the field, shape and bytes.

    >>> from collections import namedtuple
    >>> Step = namedtuple('Step', 'obs reward info')
    >>> buf = buffer_from_example(Step(np.zeros((2, 3), np.uint8), 0.0, None), (5, 4))
    >>> buf.obs.shape, buf.obs.dtype, buf.reward.shape, buf.info
    ((5, 4, 2, 3), dtype('uint8'), (5, 4), None)
    >>> buf[1:3].obs.shape
    (2, 4, 2, 3)
    """
    if example is None:
        return None
    root = _root_name(example, "example")
    leading = _leading_dims(leading_dims, f"buffer_from_example({root})")
    leaves: list[_Leaf] = []
    skeleton = _plan(example, root, leaves)
    return _assemble(skeleton, _allocate(leaves, leading, bool(share_memory)))


def build_array(example: Any, leading_dims: _Dims, share_memory: bool = False) -> np.ndarray:
    """Allocate a zero-filled array matching ``example``'s dtype and shape.

    Args:
        example: anything ``np.asarray`` turns into a non-object array.
        leading_dims: int or tuple of ints prepended to the shape.
        share_memory: allocate in shared memory (see :func:`np_mp_array`).

    Returns:
        A plain ``np.ndarray`` of shape ``leading_dims + example.shape``.

    Raises:
        StructureMismatchError: ``example`` needs ``dtype=object`` or
            ``leading_dims`` is not ints.
        BufferShapeError: a leading dimension is negative.
    """
    leading = _leading_dims(leading_dims, "build_array")
    a = _example_array(example, "build_array(example)")
    return _allocate([("build_array(example)", a.shape, a.dtype)], leading,
                     bool(share_memory))[0]


def np_mp_array(shape: _Dims, dtype: DTypeLike) -> np.ndarray:
    """Allocate a zero-filled array in shared memory.

    The memory is an anonymous segment (no name in ``/dev/shm``) that the
    kernel frees once no process maps it any more, also when processes crash.
    The array is a plain ``np.ndarray``. It is shared with child processes
    under ``fork``, ``spawn`` and ``forkserver`` when passed at start, and when
    sent through a ``multiprocessing`` ``Queue``/``Pipe``/``Connection`` at run
    time (a child's writes are seen by the parent). Plain ``pickle`` stores its
    data like any array's, so it loads anywhere as an ordinary array.

    Args:
        shape: int or tuple of ints.
        dtype: a numpy dtype (not object).

    Returns:
        A writable, C-contiguous ``np.ndarray`` of zeros.

    Raises:
        BufferShapeError: a dimension is negative.
        StructureMismatchError: the dtype holds Python objects.
        OSError: the kernel refused the allocation.
    """
    dims = _leading_dims(shape, "np_mp_array", "shape")
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise StructureMismatchError("np_mp_array: dtype", "a dtype without Python "
                                     "objects", str(dtype))
    return _shared_memory.allocate(dims, dtype)


def is_shared_memory(array: object) -> bool:
    """True if ``array`` is a numpy array in shared memory allocated here.

    Arrays made by :func:`np_mp_array`, ``buffer_from_example(...,
    share_memory=True)`` or :func:`to_shared_memory`, their views, and such
    arrays received from another process all count.
    """
    return _shared_memory.is_shared(array)


def to_shared_memory(buffer_: _Buffer) -> _Buffer:
    """Copy every array of ``buffer_`` into one new shared-memory segment.

    Use it to put a buffer loaded from a checkpoint (where shared arrays come
    back as ordinary arrays) into shared memory again before handing it to
    worker processes. Structure and ``None`` fields are kept; arrays that were
    views of one another become independent copies.

    Args:
        buffer_: a nested structure of tuples / named tuples with numpy array
            (or numpy scalar) leaves.

    Returns:
        A new buffer of the same types whose leaves are shared arrays.

    Raises:
        StructureMismatchError: a leaf is not a numpy array (a tensor, say) or
            has an object dtype.
    """
    leaves: list[np.ndarray] = []

    def collect(x: Any, path: str) -> int:
        a = np.asarray(x)
        if a.dtype.hasobject:
            raise StructureMismatchError(path, "a numeric numpy array",
                                         f"an array of dtype {a.dtype}")
        leaves.append(a)
        return len(leaves) - 1

    skeleton = _map_structure(buffer_, collect, _root_name(buffer_, "buffer"),
                              leaf_types=(np.ndarray, np.generic))
    arrays = _shared_memory.allocate_many((a.shape, a.dtype) for a in leaves)
    for dst, src in zip(arrays, leaves, strict=True):
        dst[...] = src
    shared: _Buffer = _map_structure(skeleton, lambda i, _path: arrays[i], "buffer",
                                     leaf_types=(int,))
    return shared


# --- traversal --------------------------------------------------------------

def _leaf_types() -> tuple[type, ...]:
    # No tensor can exist unless torch is already imported: torch is not imported here.
    torch = torch_if_loaded()
    return (np.ndarray, np.generic) if torch is None else (np.ndarray, np.generic, torch.Tensor)


_BUFFER_NODES = (tree.TUPLE, tree.NAMED)


def _map_structure(buffer_: Any, func: _LeafFunc, path: str,
                   leaf_types: tuple[type, ...]) -> Any:
    """Apply ``func(leaf, path)`` to every leaf, rebuilding tuples and named tuples."""

    def leaf(x: Any, where: str) -> Any:
        if x is None:
            return None
        if isinstance(x, leaf_types):
            return func(x, where)
        leaves = ", ".join(t.__module__.split(".")[0] + "." + t.__name__
                           for t in leaf_types)
        raise StructureMismatchError(
            where, f"None, a tuple, a named tuple or a leaf ({leaves})",
            f"{type(x).__name__} {short_repr(x)}")

    # With a str ``path``, every leaf's path is a str too (None only without one).
    return tree.map_structure(buffer_, cast("Callable[[Any, str | None], Any]", leaf),
                              kinds=_BUFFER_NODES, subclasses=True, path=path, shared=False)


def _import_torch(func_name: str) -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"namedschema.buffer.{func_name} needs PyTorch, which is not "
            f"installed; {extra_hint('torch')}", name="torch") from exc
    return torch


def torchify_buffer(buffer_: Any) -> Any:
    """Turn every numpy array of ``buffer_`` into a torch tensor sharing its memory.

    Args:
        buffer_: nested tuples / named tuples / named array tuples whose
            leaves are numpy arrays, numpy scalars or tensors; ``None`` stays
            ``None`` and tensors are kept as they are.

    Returns:
        A new structure of the same types.

    Raises:
        ModuleNotFoundError: torch is not installed (an ImportError).
        StructureMismatchError: a leaf is neither an array nor a tensor.
    """
    torch = _import_torch("torchify_buffer")

    def convert(x: Any, _path: str) -> Any:
        if isinstance(x, torch.Tensor):
            return x
        return torch.from_numpy(np.asarray(x))

    return _map_structure(buffer_, convert, _root_name(buffer_, "buffer"),
                          (np.ndarray, np.generic, torch.Tensor))


def numpify_buffer(buffer_: Any) -> Any:
    """Turn every torch tensor of ``buffer_`` into a numpy array (via ``.cpu()``).

    CPU tensors share memory with the arrays returned; numpy leaves and
    ``None`` are kept.

    Args:
        buffer_: nested tuples / named tuples with tensor or array leaves.

    Returns:
        A new structure of the same types.

    Raises:
        ModuleNotFoundError: torch is not installed (an ImportError).
        StructureMismatchError: a leaf is neither an array nor a tensor.
    """
    torch = _import_torch("numpify_buffer")

    def convert(x: Any, _path: str) -> Any:
        if isinstance(x, torch.Tensor):
            return x.cpu().numpy()
        return x

    return _map_structure(buffer_, convert, _root_name(buffer_, "buffer"),
                          (np.ndarray, np.generic, torch.Tensor))


def buffer_to(buffer_: _Buffer, device: Any = None) -> _Buffer:
    """Move every tensor of ``buffer_`` to ``device`` (``Tensor.to(device)``).

    Args:
        buffer_: nested tuples / named tuples with tensor leaves.
        device: anything ``Tensor.to`` accepts.

    Returns:
        A new structure of the same types.

    Raises:
        ModuleNotFoundError: torch is not installed (an ImportError).
        StructureMismatchError: a leaf is a numpy array (call
            :func:`torchify_buffer` first) or something else.
    """
    torch = _import_torch("buffer_to")

    def move(x: Any, path: str) -> Any:
        if not isinstance(x, torch.Tensor):
            raise StructureMismatchError(path, "a torch tensor",
                                         f"a numpy {type(x).__name__}",
                                         "numpy arrays cannot move to a device; "
                                         "use torchify_buffer first")
        return x.to(device)

    moved: _Buffer = _map_structure(buffer_, move, _root_name(buffer_, "buffer"),
                                    (np.ndarray, np.generic, torch.Tensor))
    return moved


def buffer_method(buffer_: Any, method_name: str, *args: Any, **kwargs: Any) -> Any:
    """Call ``leaf.method_name(*args, **kwargs)`` on every leaf; return the results.

    Works on numpy-only buffers without torch installed; tensors are leaves
    too.

    Args:
        buffer_: nested tuples / named tuples with array or tensor leaves.
        method_name: name of the method to call.
        *args: passed to the method.
        **kwargs: passed to the method.

    Returns:
        A new structure of the same types holding the results.

    Raises:
        StructureMismatchError: a leaf is neither an array nor a tensor.

    >>> from namedschema import namedarraytuple
    >>> P = namedarraytuple('P', 'a b')
    >>> total = buffer_method(P(np.arange(3), None), 'sum')
    >>> int(total.a), total.b
    (3, None)
    """
    return _map_structure(buffer_, lambda x, _p: getattr(x, method_name)(*args, **kwargs),
                          _root_name(buffer_, "buffer"), _leaf_types())


def buffer_func(buffer_: Any, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``func(leaf, *args, **kwargs)`` on every leaf; return the results.

    Works on numpy-only buffers without torch installed; tensors are leaves
    too.

    Args:
        buffer_: nested tuples / named tuples with array or tensor leaves.
        func: the function to call.
        *args: passed to ``func`` after the leaf.
        **kwargs: passed to ``func``.

    Returns:
        A new structure of the same types holding the results.

    Raises:
        StructureMismatchError: a leaf is neither an array nor a tensor.
    """
    return _map_structure(buffer_, lambda x, _p: func(x, *args, **kwargs),
                          _root_name(buffer_, "buffer"), _leaf_types())


@overload
def get_leading_dims(buffer_: None, n_dim: int = ...) -> None: ...
@overload
def get_leading_dims(buffer_: Any, n_dim: int = ...) -> tuple[int, ...]: ...


def get_leading_dims(buffer_: Any, n_dim: int = 1) -> tuple[int, ...] | None:
    """The first ``n_dim`` dimensions shared by every leaf of ``buffer_``.

    Args:
        buffer_: nested tuples / named tuples with array or tensor leaves;
            ``None`` fields are ignored.
        n_dim: how many leading dimensions to compare and return.

    Returns:
        ``leaf.shape[:n_dim]`` (a ``torch.Size`` for tensors), or ``None`` if
        ``buffer_`` is ``None``.

    Raises:
        BufferShapeError: (a ValueError) leaves disagree, naming each field
            path with its dimensions, or the buffer has no leaves at all.
        StructureMismatchError: a leaf is neither an array nor a tensor.

    >>> from namedschema import namedarraytuple
    >>> P = namedarraytuple('P', 'a b')
    >>> get_leading_dims(P(np.zeros((5, 2)), np.zeros((5, 3))), n_dim=1)
    (5,)
    """
    if buffer_ is None:
        return None
    found: list[tuple[str, tuple[int, ...]]] = []
    _map_structure(buffer_, lambda x, path: found.append((path, x.shape[:n_dim])),
                   _root_name(buffer_, "buffer"), _leaf_types())
    if not found:
        raise BufferShapeError(f"{_root_name(buffer_, 'buffer')}: has no array "
                               "or tensor leaves, so no leading dimensions")
    first = found[0][1]
    if any(tuple(dims) != tuple(first) for _path, dims in found):
        listing = ", ".join(f"{path} {tuple(dims)}" for path, dims in found)
        raise BufferShapeError(f"mismatched leading dimensions (n_dim={n_dim}): "
                               f"{listing}")
    return first
