"""What a tree holds: the exact types of its leaves, checked at C speed by the tree rules, the
encoder's rewrite and the error paths (a leaf has nothing in it to walk).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["JSON_LEAVES", "LEAF_TYPES", "LEAVES_ONLY", "PLAIN_LEAVES", "SCALAR_TYPES", "TREE_LEAVES"]

JSON_LEAVES = (type(None), bool, int, float, str)  # what a JSON-only tree may hold besides containers
TREE_LEAVES = (*JSON_LEAVES, bytes, torch.Tensor, np.ndarray)  # what any tree may hold
SCALAR_TYPES = frozenset(JSON_LEAVES)  # exact types: the fast path of the tree walks
LEAF_TYPES = frozenset(TREE_LEAVES)  # exact types of every leaf of a (non-JSON) tree: nothing in them to walk
LEAVES_ONLY = LEAF_TYPES.issuperset  # ``LEAVES_ONLY(map(type, items))``: every item a leaf (one C call)
PLAIN_LEAVES = frozenset((*JSON_LEAVES, bytes))  # exact types of the leaves msgpack writes without an extension
