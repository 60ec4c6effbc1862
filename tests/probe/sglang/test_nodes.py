"""Whether the probe can walk a prefix tree's nodes: a chunk cache has no root, 0.5.23's Rust tree
core raises ``NotImplementedError`` (a shape, not a failure), anything else raising is a failed read;
the answer is read once per tree object."""

from __future__ import annotations

from types import SimpleNamespace

from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang.nodes import TreeRoot, tree_root


class RustTree:
    reads = 0

    @property
    def root_node(self) -> object:
        RustTree.reads += 1
        raise NotImplementedError("root_node: not yet ported to the Rust tree core")


class BrokenTree:
    @property
    def root_node(self) -> object:
        raise RuntimeError("half-built")


def test_a_chunk_cache_and_a_rust_core_have_no_walkable_root_and_no_failure() -> None:
    assert tree_root(SimpleNamespace()) is None
    assert tree_root(RustTree()) is None
    root = object()
    assert tree_root(SimpleNamespace(root_node=root)) is root
    for tree in (SimpleNamespace(), RustTree()):
        reading = Reading()
        assert TreeRoot().found(SimpleNamespace(tree_cache=tree), reading) is False
        assert reading.failures == {}


def test_the_root_is_read_once_per_tree_object() -> None:
    root, sched = TreeRoot(), SimpleNamespace(tree_cache=RustTree())
    RustTree.reads = 0
    for _ in range(5):
        assert root.found(sched, Reading()) is False
    assert RustTree.reads == 1
    sched.tree_cache = SimpleNamespace(root_node=object())  # a new tree: read again
    assert root.found(sched, Reading()) is True


def test_a_root_that_raises_otherwise_is_a_failed_read_at_every_sample() -> None:
    root, sched = TreeRoot(), SimpleNamespace(tree_cache=BrokenTree())
    for _ in range(2):
        reading = Reading()
        assert root.found(sched, reading) is False
        assert reading.failures == {"tree_cache.root_node": "RuntimeError: half-built"}
