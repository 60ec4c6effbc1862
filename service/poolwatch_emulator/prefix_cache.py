"""What every emulated prefix cache holds and answers as SGLang's ``BasePrefixCache`` does: the
request-row pool, the allocator, the page size and the fault plan it is built with; which kind of cache
it is and which hybrid pools its tree tracks (none, unless a subclass says so), and the hybrid
trees' refusal to give one combined counter (SGLang's ``evictable_size()`` and ``protected_size()``
raise ``NotImplementedError`` on its Mamba and SWA radix caches: a caller must ask per pool)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from poolwatch_emulator.faults import FaultPlan
    from poolwatch_emulator.req_pool import ReqToTokenPool

__all__ = ["BasePrefixCache", "HybridCounters"]


class BasePrefixCache:
    def __init__(self, req_to_token_pool: ReqToTokenPool, allocator: Any, page_size: int, faults: FaultPlan):
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = allocator
        self.page_size = page_size
        self.faults = faults
        self.emu_narrow_row: int | None = None  # speculative decoding: the row before PR #26972
        self.is_eagle = False  # speculative decoding (EAGLE): keys are bigrams in SGLang

    def is_tree_cache(self) -> bool:
        return False

    def is_chunk_cache(self) -> bool:
        return False

    def supports_mamba(self) -> bool:
        return False

    def supports_swa(self) -> bool:
        return False


class HybridCounters:
    """Put first among a hybrid tree's bases: its combined counters raise, as SGLang's do."""

    def evictable_size(self) -> int:
        raise NotImplementedError

    def protected_size(self) -> int:
        raise NotImplementedError
