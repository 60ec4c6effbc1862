"""A hybrid sliding-window model's rank (a full KV pool and an SWA pool, paged) on an SGLang
release's own classes, and the chunked prefill steps its unified radix tree takes (run in the
release's venv).

:func:`swa_pools` gives a :class:`~rigs.sglang.rank.Rank` the release's ``SWAKVPool`` (one SWA
layer, one full layer), ``SWATokenToKVPoolAllocator`` and ``UnifiedRadixCache`` over the full and
SWA components (``eagle``: the bigram keys of EAGLE speculative decoding).  :class:`Windowed` drives
a chunked prefill through them: the allocator's ``alloc_extend``, the tree's own
``cache_unfinished_req`` at a chunk boundary, and SGLang's ``release_kv_cache`` when the request
finishes.  What is stood in for: the paged allocator's Triton kernel, replaced by the same module's
pure-torch reference (``alloc_extend_naive``: the same arguments, the same slots handed out).
"""

from __future__ import annotations

from typing import Any

from rigs.sglang.releases import Release

__all__ = ["Windowed", "swa_pools"]


def _torch_kernel() -> None:
    """``alloc_extend``'s Triton kernel has no CPU build: its module's torch reference runs instead."""
    from sglang.srt.mem_cache.allocator import paged

    def launch(
        prefix_lens: Any, seq_lens: Any, last_loc: Any, free_pages: Any, out: Any, _: Any, page: int
    ) -> None:
        paged.alloc_extend_naive(prefix_lens, seq_lens, last_loc, free_pages, out, page, "cpu")

    class _Grid:
        def __getitem__(self, grid: Any) -> Any:
            return launch

    paged.alloc_extend_kernel = _Grid()


def swa_pools(rank: Any, *, kv: int, rows: int, context: int, page: int, window: int, eagle: bool) -> None:
    """The rows, the paged full + SWA pools and allocator, the unified tree, on ``rank``."""
    import torch
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    _torch_kernel()
    rank.req_to_token_pool = ReqToTokenPool(
        size=rows, max_context_len=context, device="cpu", enable_memory_saver=False
    )
    pools = SWAKVPool(
        size=kv, size_swa=kv, page_size=page, dtype=torch.bfloat16, head_num=1, head_dim=8,
        swa_attention_layer_ids=[0], full_attention_layer_ids=[1], device="cpu",
    )  # fmt: skip
    rank.token_to_kv_pool_allocator = SWATokenToKVPoolAllocator(
        size=kv,
        size_swa=kv,
        page_size=page,
        dtype=torch.bfloat16,
        device="cpu",
        kvcache=pools,
        need_sort=False,
    )
    rank.tree_cache = UnifiedRadixCache(
        params=CacheInitParams(
            disable=False,
            req_to_token_pool=rank.req_to_token_pool,
            token_to_kv_pool_allocator=rank.token_to_kv_pool_allocator,
            page_size=page,
            sliding_window_size=window,
            tree_components=(ComponentType.FULL, ComponentType.SWA),
            is_eagle=eagle,
        )
    )
    rank.cache_params, rank.page_size = None, page
    rank.full_tokens_per_layer = rank.swa_tokens_per_layer = kv
    rank.sliding_window_size = window


class Windowed:
    """The chunked prefill steps of a :class:`~rigs.sglang.driver.Driver` on an SWA rank."""

    release: Release
    sched: Any

    def windowed_chunk(self, req: Any, upto: int) -> None:
        """Prefill ``req`` up to token ``upto``: a new request's match and row first, then the
        allocator's own ``alloc_extend`` for the chunk, recorded as ``alloc_for_extend`` records it."""
        import torch
        from sglang.srt.managers.schedule_batch import ReqKvInfo

        s = self.sched
        pool, alloc = s.req_to_token_pool, s.token_to_kv_pool_allocator
        start = req.kv.kv_allocated_len if getattr(req, "kv", None) is not None else 0
        if not start:
            req.init_next_round_input(s.tree_cache)
            pool.alloc([req])
        last = int(pool.req_to_token[req.req_pool_idx, start - 1]) if start else -1

        def one(v: int) -> Any:
            return torch.tensor([v], dtype=torch.int64)

        loc = alloc.alloc_extend(one(start), one(start), one(upto), one(upto), one(last), upto - start)
        pool.write((req.req_pool_idx, slice(start, upto)), loc)
        if start:
            req.kv.kv_allocated_len = upto
        else:
            req.kv = ReqKvInfo(kv_allocated_len=upto, swa_evicted_seqlen=0)
        req.kv_committed_len = upto
        req.set_extend_range(start, upto)
        self.sched.chunked_req = req  # where SGLang keeps a request between its chunks

    def windowed_boundary(self, req: Any) -> None:
        """The chunk boundary: the tree's own ``cache_unfinished_req`` (its out-of-window free, the
        insert, the re-match)."""
        self.sched.tree_cache.cache_unfinished_req(req, chunked=True)

    def windowed_finish(self, req: Any) -> None:
        """The request finishes after one token: SGLang's own ``release_kv_cache``."""
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH
        from sglang.srt.mem_cache.common import release_kv_cache

        req.output_ids.append(7)
        req.finished_reason = FINISH_LENGTH(1)
        self.sched.chunked_req = None
        release_kv_cache(req, self.sched.tree_cache)
