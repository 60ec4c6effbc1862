"""KV allocated to a live request past what its release frees (S10 / S11's class): the full-KV
census names the pages with their request before the release strands them
(:mod:`poolwatch.probe.sglang.unreleased`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from poolwatch.model.findings import LEAK_KINDS, Tripwire, TripwireKind
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.lifecycle import probe_of
from poolwatch.probe.sglang.kv_census import kv_census
from poolwatch.probe.sglang.requests import LiveSet
from poolwatch.probe.sglang.shapes import shape_for_version
from poolwatch.probe.sglang.unreleased import TAIL_REACH, Tail, reach_of, release_end, tails, unreleased
from poolwatch_emulator.scenarios import scenario_config
from rigs.emulated.watched import EPOCH, Watched

PAGE, WIDTH = 4, 16
SHAPE = shape_for_version("0.5.9")


def _req(rid: str, row: int, *, allocated: int, committed: int, tokens: int) -> Any:
    return SimpleNamespace(
        rid=rid, req_pool_idx=row, kv_allocated_len=allocated, kv_committed_len=committed,
        cache_protected_len=0, origin_input_ids=[1] * tokens, output_ids=[7], kv_committed_freed=False,
        finished=lambda: False,
    )  # fmt: skip


def _seen(n: int, *marked: int) -> torch.Tensor:
    marks = torch.zeros(n, dtype=torch.bool)
    marks[list(marked)] = True
    return marks


def test_the_books_account_for_the_row_up_to_the_allocated_length_page_aligned() -> None:
    req = _req("a", 0, allocated=9, committed=6, tokens=5)
    assert release_end(req, SHAPE, PAGE) == 12
    assert release_end(SimpleNamespace(kv=None), shape_for_version("0.5.17"), PAGE) is None  # released
    assert release_end(req, shape_for_version("0.5.4.post1"), PAGE) is None  # no kv_allocated_len


def test_the_reach_is_twice_a_decode_steps_over_allocation_plus_a_page_from_the_server_args() -> None:
    args = SimpleNamespace(
        speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
    )  # fmt: skip
    assert reach_of(args, 16) == 32  # 2 x max(3, 4) + 16, in pages
    topk4 = SimpleNamespace(**{**vars(args), "speculative_eagle_topk": 4})
    assert reach_of(topk4, 16) == 272  # 2 x (4 branches x 2 whole pages) + a page
    assert reach_of(SimpleNamespace(speculative_algorithm=None), 16) == 32
    assert reach_of(None, 16) == TAIL_REACH


def test_a_page_past_the_release_end_in_no_set_is_named_with_its_request_when_the_deficit_covers_it() -> None:
    table = torch.zeros((2, WIDTH), dtype=torch.int32)
    table[0, :12] = torch.tensor([4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15])  # pages 1 - 3, released
    table[0, 12:16] = torch.tensor([20, 21, 22, 23])  # page 5: allocated, left out of kv_allocated_len
    live = LiveSet(holders=(_req("a", 0, allocated=9, committed=6, tokens=5),), waiting=(), chunked=None)
    spans = tails(live, SHAPE, PAGE, WIDTH, reach=8)
    assert spans == [Tail("a", 12, 20, 16)]
    seen = _seen(8, 1, 2, 3, 4, 6, 7)  # page 5 in no set
    found = unreleased(table, spans, seen, PAGE, 1, lost=PAGE)
    assert (found.ids, found.count, found.owners) == ((5,), 1, {5: ("a",)})
    assert unreleased(table, spans, seen, PAGE, 1, lost=None).ids == ()  # no deficit: not proven
    assert unreleased(table, spans, seen, PAGE, 1, lost=0).ids == ()


def test_stale_row_entries_that_are_free_in_the_tree_or_another_requests_are_ignored() -> None:
    table = torch.zeros((1, WIDTH), dtype=torch.int32)
    table[0, 4:16] = torch.arange(8, 20, dtype=torch.int32)  # pages 2 - 4: an earlier owner's
    live = LiveSet(holders=(_req("a", 0, allocated=3, committed=3, tokens=3),), waiting=(), chunked=None)
    found = unreleased(table, tails(live, SHAPE, PAGE, WIDTH), _seen(6, 1, 2, 3, 4), PAGE, 1, lost=64)
    assert found.ids == ()


def test_a_reserve_past_the_rows_end_is_named_where_the_flat_write_put_it_without_a_deficit() -> None:
    """S11: ``kv_allocated_len`` beyond the row's width; the engine's kernel wrote the slots into the
    next row's memory, and the release's slice stops at the row's end."""
    table = torch.zeros((2, WIDTH), dtype=torch.int32)
    table[0] = torch.arange(4, 20, dtype=torch.int32)  # pages 1 - 4, inside the row
    table[1, :8] = torch.arange(40, 48, dtype=torch.int32)  # pages 10, 11: written past row 0's end
    req = _req("a", 0, allocated=24, committed=14, tokens=14)
    live = LiveSet(holders=(req,), waiting=(), chunked=None)
    spans = tails(live, SHAPE, PAGE, WIDTH, reach=4)
    assert spans == [Tail("a", 16, 28, 16)]
    found = unreleased(table, spans, _seen(16, 1, 2, 3, 4), PAGE, 1, lost=None)
    assert (found.ids, found.owners) == ((10, 11), {10: ("a",), 11: ("a",)})


