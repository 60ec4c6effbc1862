"""HiCache's host tier (``--enable-hierarchical-cache``, ``mem_cache/hiradix_cache.py``), emulated.

``HostKVCache`` has SGLang's free-list shape (``size``, ``free_slots``, ``available_size()``,
``alloc``/``free``).  ``HiRadixCache`` is the plain radix cache whose tree backs every new leaf up
to host memory at insert (write-through: the node's ``host_value`` is set when the write is
queued, as in SGLang, so nothing is in flight between loop boundaries) and frees the host copy
when the node leaves the tree.  Simplified: a device-evicted node is deleted with its host copy
(SGLang keeps it as an *evicted* node and can load it back); a full host pool skips the backup
(SGLang first evicts host copies); no L3 storage backend.  So ``free + tree host values == size``
at every loop boundary, which is what the probe's ``host`` account checks.

Faults (:mod:`poolwatch_emulator.faults`): ``hicache-host-leak`` loses a backup's host slots (they
are allocated and put on no node); ``hicache-host-double-free`` frees a backup's slots while the
node keeps them (a slot on the free list and on the tree).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poolwatch_emulator.caches import RadixCache
from poolwatch_emulator.radix import RadixTree, TreeNode

if TYPE_CHECKING:
    import torch

    from poolwatch_emulator.faults import FaultPlan
    from poolwatch_emulator.req_pool import ReqToTokenPool

__all__ = ["HiRadixCache", "HostKVCache"]


class HostKVCache:
    """Host-memory KV slots: ids ``0..size-1`` on one free list (SGLang 0.5.4-0.5.12's layout)."""

    def __init__(self, size: int, page_size: int):
        self.page_size = page_size
        self.size = size - size % page_size
        self.clear()

    def clear(self) -> None:
        import torch

        self.free_slots = torch.arange(self.size, dtype=torch.int64)

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, need_size: int) -> torch.Tensor | None:
        if need_size > self.available_size():
            return None
        select, self.free_slots = self.free_slots[:need_size], self.free_slots[need_size:]
        return select

    def free(self, indices: torch.Tensor) -> int:
        import torch

        self.free_slots = torch.cat([self.free_slots, indices])
        return len(indices)


class _HostTree(RadixTree):
    """The radix tree with a host copy of every node (write-through at insert)."""

    def __init__(self, page_size: int, allocator: Any, host: HostKVCache, faults: FaultPlan):
        self.host, self.faults = host, faults
        super().__init__(page_size, mamba=False, allocator=allocator)

    def reset(self) -> None:
        super().reset()
        self.host.clear()

    def _backup(self, leaf: TreeNode) -> None:
        assert leaf.value is not None
        ids = self.host.alloc(len(leaf.value))
        if ids is None or self.faults.fires("hicache-host-leak"):
            return  # a full host pool skips the backup; the fault drops the allocated ids
        leaf.host_value = ids
        if self.faults.fires("hicache-host-double-free"):
            self.host.free(ids)

    def _release_host(self, node: TreeNode) -> None:
        if node.host_value is not None:
            self.host.free(node.host_value)
            node.host_value = None


class HiRadixCache(RadixCache):
    """A radix cache with HiCache's host tier (plain full-attention KV, as SGLang's HiRadixCache)."""

    def __init__(
        self,
        req_to_token_pool: ReqToTokenPool,
        allocator: Any,
        page_size: int,
        faults: FaultPlan,
        host_tokens: int,
    ):
        super().__init__(req_to_token_pool, allocator, page_size, faults)
        self.token_to_kv_pool_host = HostKVCache(host_tokens, page_size)
        self.tree = _HostTree(page_size, allocator, self.token_to_kv_pool_host, faults)
        self.enable_storage = False
        self.ongoing_write_through: dict[int, TreeNode] = {}
        self.ongoing_load_back: dict[int, TreeNode] = {}
        self.ongoing_prefetch: dict[str, Any] = {}
