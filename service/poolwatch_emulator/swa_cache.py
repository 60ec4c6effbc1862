"""The SWA radix cache: ``full_*`` and ``swa_*`` counters.  Sliding-window tombstones are not
modelled (no window eviction), so the SWA side mirrors the full side slot for slot.

With EAGLE (``is_eagle``) SGLang keys the tree by token bigrams, one entry shorter than the tokens;
``spec-swa-frontier-off-by-one`` (S09, PR #34870) is the match after an insert ending one entry
short of the new node: the request's ``cache_protected_len`` and lock stay where they were while
the tree holds its slots unlocked, and its release later frees them as duplicates."""

from __future__ import annotations

from typing import TYPE_CHECKING

from poolwatch_emulator.caches import RadixCache
from poolwatch_emulator.prefix_cache import HybridCounters

if TYPE_CHECKING:
    import torch

    from poolwatch_emulator.req import Req

__all__ = ["SWARadixCache"]


class SWARadixCache(HybridCounters, RadixCache):
    def supports_swa(self) -> bool:
        return True

    full_evictable_size = RadixCache.evictable_size
    full_protected_size = RadixCache.protected_size
    swa_evictable_size = RadixCache.evictable_size
    swa_protected_size = RadixCache.protected_size

    def _rematch_stops_short(self) -> bool:
        return self.is_eagle and self.faults.fires("spec-swa-frontier-off-by-one")

    def _free_tail(self, req: Req, kv: torch.Tensor, start: int) -> None:
        last = kv[-1:].clone()
        swa_last = self.token_to_kv_pool_allocator.full_to_swa_index_mapping[last].clone()
        super()._free_tail(req, kv, start)
        if len(last) and self.faults.fires("swa-page-overcount"):
            page = self.token_to_kv_pool_allocator.page_size
            self.token_to_kv_pool_allocator.swa_attn_allocator.free(swa_last - swa_last % page)