class _ChunkCache:
    """No tree (a PD decode rank's ``ChunkCache``): nothing to flatten, nothing protected."""

    root_node = None

    def protected_size(self) -> int:
        return 0

    def evictable_size(self) -> int:
        return 0


def test_the_census_reads_a_row_up_to_kv_allocated_len_not_to_the_page_end() -> None:
    """Past an unaligned ``kv_allocated_len`` the row's columns up to the page end were never
    written: a reused row holds its earlier owner's entries there, pages that may be free.  They
    are not the request's (the real 0.5.9 run of ``tests/sglang_real/check_spec_tail.py`` named such
    a page ``free_and_live`` before the census stopped at the written length)."""
    table = torch.zeros((2, WIDTH), dtype=torch.int32)
    table[0, :8] = torch.arange(4, 12, dtype=torch.int32)  # an earlier owner's pages 1 and 2
    table[0, :6] = torch.tensor([12, 13, 14, 15, 16, 17], dtype=torch.int32)  # pages 3, 4 (written to 6)
    alloc = SimpleNamespace(
        size=8 * PAGE, page_size=PAGE, free_pages=torch.tensor([1, 2, 5, 6, 7, 8]),
        release_pages=torch.empty(0, dtype=torch.int64),
    )  # fmt: skip
    sched = SimpleNamespace(
        token_to_kv_pool_allocator=alloc, req_to_token_pool=SimpleNamespace(req_to_token=table),
        tree_cache=_ChunkCache(),
    )  # fmt: skip
    live = LiveSet(holders=(_req("a", 0, allocated=6, committed=5, tokens=5),), waiting=(), chunked=None)
    reading = Reading()
    census = kv_census(sched, SHAPE, reading, live, idle=False, lost=PAGE)
    assert census is not None
    assert reading.failures == {}
    assert census.free_and_live == ()  # page 2 (columns 6, 7) is the earlier owner's, and free
    assert census.live == 2
    assert census.tripwires("h", 0) == ()


def _unreleased_tripwire(w: Watched) -> tuple[Tripwire, int] | None:
    for rank in w.cluster.schedulers:
        probe = probe_of(rank)
        snap = probe.latest if probe is not None else None
        for t in snap.tripwires if snap is not None else ():
            if t.kind is TripwireKind.UNRELEASED:
                return t, rank.dp_rank or 0
    return None


def test_an_unrecorded_paged_draft_allocation_is_named_with_its_request_before_the_release(
    tmp_path: Path,
) -> None:
    """The emulator's S10: a paged spec-decode over-allocation never reaches ``kv_allocated_len``.
    The census names the stranded pages with the running request that holds them; when that
    request is released the pages stay off the free list (the leak named beforehand)."""
    assert TripwireKind.UNRELEASED in LEAK_KINDS
    w = Watched(scenario_config("spec-stranded-tail-page", trigger="", epoch=EPOCH), tmp_path)
    assert w.run_until(lambda: _unreleased_tripwire(w) is not None, 3000)
    found = _unreleased_tripwire(w)
    assert found is not None
    trip, dp = found
    rank = w.cluster.schedulers[dp]
    assert "spec-stranded-tail-page" in w.struck
    (rid,) = trip.requests
    req = next(r for r in rank.running_batch.reqs if r.rid == rid)  # still running: before its release
    page = rank.page_size
    row = rank.req_to_token_pool.req_to_token[req.req_pool_idx].tolist()
    end = -(-req.kv_allocated_len // page) * page
    assert set(trip.slots) <= {int(x) // page for x in row[end:]}
    free = set(rank.token_to_kv_pool_allocator.free_pages.tolist())
    assert not set(trip.slots) & free
    assert w.run_until(lambda: req.finished() and req.req_pool_idx is None, 3000)
    assert not set(trip.slots) & set(rank.token_to_kv_pool_allocator.free_pages.tolist())  # stranded
    w.run_until(lambda: False, 50)
    leak = next(f for f in w.first_firing.values() if f.alert.name == "PoolwatchSlotLeak")
    assert f"Tripwire unreleased: 1 page of {page} slots" in leak.alert.annotations["description"]
    assert rid in leak.alert.annotations["description"]
