"""Depth levels of the result tree (``parent[node]``, -1 for a root): the order in which
per-node sums are carried up the tree a level at a time instead of a node at a time."""

from __future__ import annotations

import numpy as np


def parents_first(parent: np.ndarray) -> bool:
    """Whether every node's parent precedes it (the order nodes are created in)."""
    return bool((parent < np.arange(len(parent))).all())


def node_depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every node (0: a root), as a loop over the nodes in creation order computes
    it (``depth[i] = depth[parent[i]] + 1``, parents preceding children): a level of nodes
    at a time, each taking the depth of its parent once the parent's is known."""
    n = len(parent)
    index = np.arange(n)
    parent = np.asarray(parent, np.int64)
    # a parent created after its child still has depth 0 when the loop reaches the child
    up = np.where(parent < index, parent, -1)
    depth = ((parent >= 0) & (parent >= index)).astype(np.int64)
    known = up < 0
    while not known.all():
        ready = ~known & known[np.maximum(up, 0)]
        depth[ready] = depth[up[ready]] + 1
        known |= ready
    return depth


def bottom_up_levels(parent: np.ndarray) -> list[np.ndarray]:
    """The nodes that have a parent, grouped by depth, deepest first, each group ascending:
    the order in which adding every node's subtree to its parent sees complete subtrees.
    When some parent does not precede its child (depth levels would not tell the order),
    one node per group, by descending depth."""
    depth = node_depths(parent)
    order = np.argsort(-depth, kind="stable")
    order = order[parent[order] >= 0]
    if not parents_first(parent):
        return [order[k : k + 1] for k in range(len(order))]
    cuts = np.flatnonzero(np.diff(depth[order])) + 1
    return np.split(order, cuts)
