"""The radix tree keeps SGLang's counters through insert, lock, split and eviction."""

from __future__ import annotations

from typing import Any

import torch

from poolwatch_emulator.allocator import TokenToKVPoolAllocator
from poolwatch_emulator.caches import MambaRadixCache, RadixCache
from poolwatch_emulator.faults import FaultPlan
from poolwatch_emulator.req_pool import HybridReqToTokenPool, ReqToTokenPool


def _plain() -> tuple[RadixCache, TokenToKVPoolAllocator]:
    alloc = TokenToKVPoolAllocator(64)
    return RadixCache(ReqToTokenPool(4, 64), alloc, 1, FaultPlan()), alloc


def _mamba() -> tuple[MambaRadixCache, TokenToKVPoolAllocator, HybridReqToTokenPool]:
    alloc = TokenToKVPoolAllocator(64)
    pool = HybridReqToTokenPool(4, 64, 16)
    return MambaRadixCache(pool, alloc, 1, FaultPlan()), alloc, pool


def _slots(alloc: TokenToKVPoolAllocator, n: int) -> torch.Tensor:
    got = alloc.alloc(n)
    assert got is not None
    return got


def test_an_insert_is_evictable_and_a_lock_makes_it_protected_up_to_the_root() -> None:
    cache, alloc = _plain()
    cache.tree.insert([1, 2, 3, 4], _slots(alloc, 4))
    cache.tree.insert([1, 2, 9], _slots(alloc, 3))  # splits [1,2,3,4] after 2 tokens
    assert cache.evictable_size() == 5
    assert cache.protected_size() == 0
    match = cache.match_prefix([1, 2, 9, 7])
    assert len(match.device_indices) == 3
    cache.inc_lock_ref(match.last_device_node)
    assert cache.protected_size() == 3
    assert cache.evictable_size() == 2
    cache.dec_lock_ref(match.last_device_node)
    assert cache.protected_size() == 0
    cache.sanity_check()


def test_eviction_frees_unlocked_leaves_least_recently_used_first() -> None:
    cache, alloc = _plain()
    cache.tree.insert([1, 2], _slots(alloc, 2))
    cache.tree.insert([5, 6, 7], _slots(alloc, 3))
    locked = cache.match_prefix([5, 6, 7]).last_device_node
    cache.inc_lock_ref(locked)
    before = alloc.available_size()
    assert cache.evict(10) == 2
    assert alloc.available_size() == before + 2
    assert cache.protected_size() == 3


def test_a_mamba_match_stops_at_the_deepest_node_with_a_state_and_copies_it_on_write() -> None:
    cache, alloc, pool = _mamba()
    state = pool.mamba_pool.alloc(1)
    assert state is not None
    cache.tree.insert([1, 2, 3, 4], _slots(alloc, 4), state)
    cache.tree.insert([1, 2, 8], _slots(alloc, 3), pool.mamba_pool.alloc(1))
    assert cache.mamba_evictable_size() == 2  # the split node [1,2] is a tombstone

    class R:
        mamba_pool_idx: Any = None

    req = R()
    match = cache.match_prefix([1, 2, 3, 4, 5], cow_mamba=True, req=req)  # type: ignore[arg-type]
    assert len(match.device_indices) == 4
    assert req.mamba_pool_idx is not None
    assert len(cache.match_prefix([1, 2, 7]).device_indices) == 0  # only a tombstone on the way
    cache.sanity_check()


def test_mamba_eviction_tombstones_internal_nodes_and_deletes_leaves() -> None:
    cache, alloc, pool = _mamba()
    cache.tree.insert([1, 2], _slots(alloc, 2), pool.mamba_pool.alloc(1))
    cache.tree.insert([1, 2, 3], _slots(alloc, 3), pool.mamba_pool.alloc(1))
    free_before = pool.mamba_pool.available_size()
    assert cache.evict_mamba(2) == 2
    assert pool.mamba_pool.available_size() == free_before + 2
    assert cache.mamba_evictable_size() == 0
    cache.sanity_check()
