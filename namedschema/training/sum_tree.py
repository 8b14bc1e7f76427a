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
"""

from __future__ import annotations

import numpy as np

__all__ = ["tree_size", "new_sum_tree", "new_min_tree", "update_sum", "update_min",
           "find_prefix_sums", "leaves"]


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


def _update(tree: np.ndarray, index: np.ndarray, values: np.ndarray, combine) -> None:
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
    nodes = np.ones(targets.shape[0], np.int64)
    remaining = np.array(targets, np.float64, copy=True)
    while first > 1:
        left = nodes << 1
        left_sum = tree[left]
        right = (remaining >= left_sum) & (tree[left + 1] > 0)
        remaining -= np.where(right, left_sum, 0.0)
        nodes = left + right
        first >>= 1
    return nodes - tree.shape[0] // 2
