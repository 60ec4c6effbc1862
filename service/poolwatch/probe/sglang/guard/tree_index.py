"""The tree proof's index: which node holds which Mamba (or int8 checkpoint) slot, and as which tensor.

Taken at a Mamba census (a loop boundary): one walk of the tree and one host read of every node's
value.  A free is refused on it only while the node *still holds that very tensor* (its value read
again at the free), so a node evicted, split or given a new value since leaves no proof behind.

Nodes are read the way the family keeps them (:attr:`~poolwatch.probe.sglang.guard.paths.MambaPaths.tree`):

* ``node``: ``node.mamba_value`` (``TreeNode`` of ``MambaRadixCache`` up to 0.5.12);
* ``unified``: ``node.component_data[MAMBA].value`` (0.5.23's ``UnifiedTreeNode``; the Mamba
  component type is looked up in the tree's own ``tree_components``).  A Rust tree core keeps its
  nodes outside Python: no root with children, so no index and no tree proof there.

Cost: O(nodes) Python steps and one ``torch.cat`` + ``tolist`` per census (on a GPU one
device-to-host read); nothing per free beyond a dict lookup per freed id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["NodeValue", "Owned", "node_value", "tree_index"]

NodeValue = Callable[[Any], Any]  # a node's current value tensor, or None
Owned = dict[int, tuple[Any, Any]]  # slot -> (the node, the value tensor it held at the index)


def _legacy(node: Any) -> Any:
    return getattr(node, "mamba_value", None)


def _component(tree_cache: Any) -> NodeValue | None:
    kinds = getattr(tree_cache, "tree_components", ()) or ()
    mamba = next((ct for ct in kinds if getattr(ct, "name", "") == "MAMBA"), None)
    if mamba is None:
        return None

    def value(node: Any) -> Any:
        data = getattr(node, "component_data", None)
        return None if data is None else data[mamba].value

    return value


def node_value(kind: str, tree_cache: Any) -> NodeValue | None:
    """How this family's nodes hold a Mamba value (``None``: no tree proof on this tree)."""
    if kind == "node":
        return _legacy
    if kind == "unified":
        return _component(tree_cache)
    return None


def tree_index(tree_cache: Any, value: NodeValue) -> Owned:
    """``{slot: (node, the node's value tensor)}`` over the tree (one walk, one host read)."""
    import torch

    root = getattr(tree_cache, "root_node", None)
    if root is None or not isinstance(getattr(root, "children", None), dict):
        return {}
    pairs: list[tuple[Any, Any]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        held = value(node) if node is not root else None
        if held is not None:
            pairs.append((node, held))
        stack.extend(node.children.values())
    if not pairs:
        return {}
    ids = torch.cat([v.reshape(-1).to(torch.int64) for _, v in pairs]).tolist()
    out: Owned = {}
    at = 0
    for pair in pairs:
        n = int(pair[1].numel())
        for slot in ids[at : at + n]:
            out[int(slot)] = pair
        at += n
    return out
