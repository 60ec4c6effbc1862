"""A dense model's rank (no Mamba, no SWA pool) on an SGLang release's own classes (run in its venv).

:func:`dense_pools` gives a :class:`~rigs.sglang.rank.Rank` a plain model's pools: the request
rows (``DecodeReqToTokenPool`` on a decode rank, with its pre-allocation rows), the KV allocator,
and the tree the rank runs (``ChunkCache``, the ``RadixCache`` of
``--disaggregation-decode-enable-radix-cache``, or HiCache's).  The decode side that runs on it is
:mod:`rigs.sglang.decode`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dense_pools"]


def dense_pools(rank: Any, mode: str, *, kv: int, rows: int, context: int, tree: str, pre_alloc: int) -> None:
    """A plain model's rows, KV allocator and tree (``tree``: ``chunk``, ``radix`` or HiCache's
    ``hiradix``) on ``rank``."""
    import torch
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator

    if mode == "decode":
        from sglang.srt.disaggregation.decode import DecodeReqToTokenPool as Rows

        rank.req_to_token_pool = Rows(
            size=rows,
            max_context_len=context,
            device="cpu",
            enable_memory_saver=False,
            pre_alloc_size=pre_alloc,
        )
    else:
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

        rank.req_to_token_pool = ReqToTokenPool(rows, context, "cpu", False)
    rank.token_to_kv_pool_allocator = TokenToKVPoolAllocator(
        kv, torch.float16, "cpu", None, need_sort=mode != "null"
    )
    rank.tree_cache = _tree(rank, tree)
    rank.cache_params = None


def _tree(rank: Any, kind: str) -> Any:
    pool, alloc = rank.req_to_token_pool, rank.token_to_kv_pool_allocator
    if kind == "hiradix":  # --enable-hierarchical-cache
        from rigs.sglang.hicache import hicache_tree

        return hicache_tree(rank)
    if kind == "chunk":
        from sglang.srt.mem_cache.chunk_cache import ChunkCache as Tree
    else:
        from sglang.srt.mem_cache.radix_cache import RadixCache as Tree
    if not rank.release.tree_params:
        return (
            Tree(pool, alloc, page_size=1)
            if kind == "chunk"
            else Tree(pool, alloc, page_size=1, disable=False)
        )
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams

    return Tree(
        CacheInitParams(disable=False, req_to_token_pool=pool, token_to_kv_pool_allocator=alloc, page_size=1)
    )
