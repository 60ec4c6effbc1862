"""Where the probe can reach the prefix tree's nodes from Python: its root, or ``None``.

A ChunkCache (a PD decode rank without a tree) has no root, and 0.5.23's unified tree raises
``NotImplementedError`` on ``root_node`` when its nodes live in the Rust tree core.  Both are a
shape of the release, not a failure to read: the censuses that walk nodes stand aside, and the
pool terms read the counters a tree without Python nodes keeps.
"""

from __future__ import annotations

from typing import Any

from poolwatch.probe.core.reading import MISSING, Reading

__all__ = ["TreeRoot", "tree_root"]


def tree_root(tree_cache: Any) -> Any:
    """The tree's root node, or ``None`` where Python cannot walk it (a chunk cache; a Rust core)."""
    try:
        return getattr(tree_cache, "root_node", None)
    except NotImplementedError:
        return None


class TreeRoot:
    """Whether the scheduler's prefix tree has a root Python can walk, kept with the tree object it
    was read from: a tree does not grow or lose its root, so a sample reads it again only for a new
    tree (0.5.23's Rust core raises at every look: an exception built at every sample otherwise).
    A root that raises anything but ``NotImplementedError`` is a failed read, noted at every sample."""

    def __init__(self) -> None:
        self._tree: object = MISSING
        self._found: bool = False
        self._failure: BaseException | None = None

    def found(self, sched: Any, reading: Reading) -> bool:
        tree = reading.attr(sched, "tree_cache", optional=True)
        if tree is not self._tree:
            self._tree, self._failure = tree, None
            try:
                self._found = tree is not MISSING and tree is not None and tree_root(tree) is not None
            except Exception as exc:  # a property that raised: the read failed
                self._found, self._failure = False, exc
        if self._failure is not None:
            reading.fail("tree_cache.root_node", self._failure)
        return self._found
