"""Whether an SGLang scheduler's prefix tree has a root node, read once per tree object."""

from __future__ import annotations

from typing import Any

from poolwatch.probe.core.reading import MISSING, Reading

__all__ = ["TreeRoot"]


class TreeRoot:
    """Whether the scheduler's prefix tree has a ``root_node`` (a radix tree; a chunk cache has
    none), kept with the tree object it was read from, and the failure that read noted: 0.5.23's
    Rust-backed tree raises on ``root_node`` at every look (an exception built at every sample);
    a tree object does not grow or lose its root, so the answer is read again only for a new tree."""

    def __init__(self) -> None:
        self._tree: object = MISSING
        self._answer: tuple[bool, dict[str, str]] = (False, {})

    def found(self, sched: Any, reading: Reading) -> bool:
        tree = Reading().attr(sched, "tree_cache", optional=True)  # (a failure here is the read's below)
        if tree is MISSING or tree is not self._tree:
            first = Reading()
            found = first.attr(sched, "tree_cache.root_node", optional=True) is not MISSING
            self._tree, self._answer = tree, (found, first.failures)
        found, failures = self._answer
        for label, message in failures.items():
            reading.failures.setdefault(label, message)
        return found
