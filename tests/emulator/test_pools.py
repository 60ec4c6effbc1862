"""The pools have SGLang's shapes: torch free lists, reserved ids, no dedup on free."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from poolwatch_emulator.allocator import SWATokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolwatch_emulator.req_pool import HybridReqToTokenPool, ReqToTokenPool


class _R:
    def __init__(self) -> None:
        self.req_pool_idx: int | None = None
        self.mamba_pool_idx: torch.Tensor | None = None


def test_the_token_allocator_reserves_slot_0_and_uses_int64_tensors() -> None:
    a = TokenToKVPoolAllocator(8)
    assert a.free_pages.dtype == torch.int64
    assert a.free_pages.tolist() == list(range(1, 9))
    got = a.alloc(3)
    assert got is not None
    assert got.tolist() == [1, 2, 3]
    assert a.available_size() == 5


def test_freeing_twice_puts_a_slot_twice_on_the_free_list_like_sglang() -> None:
    a = TokenToKVPoolAllocator(8)
    got = a.alloc(2)
    assert got is not None
    a.free(got[:1])
    a.free(got[:1])
    assert a.free_pages.tolist().count(1) == 2
    assert a.available_size() == 8


def test_pd_frees_go_to_release_pages_and_are_merged_when_an_allocation_runs_short() -> None:
    a = TokenToKVPoolAllocator(4, need_sort=True)
    got = a.alloc(4)
    assert got is not None
    a.free(got)
    assert len(a.release_pages) == 4
    assert len(a.free_pages) == 0
    assert a.available_size() == 4
    assert a.alloc(2) is not None
    assert len(a.release_pages) == 0


def test_a_paged_allocator_fills_the_last_partial_page_before_taking_new_pages() -> None:
    a = TokenToKVPoolAllocator(64, page_size=4)
    first = a.alloc_extend_one(0, 0, 6)
    assert first is not None
    assert first.tolist() == [4, 5, 6, 7, 8, 9]
    more = a.alloc_extend_one(6, int(first[-1]), 3)
    assert more is not None
    assert more.tolist() == [10, 11, 12]
    assert a.available_size() == 64 - 3 * 4


def test_the_paged_allocator_dedups_pages_within_one_free_only() -> None:
    a = TokenToKVPoolAllocator(16, page_size=4)
    got = a.alloc(4)
    assert got is not None
    a.free(got)
    a.free(got[:1])
    assert a.free_pages.tolist().count(1) == 2


def test_the_swa_allocator_maps_full_slots_to_window_slots_and_frees_both() -> None:
    a = SWATokenToKVPoolAllocator(16, 16)
    got = a.alloc(3)
    assert got is not None
    assert (a.full_to_swa_index_mapping[got] > 0).all()
    a.free(got)
    assert a.full_available_size() == 16
    assert a.swa_available_size() == 16
    assert int(a.full_to_swa_index_mapping.sum()) == 0


def test_mamba_ids_start_at_0_in_0_5_4_and_at_1_from_0_5_9() -> None:
    old = HybridReqToTokenPool(4, 16, 8, mamba_first_id=0)
    new = HybridReqToTokenPool(4, 16, 8, mamba_first_id=1, split_mamba_free=True)
    assert old.mamba_pool.free_slots.tolist() == list(range(8))
    assert new.mamba_pool.free_slots.tolist() == list(range(1, 9))


def test_request_rows_are_a_python_list_and_row_0_is_reserved_from_0_5_12() -> None:
    assert ReqToTokenPool(3, 8).free_slots == [0, 1, 2]
    assert ReqToTokenPool(3, 8, first_row=1).free_slots == [1, 2, 3]


def test_0_5_4_free_also_frees_the_mamba_slot_by_default() -> None:
    pool = HybridReqToTokenPool(4, 16, 8)
    req = _R()
    rows = pool.alloc_for([req])
    assert rows is not None
    assert req.mamba_pool_idx is not None
    pool.free(rows[0])
    assert pool.mamba_pool.available_size() == 8
    assert req.mamba_pool_idx is not None  # stale, as in SGLang


def test_0_5_9_frees_the_row_and_the_mamba_slot_separately_and_forgets_them() -> None:
    pool = HybridReqToTokenPool(4, 16, 8, mamba_first_id=1, split_mamba_free=True)
    req = _R()
    assert pool.alloc_for([req]) is not None
    pool.free_req(req)
    assert req.req_pool_idx is None
    assert pool.mamba_pool.available_size() == 7
    pool.free_mamba_cache(req)
    assert req.mamba_pool_idx is None
    assert pool.mamba_pool.available_size() == 8


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 7)), max_size=40), st.sampled_from([1, 2, 4]))
def test_available_plus_what_is_held_is_the_size_after_any_alloc_free_sequence(
    ops: list[tuple[bool, int]], page: int
) -> None:
    a = TokenToKVPoolAllocator(32 * page, page_size=page, need_sort=page == 2)
    held: list[torch.Tensor] = []
    for alloc, n in ops:
        if alloc:
            got = a.alloc(n)
            if got is not None:
                held.append(got)
        elif held:
            a.free(held.pop(n % len(held)))
        pages = sum(-(-len(h) // page) for h in held)
        assert a.available_size() + pages * page == a.size
