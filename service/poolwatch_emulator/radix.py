"""The radix tree under the prefix caches (``mem_cache/radix_cache.py``, ``mamba_radix_cache.py``).

A node owns ``value`` (KV slot ids of its tokens) and, in a Mamba tree, ``mamba_value`` (a
1-element tensor, or None for a *tombstone*).  Counters move only on lock transitions, insert and
evict, as in SGLang: the full lock runs from a node to the root; the Mamba lock is taken on the
locked node alone.  Eviction is least-recently-used over unlocked leaves (``evict``) or unlocked
Mamba states (``evict_mamba``: an internal node becomes a tombstone, a leaf is deleted).

Kept whole: one tree whose counters move together (lock, insert, evict), as in SGLang's one file.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["RadixTree", "TreeNode"]

_ids = itertools.count()


class TreeNode:
    """One edge of the tree: ``key`` tokens stored at ``value`` slots."""

    def __init__(self, parent: TreeNode | None = None):
        self.id = next(_ids)
        self.parent = parent
        self.children: dict[Any, TreeNode] = {}
        self.key: list[int] = []
        self.value: torch.Tensor | None = None
        self.mamba_value: torch.Tensor | None = None
        self.full_lock_ref = 0
        self.mamba_lock_ref = 0
        self.last_access_time = 0
        self.host_value: torch.Tensor | None = None  # HiCache: host-memory slots of a backed-up node
        self.host_ref_counter = 0

    @property
    def lock_ref(self) -> int:
        """The plain RadixCache name of the full lock."""
        return self.full_lock_ref

    def __lt__(self, other: TreeNode) -> bool:
        return self.last_access_time < other.last_access_time


def _common_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class RadixTree:
    """Tree structure and counters; ``free_kv``/``free_mamba`` give evicted slots back."""

    def __init__(
        self, page_size: int, *, mamba: bool, allocator: Any, mamba_pool: Any = None, faults: Any = None
    ):
        self.page_size = page_size
        self.mamba = mamba
        self.allocator = allocator
        self.mamba_pool = mamba_pool
        self.faults = faults
        self._clock = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        self.root_node = TreeNode()
        self.root_node.full_lock_ref = 1
        self.full_evictable_size_ = 0
        self.full_protected_size_ = 0
        self.mamba_evictable_size_ = 0
        self.mamba_protected_size_ = 0

    def _child_key(self, key: list[int]) -> Any:
        return key[0] if self.page_size == 1 else tuple(key[: self.page_size])

    def _match_len(self, a: list[int], b: list[int]) -> int:
        n = _common_len(a, b)
        return n - n % self.page_size

    def _touch(self, node: TreeNode) -> None:
        node.last_access_time = next(self._clock)

    def _split_node(self, child: TreeNode, split_len: int) -> TreeNode:
        """Cut ``child`` after ``split_len`` tokens; the new upper node is a tombstone (Mamba)."""
        assert child.parent is not None
        assert child.value is not None
        new = TreeNode(child.parent)
        new.key, new.value = child.key[:split_len], child.value[:split_len]
        new.full_lock_ref = child.full_lock_ref
        new.last_access_time = child.last_access_time
        child.parent.children[self._child_key(new.key)] = new
        child.key, child.value = child.key[split_len:], child.value[split_len:]
        if child.host_value is not None:
            new.host_value, child.host_value = child.host_value[:split_len], child.host_value[split_len:]
        child.parent = new
        new.children[self._child_key(child.key)] = child
        return new

    def _step(self, node: TreeNode, key: list[int]) -> tuple[TreeNode, int] | None:
        """The child of ``node`` that ``key`` goes on into, split where they part, and how many of
        ``key``'s tokens it matched; None where the match ends."""
        child = node.children.get(self._child_key(key))
        if child is None:
            return None
        n = self._match_len(child.key, key)
        if n == 0:
            return None
        return (self._split_node(child, n) if n < len(child.key) else child), n

    def walk(self, key: list[int]) -> tuple[list[torch.Tensor], TreeNode, list[torch.Tensor], TreeNode]:
        """Match ``key``: (all values, deepest node, values up to the deepest Mamba node, it)."""
        node, values = self.root_node, []
        best_values, best = [], self.root_node
        self._touch(node)
        while key and (step := self._step(node, key)) is not None:
            child, n = step
            assert child.value is not None
            values.append(child.value)
            node, key = child, key[n:]
            self._touch(node)
            if node.mamba_value is not None:
                best_values, best = list(values), node
        return values, node, best_values, best

    def insert(
        self, key: list[int], value: torch.Tensor, mamba_value: torch.Tensor | None = None
    ) -> tuple[int, bool]:
        """Insert; returns (tokens already in the tree, whether a Mamba value already existed)."""
        node, done = self.root_node, 0
        while key and (step := self._step(node, key)) is not None:
            child, n = step
            node, key, value, done = child, key[n:], value[n:], done + n
            self._touch(node)
        if key:
            leaf = TreeNode(node)
            leaf.key, leaf.value, leaf.mamba_value = list(key), value.clone(), mamba_value
            node.children[self._child_key(key)] = leaf
            self._touch(leaf)
            self.full_evictable_size_ += len(key)
            if mamba_value is not None:
                self.mamba_evictable_size_ += 1
            self._backup(leaf)
            return done, False
        if not self.mamba or node is self.root_node or node.mamba_value is not None:
            return done, True
        node.mamba_value = mamba_value
        if mamba_value is not None and node.mamba_lock_ref == 0:
            self.mamba_evictable_size_ += 1
        return done, mamba_value is None

    def _backup(self, leaf: TreeNode) -> None:
        """A new leaf was inserted (HiCache backs it up to host memory; a plain tree does nothing)."""

    def _release_host(self, node: TreeNode) -> None:
        """``node`` leaves the tree (HiCache frees its host copy; a plain tree does nothing)."""

    def inc_lock_ref(self, node: TreeNode | None) -> None:
        if node is None or node is self.root_node:
            return
        if node.mamba_value is not None:
            if node.mamba_lock_ref == 0:
                self.mamba_evictable_size_ -= 1
                self.mamba_protected_size_ += 1
            node.mamba_lock_ref += 1
        cur: TreeNode | None = node
        while cur is not None and cur is not self.root_node:
            if cur.full_lock_ref == 0:
                self.full_evictable_size_ -= len(cur.key)
                self.full_protected_size_ += len(cur.key)
            cur.full_lock_ref += 1
            cur = cur.parent

    def dec_lock_ref(self, node: TreeNode | None) -> None:
        if node is None or node is self.root_node:
            return
        if node.mamba_value is not None and node.mamba_lock_ref > 0:
            if node.mamba_lock_ref == 1:
                self.mamba_evictable_size_ += 1
                self.mamba_protected_size_ -= 1
            node.mamba_lock_ref -= 1
        cur: TreeNode | None = node
        while cur is not None and cur is not self.root_node:
            if cur.full_lock_ref == 1:
                self.full_evictable_size_ += len(cur.key)
                self.full_protected_size_ -= len(cur.key)
            cur.full_lock_ref -= 1
            cur = cur.parent

    def nodes(self) -> list[TreeNode]:
        out, stack = [], [self.root_node]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    def _delete_leaf(self, node: TreeNode) -> int:
        assert node.parent is not None
        assert node.value is not None
        del node.parent.children[self._child_key(node.key)]
        self._release_host(node)
        self.allocator.free(node.value)
        self.full_evictable_size_ -= len(node.key)
        if node.mamba_value is not None:
            self.mamba_pool.free(node.mamba_value)
            self.mamba_evictable_size_ -= 1
        return len(node.key)

    def _evictable_leaf(self, node: TreeNode) -> bool:
        return node is not self.root_node and not node.children and node.full_lock_ref <= 0  # > 0: locked

    def _overcounts(self) -> bool:
        return (
            self.page_size > 1
            and self.faults is not None
            and bool(self.faults.fires("radix-evictable-overcount"))
        )

    def evict(self, num_tokens: int) -> int:
        """Delete least-recently-used unlocked leaves until ``num_tokens`` slots are freed."""
        heap = [n for n in self.nodes() if self._evictable_leaf(n)]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < num_tokens:
            node = heapq.heappop(heap)
            freed += self._delete_leaf(node)
            if self._overcounts():
                self.full_evictable_size_ += self.page_size  # #35270's class: the counter over by a page
            parent = node.parent
            if parent is not None and self._evictable_leaf(parent):
                heapq.heappush(heap, parent)
        return freed

    def evict_mamba(self, num: int) -> int:
        """Free ``num`` unlocked Mamba states, least recently used first."""
        heap = [n for n in self.nodes() if n.mamba_value is not None and n.mamba_lock_ref == 0]
        heapq.heapify(heap)
        done = 0
        while heap and done < num:
            node = heapq.heappop(heap)
            if self._evictable_leaf(node):
                self._delete_leaf(node)
                self._delete_tombstone_leaves(node.parent)
            else:
                assert node.mamba_value is not None
                self.mamba_pool.free(node.mamba_value)
                node.mamba_value = None
                self.mamba_evictable_size_ -= 1
            done += 1
        return done

    def _delete_tombstone_leaves(self, node: TreeNode | None) -> None:
        while node is not None and self._evictable_leaf(node) and node.mamba_value is None:
            parent = node.parent
            self._delete_leaf(node)
            node = parent
