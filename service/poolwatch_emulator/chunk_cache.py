"""The cache of a PD decode worker (radix cache disabled): no prefix sharing, evictable = 0; a
finished request frees all of its KV, its row and its Mamba slot.

``protected_size_`` as the release keeps it: 0.5.4 (to 0.5.6) adds a request's prebuilt KV
(``len(fill_ids) - len(prefix_indices)``) in ``cache_unfinished_req`` and takes
``len(prefix_indices)`` off in ``cache_finished_req``, and ``protected_size()`` reports it; from
0.5.9 ``protected_size()`` is 0 and the counter is left alone (the decode offload still decrements
it, unread).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poolwatch_emulator.caches import MatchResult, cat_values, row_slots
from poolwatch_emulator.ownership import free_row
from poolwatch_emulator.prefix_cache import BasePrefixCache
from poolwatch_emulator.spec import free_overallocated

if TYPE_CHECKING:
    from poolwatch_emulator.faults import FaultPlan
    from poolwatch_emulator.req import Req
    from poolwatch_emulator.req_pool import ReqToTokenPool

__all__ = ["ChunkCache"]


class ChunkCache(BasePrefixCache):
    """No prefix sharing: everything a request holds is private to it."""

    def __init__(
        self,
        req_to_token_pool: ReqToTokenPool,
        allocator: Any,
        page_size: int,
        faults: FaultPlan,
        *,
        counts_protected: bool = False,
    ):
        super().__init__(req_to_token_pool, allocator, page_size, faults)
        self.counts_protected = counts_protected  # 0.5.4: protected_size() reports protected_size_
        self.protected_size_ = 0

    def is_chunk_cache(self) -> bool:
        return True

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return self.protected_size_ if self.counts_protected else 0

    def full_evictable_size(self) -> int:
        return 0

    def full_protected_size(self) -> int:
        return 0  # BasePrefixCache's: only protected_size() reads protected_size_

    def evict(self, num_tokens: int) -> int:
        return 0

    def inc_lock_ref(self, node: Any) -> None:
        return None

    def dec_lock_ref(self, node: Any) -> None:
        return None

    def match_prefix(self, key: list[int], cow_mamba: bool = False, req: Req | None = None) -> MatchResult:
        return MatchResult(cat_values([]), None, None)

    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        """The prebuilt request's KV becomes its ``prefix_indices`` (and, on 0.5.4, protected)."""
        kv = row_slots(self.req_to_token_pool, req, len(req.fill_ids))
        if self.counts_protected:
            self.protected_size_ += len(kv) - len(req.prefix_indices)
        req.prefix_indices = kv.clone()

    def cache_finished_req(self, req: Req, is_insert: bool = True) -> None:
        self.token_to_kv_pool_allocator.free(row_slots(self.req_to_token_pool, req, req.kv_committed_len))
        free_overallocated(self, req)
        free_row(self.req_to_token_pool, req, free_mamba=True)
        self.emu_unprotect(req)
        req.kv_committed_freed = req.kv_overallocated_freed = True

    def emu_unprotect(self, req: Req) -> None:
        """Take a released request's prefix off ``protected_size_`` (as ``cache_finished_req`` does)."""
        if self.counts_protected:
            self.protected_size_ -= len(req.prefix_indices)
