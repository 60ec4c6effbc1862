"""The cache of a PD decode worker (radix cache disabled): no prefix sharing, evictable =
protected = 0; a finished request frees all of its KV, its row and its Mamba slot."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poolwatch_emulator.caches import MatchResult, cat_values, row_slots
from poolwatch_emulator.ownership import free_row

if TYPE_CHECKING:
    from poolwatch_emulator.req import Req
    from poolwatch_emulator.req_pool import ReqToTokenPool

__all__ = ["ChunkCache"]


class ChunkCache:
    """No prefix sharing: everything a request holds is private to it."""

    def __init__(self, req_to_token_pool: ReqToTokenPool, allocator: Any, page_size: int):
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = allocator
        self.page_size = page_size

    def is_tree_cache(self) -> bool:
        return False

    def supports_mamba(self) -> bool:
        return False

    def supports_swa(self) -> bool:
        return False

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def full_evictable_size(self) -> int:
        return 0

    def full_protected_size(self) -> int:
        return 0

    def evict(self, num_tokens: int) -> int:
        return 0

    def inc_lock_ref(self, node: Any) -> None:
        return None

    def dec_lock_ref(self, node: Any) -> None:
        return None

    def match_prefix(self, key: list[int], cow_mamba: bool = False, req: Req | None = None) -> MatchResult:
        return MatchResult(cat_values([]), None, None)

    def cache_finished_req(self, req: Req, is_insert: bool = True, *, free_kv: bool = True) -> None:
        if free_kv:
            self.token_to_kv_pool_allocator.free(row_slots(self.req_to_token_pool, req, req.kv_allocated_len))
        free_row(self.req_to_token_pool, req, free_mamba=True)
        req.kv_committed_freed = req.kv_overallocated_freed = True
