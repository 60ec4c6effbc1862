"""HiCache's host tier (``--enable-hierarchical-cache``, ``mem_cache/hiradix_cache.py``), emulated.

``HostKVCache`` has SGLang's free-list shape (``size``, ``free_slots``, ``available_size()``,
``alloc``/``free``).  ``HiRadixCache`` is the plain radix cache whose tree backs every new leaf up
to host memory at insert (write-through, ``write_backup``): the node's ``host_value`` is set when
the write is queued, the node is locked (``inc_lock_ref``) and kept in ``ongoing_write_through``
until ``writing_check`` drains its ack from ``cache_controller.ack_write_queue`` and unlocks it.
The copy itself completes at once; its ack waits for a drain: the prefill batch builder's
``check_hicache_events`` (every release) and the decode step's ``flush_write_through_acks``
(0.5.10's fix, the emulator's default on every release).  The host copy is freed when the node
leaves the tree.  Simplified: a device-evicted node is deleted with its host copy (SGLang keeps it
as an *evicted* node and can load it back); a full host pool skips the backup (SGLang first evicts
host copies); no L3 storage backend.  So ``free + tree host values == size`` at every loop
boundary, which is what the probe's ``host`` account checks.

Faults (:mod:`poolwatch_emulator.catalogue`): ``hicache-host-leak`` loses a backup's host slots
(allocated, put on no node); ``hicache-host-double-free`` frees a backup's slots while the node
keeps them; ``hicache-unlock-without-lock`` (O12) issues a write as ``write_back`` (no lock) and
acks it through the write-through branch, a ``dec_lock_ref`` without its ``inc``;
``hicache-write-acks-undrained`` (S14) leaves the decode step's drain out, as 0.5.4 - 0.5.9 do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poolwatch_emulator.caches import RadixCache
from poolwatch_emulator.radix import RadixTree, TreeNode

if TYPE_CHECKING:
    import torch

    from poolwatch_emulator.faults import FaultPlan
    from poolwatch_emulator.req_pool import ReqToTokenPool

__all__ = ["HiCacheController", "HiRadixCache", "HostKVCache"]


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


class _Done:
    """A copy's finish event: the emulated copy is complete as soon as it is queued."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class HiCacheController:
    """The device -> host writer: host slots for a write, and its ack on ``ack_write_queue``."""

    def __init__(self, mem_pool_host: HostKVCache):
        self.mem_pool_host = mem_pool_host
        self.write_policy = "write_through"
        self.ack_write_queue: list[tuple[int, _Done, list[int]]] = []

    def write(self, device_indices: torch.Tensor, node_id: int) -> torch.Tensor | None:
        host_indices = self.mem_pool_host.alloc(len(device_indices))
        if host_indices is not None:
            self.ack_write_queue.append((node_id, _Done(), [node_id]))
        return host_indices


class _HostTree(RadixTree):
    """The radix tree with a host copy of every node (write-through at insert)."""

    def __init__(self, page_size: int, allocator: Any, owner: HiRadixCache, faults: FaultPlan):
        self.owner = owner
        super().__init__(page_size, mamba=False, allocator=allocator, faults=faults)

    def reset(self) -> None:
        super().reset()
        self.owner.token_to_kv_pool_host.clear()

    def _backup(self, leaf: TreeNode) -> None:
        self.owner.write_backup(leaf)

    def _release_host(self, node: TreeNode) -> None:
        if node.host_value is not None:
            self.owner.token_to_kv_pool_host.free(node.host_value)
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
        self.cache_controller = HiCacheController(self.token_to_kv_pool_host)
        self.enable_storage = False
        self.ongoing_write_through: dict[int, TreeNode] = {}
        self.emu_queued_at: dict[int, float] = {}  # node id -> simulated time its write was queued
        self.ongoing_load_back: dict[int, TreeNode] = {}
        self.ongoing_prefetch: dict[str, Any] = {}
        self.tree = _HostTree(page_size, allocator, self, faults)

    def reset(self) -> None:
        super().reset()
        self.ongoing_write_through.clear()
        self.emu_queued_at.clear()
        self.cache_controller.ack_write_queue.clear()

    def write_backup(self, node: TreeNode, write_back: bool = False) -> int:
        """Queue ``node``'s copy to host memory; a write-through locks the node until its ack."""
        assert node.value is not None
        host_indices = self.cache_controller.write(node.value, node.id)
        if host_indices is None:
            return 0  # a full host pool skips the backup
        if not self.faults.fires("hicache-host-leak"):  # the leak: the slots go on no node
            node.host_value = host_indices
            if self.faults.fires("hicache-host-double-free"):
                self.token_to_kv_pool_host.free(host_indices)
        self.ongoing_write_through[node.id] = node
        self.emu_queued_at[node.id] = self.faults.now
        if self.faults.fires("hicache-unlock-without-lock"):
            write_back = True  # O12: issued as write_back, acked below as a write-through
        if not write_back:
            self.inc_lock_ref(node)
        return len(host_indices)

    def writing_check(self, write_back: bool = False) -> None:
        """Drain the finished writes' acks: each write-through node is unlocked."""
        if not self.ongoing_write_through:
            return
        queue = self.cache_controller.ack_write_queue
        while queue and queue[0][1].query():
            _, finish_event, ack_list = queue.pop(0)
            finish_event.synchronize()
            for ack_id in ack_list:
                self.dec_lock_ref(self.ongoing_write_through.pop(ack_id))
                self.emu_queued_at.pop(ack_id, None)

    def check_hicache_events(self) -> None:
        self.writing_check()

    def flush_write_through_acks(self) -> None:
        self.writing_check()
