"""Prefix caches with SGLang's request-level API (reference §2.4).

* ``RadixCache``: ``evictable_size()`` / ``protected_size()``;
* ``MambaRadixCache``: ``full_*`` and ``mamba_*`` counters (``evictable_size()`` raises
  ``NotImplementedError`` as in SGLang); Mamba copy-on-write at ``match_prefix``, a fork into the
  tree at each ``cache_unfinished_req`` and a donation at ``cache_finished_req``;
* ``SWARadixCache`` (:mod:`.swa_cache`) and ``ChunkCache`` (:mod:`.chunk_cache`, PD decode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from poolwatch_emulator.ownership import free_row, hybrid
from poolwatch_emulator.prefix_cache import BasePrefixCache, HybridCounters
from poolwatch_emulator.radix import RadixTree, TreeNode
from poolwatch_emulator.spec import free_overallocated

if TYPE_CHECKING:
    import torch

    from poolwatch_emulator.faults import FaultPlan
    from poolwatch_emulator.req import Req
    from poolwatch_emulator.req_pool import ReqToTokenPool

__all__ = ["MambaRadixCache", "MatchResult", "RadixCache", "cat_values", "row_slots"]


@dataclass(frozen=True, slots=True)
class MatchResult:
    device_indices: torch.Tensor
    last_device_node: Any
    last_host_node: Any


def cat_values(values: list[torch.Tensor]) -> torch.Tensor:
    import torch

    return torch.cat(values) if values else torch.empty((0,), dtype=torch.int64)


def row_slots(pool: ReqToTokenPool, req: Req, end: int) -> torch.Tensor:
    import torch

    assert req.req_pool_idx is not None
    return pool.req_to_token[req.req_pool_idx, :end].to(torch.int64)


class _TreeCache(BasePrefixCache):
    """What every radix cache shares; subclasses name the counters."""

    def __init__(self, req_to_token_pool: ReqToTokenPool, allocator: Any, page_size: int, faults: FaultPlan):
        super().__init__(req_to_token_pool, allocator, page_size, faults)
        hp = hybrid(req_to_token_pool)
        self.tree = RadixTree(
            page_size,
            mamba=self.supports_mamba(),
            allocator=allocator,
            mamba_pool=hp.mamba_pool if hp is not None else None,
            faults=faults,
        )

    @property
    def root_node(self) -> TreeNode:
        return self.tree.root_node

    def is_tree_cache(self) -> bool:
        return True

    def reset(self) -> None:
        self.tree.reset()

    def match_prefix(self, key: list[int], cow_mamba: bool = False, req: Req | None = None) -> MatchResult:
        values, node, _, _ = self.tree.walk(key)
        return MatchResult(cat_values(values), node, node)

    def inc_lock_ref(self, node: TreeNode | None) -> None:
        self.tree.inc_lock_ref(node)

    def dec_lock_ref(self, node: TreeNode | None) -> None:
        self.tree.dec_lock_ref(node)

    def evict(self, num_tokens: int) -> int:
        return self.tree.evict(num_tokens)

    def all_values_flatten(self) -> torch.Tensor:
        return cat_values([n.value for n in self.tree.nodes() if n.value is not None])

    def _fork(self, req: Req) -> torch.Tensor | None:
        return None

    def _donate(self, req: Req) -> torch.Tensor | None:
        return None

    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        """Insert the page-aligned prefix of ``fill_ids``; move the lock to the new last node."""
        import torch

        n = len(req.fill_ids)
        kv = row_slots(self.req_to_token_pool, req, n)
        aligned = n - n % self.page_size
        fork = self._fork(req)
        new_prefix_len, exist = self.tree.insert(req.fill_ids[:aligned], kv[:aligned], fork)
        self.token_to_kv_pool_allocator.free(kv[req.cache_protected_len : new_prefix_len])
        if exist and fork is not None:
            self.tree.mamba_pool.free(fork)
        if new_prefix_len == req.cache_protected_len < aligned and self._rematch_stops_short():
            req.prefix_indices = kv  # the request keeps its own slots; the tree took them unlocked
            return
        match = self.match_prefix(req.fill_ids[:aligned])
        new_indices = match.device_indices
        start = req.cache_protected_len
        self.req_to_token_pool.write(req.req_pool_idx or 0, start, new_indices[start:])
        self.dec_lock_ref(req.last_node)
        self.inc_lock_ref(match.last_device_node)
        req.prefix_indices = torch.cat((new_indices, kv[len(new_indices) :])) if n > aligned else new_indices
        req.set_protected(len(new_indices))
        req.last_node = match.last_device_node

    def cache_finished_req(self, req: Req, is_insert: bool = True) -> None:
        """Insert the committed tokens, free duplicates and the private tail, drop the lock."""
        committed = req.kv_committed_len
        kv = row_slots(self.req_to_token_pool, req, committed)
        free_mamba = True
        if is_insert:
            aligned = committed - committed % self.page_size
            tokens = (req.origin_input_ids + req.output_ids)[:aligned]
            donation = self._donate(req)
            new_prefix_len, exist = self.tree.insert(tokens, kv[:aligned], donation)
            self.token_to_kv_pool_allocator.free(kv[req.cache_protected_len : new_prefix_len])
            self._free_tail(req, kv, aligned)
            free_mamba = exist or donation is None
            if not free_mamba and self.req_to_token_pool.free_by_req:
                req.mamba_pool_idx = None  # donated to the tree
        else:
            self._free_tail(req, kv, req.cache_protected_len)
        free_overallocated(self, req)
        free_row(self.req_to_token_pool, req, free_mamba=free_mamba)
        self.dec_lock_ref(req.last_node)
        req.kv_committed_freed = req.kv_overallocated_freed = True

    def _free_tail(self, req: Req, kv: torch.Tensor, start: int) -> None:
        self.token_to_kv_pool_allocator.free(kv[start:])

    def _rematch_stops_short(self) -> bool:
        """Whether the match after an insert of new tokens ends before them (S09's SWA frontier)."""
        return False

    def sanity_check(self) -> None:
        """Recount the counters from the tree (SGLang's idle tree check)."""
        ev = pr = mev = mpr = 0
        for node in self.tree.nodes():
            if node is self.root_node:
                continue
            if node.full_lock_ref:
                pr += len(node.key)
            else:
                ev += len(node.key)
            if node.mamba_value is not None:
                mpr, mev = (mpr + 1, mev) if node.mamba_lock_ref else (mpr, mev + 1)
        t = self.tree
        got = (
            t.full_evictable_size_,
            t.full_protected_size_,
            t.mamba_evictable_size_,
            t.mamba_protected_size_,
        )
        if got != (ev, pr, mev, mpr):
            raise Exception(f"Radix tree sanity check failed: counters {got} != tree {(ev, pr, mev, mpr)}")


class RadixCache(_TreeCache):
    def evictable_size(self) -> int:
        return self.tree.full_evictable_size_

    def protected_size(self) -> int:
        return self.tree.full_protected_size_


class MambaRadixCache(HybridCounters, _TreeCache):
    def supports_mamba(self) -> bool:
        return True

    def full_evictable_size(self) -> int:
        return self.tree.full_evictable_size_

    def full_protected_size(self) -> int:
        return self.tree.full_protected_size_

    def mamba_evictable_size(self) -> int:
        return self.tree.mamba_evictable_size_

    def mamba_protected_size(self) -> int:
        return self.tree.mamba_protected_size_

    def evict_mamba(self, mamba_num: int) -> int:
        return self.tree.evict_mamba(mamba_num)

    def all_mamba_values_flatten(self) -> torch.Tensor:
        return cat_values([n.mamba_value for n in self.tree.nodes() if n.mamba_value is not None])

    def match_prefix(self, key: list[int], cow_mamba: bool = False, req: Req | None = None) -> MatchResult:
        _, _, values, node = self.tree.walk(key)
        if cow_mamba and req is not None and node.mamba_value is not None and req.mamba_pool_idx is None:
            req.mamba_pool_idx = self._alloc_mamba_protecting(node)
        return MatchResult(cat_values(values), node, node)

    def _alloc_mamba_protecting(self, node: TreeNode) -> torch.Tensor:
        pool = self.tree.mamba_pool
        slot: torch.Tensor | None = pool.alloc(1)
        if slot is None:
            self.inc_lock_ref(node)
            self.evict_mamba(1)
            slot = pool.alloc(1)
            self.dec_lock_ref(node)
        if slot is None:
            raise RuntimeError("Can not alloc mamba cache")
        return slot

    def _fork(self, req: Req) -> torch.Tensor | None:
        assert req.mamba_pool_idx is not None
        pool = self.tree.mamba_pool
        fork: torch.Tensor | None = pool.fork_from(req.mamba_pool_idx)
        if fork is None:
            self.evict_mamba(1)
            fork = pool.fork_from(req.mamba_pool_idx)
        if fork is None:
            raise RuntimeError("Can not alloc mamba cache")
        return fork

    def _donate(self, req: Req) -> torch.Tensor | None:
        return None if req.mamba_pool_idx is None else req.mamba_pool_idx.clone()
