"""Vectorized sum and min trees over a fixed number of leaves, for prioritized replay.

A tree over ``capacity`` leaves is one float64 array of ``2 * P`` nodes (``P`` the
next power of two): node ``i`` has children ``2i`` and ``2i + 1``, leaf ``j`` is
node ``P + j`` and node 1 is the root (node 0 is unused). Every operation is a
handful of numpy calls per tree level (``log2 P`` levels), never a Python loop
per element. A parent is always recomputed from its two children, so the whole
tree is a function of its leaves: trees with equal leaves are equal bit for bit,
whatever order the updates came in.

The trees are plain arrays, so a checkpoint stores them raw and an incremental
save writes only the pages an update touched (one path of ``log2 P`` nodes per
changed leaf).

Leaf values (priorities after ``alpha``) are kept within ``leaf_bounds``: from
``2**-511`` to ``2**511 / P``. Then no sum overflows (the root is at most
``2**511``), no probability ``leaf / root`` nor the least one ``min / root``
underflows to 0 (they are at least ``2**-1022``, float64's smallest normal
number), and the ratios importance weights are made of stay finite.
"""

from __future__ import annotations

import numpy as np

__all__ = ["tree_size", "new_sum_tree", "new_min_tree", "update_sum", "update_min",
           "find_prefix_sums", "leaves", "leaf_bounds", "out_of_bounds", "tree_problem"]

#: The smallest leaf value a tree takes (see the module docstring).
LOWEST_LEAF = 2.0 ** -511


def tree_size(capacity: int) -> int:
    """Nodes of a tree over ``capacity`` leaves: twice the next power of two."""
    return 2 * (1 << max(0, int(capacity) - 1).bit_length())


def new_sum_tree(capacity: int) -> np.ndarray:
    """An all-zero sum tree over ``capacity`` leaves."""
    return np.zeros(tree_size(capacity), np.float64)


def new_min_tree(capacity: int) -> np.ndarray:
    """A min tree over ``capacity`` leaves, all ``inf`` (empty leaves never count)."""
    return np.full(tree_size(capacity), np.inf, np.float64)


def leaves(tree: np.ndarray, capacity: int) -> np.ndarray:
    """The leaf values of a tree (a view)."""
    first = tree.shape[0] // 2
    return tree[first:first + capacity]


def leaf_bounds(capacity: int) -> tuple[float, float]:
    """``(lowest, highest)`` leaf value of a tree over ``capacity`` leaves."""
    return LOWEST_LEAF, 2.0 ** 511 / (tree_size(capacity) // 2)


def out_of_bounds(values: np.ndarray, capacity: int) -> np.ndarray:
    """Boolean mask: values that are not leaf values (NaN, infinite, outside the bounds)."""
    low, high = leaf_bounds(capacity)
    with np.errstate(invalid="ignore"):
        return ~((values >= low) & (values <= high))


def _rebuilt(tree: np.ndarray, combine: np.ufunc) -> np.ndarray:
    """The tree its leaves make (node 0 as a new tree has it), level by level."""
    out = tree.copy()
    half = tree.shape[0] // 2
    while half > 1:
        left = out[half:2 * half:2]
        out[half // 2:half] = combine(left, out[half + 1:2 * half:2])
        half >>= 1
    return out


def tree_problem(sum_tree: np.ndarray, min_tree: np.ndarray, capacity: int,
                 size: int) -> str | None:
    """What is wrong with a pair of trees holding ``size`` steps, or None.

    Right means: float64 arrays of ``tree_size(capacity)`` nodes; the leaves of
    the ``size`` steps stored within ``leaf_bounds`` and equal in both trees,
    every other leaf empty (0 in the sum tree, ``inf`` in the min tree); every
    parent exactly what its children make (what the updates leave, bit for
    bit), and node 0 unused. One pass over the trees, no Python loop.
    """
    nodes = tree_size(capacity)
    for label, tree in (("sum_tree", sum_tree), ("min_tree", min_tree)):
        if not isinstance(tree, np.ndarray) or tree.dtype != np.float64 or \
                tree.shape != (nodes,):
            return (f"{label} is {getattr(tree, 'dtype', type(tree).__name__)} "
                    f"{getattr(tree, 'shape', '')}, expected float64 ({nodes},)")
    first = nodes // 2
    stored = sum_tree[first:first + size]
    bad = out_of_bounds(stored, capacity)
    if bad.any():
        i = int(np.argmax(bad))
        low, high = leaf_bounds(capacity)
        return (f"sum_tree: the priority of step {i} (after alpha) is {float(stored[i])!r}, outside "
                f"[{low!r}, {high!r}]")
    unequal = stored != min_tree[first:first + size]
    if unequal.any():
        i = int(np.argmax(unequal))
        return (f"the trees disagree on step {i}: {float(stored[i])!r} in sum_tree, "
                f"{min_tree[first + i]!r} in min_tree")
    if np.any(sum_tree[first + size:] != 0) or np.any(min_tree[first + size:] != np.inf):
        return f"a leaf beyond the {size} steps stored is not empty"
    if sum_tree[0] != 0 or min_tree[0] != np.inf:
        return "node 0 (unused) was written"
    for label, tree, combine in (("sum_tree", sum_tree, np.add),
                                 ("min_tree", min_tree, np.minimum)):
        wrong = _rebuilt(tree, combine) != tree
        if wrong.any():
            i = int(np.argmax(wrong))
            return (f"{label}: node {i} is {float(tree[i])!r}, not what its children make "
                    f"({'their sum' if combine is np.add else 'their minimum'})")
    return None


def _update(tree: np.ndarray, index: np.ndarray, values: np.ndarray, combine: np.ufunc) -> None:
    """Set leaves ``index`` to ``values``; recompute their ancestors with ``combine``.

    With repeated indices the last value wins, as for numpy assignment.
    Ancestors shared by several leaves are recomputed once per leaf, from the
    same children, so repeats cost time but never change the result.
    """
    half = tree.shape[0] // 2
    nodes = index + half
    tree[nodes] = values
    while half > 1:
        nodes = nodes >> 1
        left = nodes << 1
        tree[nodes] = combine(tree[left], tree[left + 1])
        half >>= 1


def update_sum(tree: np.ndarray, index: np.ndarray, values: np.ndarray) -> None:
    """Set leaves ``index`` (of a sum tree) to ``values`` and update their ancestors."""
    _update(tree, index, values, np.add)


def update_min(tree: np.ndarray, index: np.ndarray, values: np.ndarray) -> None:
    """Set leaves ``index`` (of a min tree) to ``values`` and update their ancestors."""
    _update(tree, index, values, np.minimum)


def find_prefix_sums(tree: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The leaf whose prefix-sum interval holds each target (all at once).

    ``targets`` should lie in ``[0, tree[1])``. A descent goes right when the
    target is at least the left child's sum and the right child's sum is
    positive, so a target at the very end (rounding) never lands on an empty
    leaf: the chosen leaf always has a positive value when the root has.
    """
    first = tree.shape[0] // 2
    nodes: np.ndarray = np.ones(targets.shape[0], np.int64)
    remaining = np.array(targets, np.float64, copy=True)
    while first > 1:
        left = nodes << 1
        left_sum = tree[left]
        right = (remaining >= left_sum) & (tree[left + 1] > 0)
        remaining -= np.where(right, left_sum, 0.0)
        nodes = left + right
        first >>= 1
    leaves: int = tree.shape[0] // 2    # the first leaf's node
    return nodes - leaves
