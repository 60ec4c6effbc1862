"""A dense model's rank (no Mamba, no SWA pool) on an SGLang release's own classes (run in its venv).

:func:`dense_pools` gives a :class:`~rigs.sglang.rank.Rank` a plain model's pools: the request
rows (``DecodeReqToTokenPool`` on a decode rank, with its pre-allocation rows), the KV allocator,
and the tree the rank runs (``ChunkCache``, the ``RadixCache`` of
``--disaggregation-decode-enable-radix-cache``, or HiCache's: :mod:`rigs.sglang.hicache_tree`, or
from 0.5.17 :mod:`rigs.sglang.hicache_built`, whose host pool mirrors a device KV pool the allocator
then carries).  The decode side that runs on it is :mod:`rigs.sglang.decode`.
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
        kv, torch.float16, "cpu", _device_pool(rank, tree, kv), need_sort=mode != "null"
    )
    rank.tree_cache = _tree(rank, tree)
    rank.cache_params = None


def _device_pool(rank: Any, tree: str, kv: int) -> Any:
    """The KV device pool the allocator carries: the one HiCache's host pool mirrors where the rig
    builds HiCache with the release's own constructors (0.5.17 on); none otherwise."""
    if tree != "hiradix" or not rank.release.unified_tree:
        return None
    from rigs.sglang.hicache_built import device_kv_pool

    return device_kv_pool(kv)


def _tree(rank: Any, kind: str) -> Any:
    pool, alloc = rank.req_to_token_pool, rank.token_to_kv_pool_allocator
    if kind == "hiradix" and rank.release.unified_tree:  # --enable-hierarchical-cache, 0.5.17 on
        from rigs.sglang.hicache_built import built_hicache_tree

        return built_hicache_tree(rank)
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
