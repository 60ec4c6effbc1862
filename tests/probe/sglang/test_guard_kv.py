"""Guard v2 on the KV pools, on the emulator's pools in SGLang's shapes: a free through a released
request row is refused whole before the allocator runs; the SWA pair's sides refuse a direct double
free; everything else -- held rows, other tensors, nested calls, a kill switch -- is freed as asked."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from poolwatch.model.rank import Pool
from poolwatch.probe.sglang.guard.kv import KvGuard
from poolwatch.probe.sglang.guard.paths import GUARD_PATHS
from poolwatch.probe.sglang.guard.rows import RowBook, RowView
from poolwatch_emulator.allocator import SWATokenToKVPoolAllocator, TokenToKVPoolAllocator
from poolwatch_emulator.req_pool import ReqToTokenPool

Seen = list[tuple[Pool, list[int], list[str], str, int]]


def _rank(*, page: int = 1, swa: bool = False, free_by_req: bool = False) -> tuple[Any, KvGuard, Seen]:
    pool = ReqToTokenPool(4, 64, free_by_req=free_by_req)
    alloc: Any = SWATokenToKVPoolAllocator(256, 128, page) if swa else TokenToKVPoolAllocator(256, page)
    sched = SimpleNamespace(req_to_token_pool=pool, token_to_kv_pool_allocator=alloc)
    rows = RowBook(pool)
    assert rows.install()
    seen: Seen = []
    guard = KvGuard(sched, rows, lambda *a: seen.append(a), lambda: False)
    paths = GUARD_PATHS["0.5.12"]
    assert guard.install(paths.kv_entries, paths.direct_kv)
    return sched, guard, seen


def _admit(sched: Any, tokens: int) -> tuple[int, torch.Tensor]:
    (row,) = sched.req_to_token_pool.alloc(1)
    slots = sched.token_to_kv_pool_allocator.alloc(tokens)
    sched.req_to_token_pool.write(row, 0, slots)
    return row, slots


def _free_list(sched: Any) -> list[int]:
    alloc = sched.token_to_kv_pool_allocator
    return [*alloc.free_pages.tolist(), *alloc.release_pages.tolist()]


def test_a_free_through_a_released_row_is_refused_whole_before_the_allocator_runs() -> None:
    sched, _, seen = _rank()
    row, slots = _admit(sched, 6)
    table = sched.req_to_token_pool.req_to_token
    sched.token_to_kv_pool_allocator.free(table[row, :6])  # the request's own release: the row is held
    sched.req_to_token_pool.free(row)
    before = _free_list(sched)
    sched.token_to_kv_pool_allocator.free(table[row, 2:6])  # the stale second free
    assert _free_list(sched) == before  # as if never called
    assert seen == [(Pool.FULL, slots[2:6].tolist(), [], "token_to_kv_pool_allocator.free", 1)]


def test_frees_through_held_rows_other_tensors_and_empty_views_are_freed_as_asked() -> None:
    sched, _, seen = _rank()
    row, slots = _admit(sched, 6)
    table = sched.req_to_token_pool.req_to_token
    alloc = sched.token_to_kv_pool_allocator
    alloc.free(table[row, 4:6])  # a held row's tail (a release, a retraction)
    alloc.free(slots[:2].clone())  # another tensor: an eviction's node value, a rejected draft
    sched.req_to_token_pool.free(row)
    alloc.free(table[row, 0:0])  # nothing to free
    assert seen == []
    assert set(slots[:2].tolist()) | set(slots[4:6].tolist()) <= set(_free_list(sched))


def test_a_row_taken_again_is_held_and_its_new_owners_release_goes_through() -> None:
    sched, _, seen = _rank()
    row, _ = _admit(sched, 4)
    table = sched.req_to_token_pool.req_to_token
    sched.token_to_kv_pool_allocator.free(table[row, :4])
    sched.req_to_token_pool.free(row)
    again, new = _admit(sched, 3)  # the pool hands out rows from the front: the same row later
    while again != row:
        sched.req_to_token_pool.free(again)
        again, new = _admit(sched, 3)
    sched.token_to_kv_pool_allocator.free(table[row, :3])
    assert seen == []
    assert set(new.tolist()) <= set(_free_list(sched))


@pytest.mark.parametrize("free_by_req", [False, True])
def test_the_row_book_follows_row_frees_by_index_and_by_request(free_by_req: bool) -> None:
    pool = ReqToTokenPool(4, 8, free_by_req=free_by_req)
    book = RowBook(pool)
    assert book.install()
    (row,) = pool.alloc(1)
    assert not book.released(row)
    req = SimpleNamespace(req_pool_idx=row, mamba_pool_idx=None)
    pool.free(req if free_by_req else row)
    assert book.released(row)
    assert pool.alloc(4) is not None
    assert not book.released(row)


def test_a_row_list_changed_behind_the_books_back_is_read_again_never_trusted() -> None:
    pool = ReqToTokenPool(4, 8)
    book = RowBook(pool)
    assert book.install()
    (row,) = pool.alloc(1)
    pool.free(row)
    assert book.released(row)
    pool.free_slots.remove(row)  # a path the book does not wrap takes the row (the length moves)
    assert not book.released(row)
    pool.free_slots.append(row)
    pool.free_slots.remove(pool.free_slots[0])  # ... and one that keeps the length
    book.free.add(pool.free_slots[0] - 100)  # a row the set wrongly calls free
    assert not book.released(pool.free_slots[0] - 100)  # checked against SGLang's own list


def test_a_call_nested_in_a_wrapped_row_call_counts_once() -> None:
    class Pool0523(ReqToTokenPool):  # 0.5.23: free(req) gives the row back through free_rows
        def free_rows(self, rows: list[int]) -> None:
            self.free_slots.extend(rows)

        def free(self, req: Any) -> None:  # type: ignore[override]
            self.free_rows([req.req_pool_idx])
            req.req_pool_idx = None

    pool = Pool0523(4, 8)
    book = RowBook(pool)
    assert book.install()
    (row,) = pool.alloc(1)
    rebuilt = book.seen
    pool.free(SimpleNamespace(req_pool_idx=row))
    assert book.released(row)
    assert book.seen == rebuilt + 1  # followed, not rebuilt


def test_the_row_view_names_one_row_and_nothing_else() -> None:
    table = torch.zeros((4, 16), dtype=torch.int32)
    view = RowView(table)
    assert view.row(table[2, 3:9]) == 2
    assert view.row(table[1]) == 1
    assert view.row(table[1][4:6]) == 1
    assert view.row(table[2, 3:9].clone()) is None  # a copy
    assert view.row(table[1:3].reshape(-1)) is None  # over two rows
    assert view.row(table[:, 0]) is None  # a column
    assert view.row(table[2, ::2]) is None  # strided
    assert view.row(table[1:3, 2:4]) is None  # 2-d


def test_a_paged_refusal_names_page_ids_of_the_allocators_page_size() -> None:
    sched, _, seen = _rank(page=4)
    (row,) = sched.req_to_token_pool.alloc(1)
    slots = sched.token_to_kv_pool_allocator.alloc(8)
    sched.req_to_token_pool.write(row, 0, slots)
    table = sched.req_to_token_pool.req_to_token
    sched.token_to_kv_pool_allocator.free(table[row, :8])
    sched.req_to_token_pool.free(row)
    sched.token_to_kv_pool_allocator.free(table[row, :8])
    ((pool, ids, _, _, page),) = seen
    assert (pool, page) == (Pool.FULL, 4)
    assert ids == sorted({int(s) // 4 for s in slots.tolist()})


def test_the_swa_pairs_window_side_refuses_a_direct_double_free_and_frees_the_rest() -> None:
    sched, _, seen = _rank(page=4, swa=True)
    (row,) = sched.req_to_token_pool.alloc(1)
    full = sched.token_to_kv_pool_allocator.alloc(8)
    sched.req_to_token_pool.write(row, 0, full)
    swa_side = sched.token_to_kv_pool_allocator.swa_attn_allocator
    window = sched.token_to_kv_pool_allocator.full_to_swa_index_mapping[full].clone()
    sched.token_to_kv_pool_allocator.free(sched.req_to_token_pool.req_to_token[row, :8])  # the pair: nested
    assert seen == []
    last_page = window[-1:] - window[-1:] % 4
    other = swa_side.alloc(4)
    before = [*swa_side.free_pages.tolist(), *swa_side.release_pages.tolist()]
    swa_side.free(torch.cat((last_page, other)))  # #27789: the last window page again, with a live one
    after = [*swa_side.free_pages.tolist(), *swa_side.release_pages.tolist()]
    assert after == [*before, int(other[0]) // 4]  # only the page not already free went back
    ((pool, ids, _, where, page),) = seen
    assert (pool, ids, where, page) == (
        Pool.SWA,
        [int(last_page) // 4],
        "token_to_kv_pool_allocator.swa_attn_allocator.free",
        4,
    )


def test_a_kill_switch_and_detach_leave_every_kv_free_to_sglang() -> None:
    sched, guard, seen = _rank()
    row, _ = _admit(sched, 4)
    table = sched.req_to_token_pool.req_to_token
    sched.token_to_kv_pool_allocator.free(table[row, :4])
    sched.req_to_token_pool.free(row)
    guard.paused = lambda: True
    sched.token_to_kv_pool_allocator.free(table[row, :4])
    assert seen == []
    guard.uninstall()
    guard.rows.uninstall()
    for owner in (sched.token_to_kv_pool_allocator, sched.req_to_token_pool):
        assert not {"free", "alloc", "free_swa"} & set(vars(owner))
