"""Where the probe can reach the prefix tree's nodes from Python: its root, or ``None``.

A ChunkCache (a PD decode rank without a tree) has no root, and 0.5.23's unified tree raises
``NotImplementedError`` on ``root_node`` when its nodes live in the Rust tree core.  Both are a
shape of the release, not a failure to read: the censuses that walk nodes stand aside, and the
pool terms read the counters a tree without Python nodes keeps.  Stdlib only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tree_root"]


def tree_root(tree_cache: Any) -> Any:
    """The tree's root node, or ``None`` where Python cannot walk it (a chunk cache; a Rust core)."""
    try:
        return getattr(tree_cache, "root_node", None)
    except NotImplementedError:
        return None
