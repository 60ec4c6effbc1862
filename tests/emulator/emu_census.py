"""The full KV pool's id census of an emulated rank: every page id is on a free list, in the tree,
or in a live request's private range, exactly once.  Independent of the counters: a counter bug
leaves it clean while the conservation gap is not 0; a slot bug names the ids."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from tests.emulator.emu_ledger import live_requests


@dataclass(frozen=True)
class Census:
    duplicated: list[int]  # ids counted twice or more (free twice, free and owned, owned twice)
    unowned: list[int]  # ids nobody has

    @property
    def clean(self) -> bool:
        return not self.duplicated and not self.unowned


def _pages(ids: list[int], page: int) -> list[int]:
    return ids if page == 1 else sorted({i // page for i in ids})


def _private(rank: Any, req: Any) -> list[int]:
    """The page ids of a live request's row past what the tree owns (a ChunkCache owns nothing):
    ``[cache_protected_len, kv_allocated_len)``, the last page whole."""
    if req.req_pool_idx is None or req.kv_committed_freed:
        return []
    start = int(req.cache_protected_len) if rank.tree_cache.is_tree_cache() else 0
    row = rank.req_to_token_pool.req_to_token[req.req_pool_idx, start : req.kv_allocated_len].tolist()
    return _pages([int(x) for x in row], rank.page_size)


def full_census(rank: Any) -> Census:
    alloc, tree, ps = rank.token_to_kv_pool_allocator, rank.tree_cache, rank.page_size
    ids: Counter[int] = Counter(alloc.free_pages.tolist() + alloc.release_pages.tolist())
    if tree.is_tree_cache():
        ids.update(_pages([int(x) for x in tree.all_values_flatten().tolist()], ps))
    for req in live_requests(rank):
        ids.update(_private(rank, req))
    expected = range(1, alloc.size // ps + 1)
    return Census(sorted(i for i, n in ids.items() if n > 1), [i for i in expected if i not in ids])
