"""The tree proof's index: which Mamba (or int8 checkpoint) slots the tree held at the last census.

Taken at a Mamba census (a loop boundary); a free is refused on it only when the tree *still*
holds the slot at the free, read two ways as the family keeps its tree
(:attr:`~poolwatch.probe.sglang.guard.paths.MambaPaths.tree`):

* ``node`` (``MambaRadixCache`` up to 0.5.12): one walk of the nodes, ``{slot: (node, the node's
  mamba_value tensor)}``; at a free the node must still hold that very tensor (one attribute read).
  Eviction there frees ``node.mamba_value`` itself before deleting the node, which the caller lets
  through by identity.
* ``flat`` (0.5.23's ``UnifiedRadixCache``, Python or Rust tree core): the tree's own
  ``all_mamba_values_flatten()``, ``{slot: None}``; a free naming an indexed slot reads it again
  (once per such free) and refuses the ids still in it.  The unified tree clears a node's Mamba
  value before an eviction frees it, so a slot it still lists is never being evicted.

Cost: O(nodes) and one host read per census; per free a dict lookup per freed id, plus, on 0.5.23
only for a free of an id the tree held at the census (an eviction, or a wrong free), one re-read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["Owned", "current_values", "node_index", "values_index"]

log = logging.getLogger("poolwatch.probe")
Owned = dict[int, tuple[Any, Any] | None]  # slot -> (node, its value tensor) ("node"), or None ("flat")


def _ids(tensors: list[Any]) -> list[int]:
    import torch

    if not tensors:
        return []
    return [int(i) for i in torch.cat([t.reshape(-1).to(torch.int64) for t in tensors]).tolist()]


def node_index(tree_cache: Any) -> Owned:
    """``{slot: (node, node.mamba_value)}`` over a ``MambaRadixCache`` (one walk, one host read)."""
    try:
        root = tree_cache.root_node
        pairs: list[tuple[Any, Any]] = []
        stack = [root]
        while stack:
            node = stack.pop()
            value = getattr(node, "mamba_value", None)
            if value is not None and node is not root:
                pairs.append((node, value))
            stack.extend(node.children.values())
        ids = _ids([v for _, v in pairs])
    except Exception:  # no walkable tree: no proof
        log.debug("poolwatch guard: tree index unreadable", exc_info=True)
        return {}
    out: Owned = {}
    at = 0
    for pair in pairs:
        n = int(pair[1].numel())
        for slot in ids[at : at + n]:
            out[slot] = pair
        at += n
    return out


def current_values(tree_cache: Any) -> Callable[[], set[int]] | None:
    """The tree's Mamba values now, as SGLang flattens them (``None``: the tree has no such helper)."""
    flatten = getattr(tree_cache, "all_mamba_values_flatten", None)
    if not callable(flatten):
        return None
    return lambda: set(_ids([flatten()]))


def values_index(values: Callable[[], set[int]]) -> Owned:
    """``{slot: None}`` for every Mamba value the tree holds now."""
    try:
        return dict.fromkeys(values())
    except Exception:
        log.debug("poolwatch guard: tree values unreadable", exc_info=True)
        return {}
