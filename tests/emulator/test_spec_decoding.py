"""EAGLE speculative decoding with spec v2's books (:mod:`poolwatch_emulator.spec`): the draft
reserve is allocated ahead into ``kv_allocated_len``, the verify step commits the accepted tokens,
the rejected drafts' slots stay with the request for the next step, and the release frees
everything past the committed pages.  Without a fault every pool balances and every page id is
owned exactly once at every loop boundary."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.emulator.emu_census import full_census
from tests.emulator.emu_ledger import imbalances, live_requests
from tests.emulator.emu_scenarios import HEAVY, PAGED, PLAIN, SWA, cluster

from poolwatch_emulator import Cluster, ModelShape
from poolwatch_emulator.req import Req
from poolwatch_emulator.spec import SpecConfig, ceil_page

EAGLE = SpecConfig()  # 3 steps, topk 1, 4 draft tokens
WIDE = SpecConfig(num_steps=5, eagle_topk=2, num_draft_tokens=8)  # topk > 1: page size 1 only

CASES = [
    ("0.5.9", False, PLAIN, WIDE),
    ("0.5.9", False, PAGED, EAGLE),
    ("0.5.12", True, PAGED, EAGLE),
    ("0.5.12", False, SWA, EAGLE),
]


def _spec_cluster(version: str, pd: bool, shape: ModelShape, spec: SpecConfig, **kw: object) -> Cluster:
    return cluster(version, pd=pd, shape=shape, speculative=spec, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("version", "pd", "shape", "spec"), CASES)
def test_with_speculative_decoding_every_pool_balances_and_every_id_is_owned_once(
    version: str, pd: bool, shape: ModelShape, spec: SpecConfig
) -> None:
    c = _spec_cluster(version, pd, shape, spec, seed=3)
    ahead = 0
    for i in range(360):
        c.step()
        assert not c.crashed, [w.crash_message for w in c.crashed]
        assert not imbalances(c), f"step {c.steps}: {imbalances(c)}"
        for r in c.schedulers:
            assert i % 6 or full_census(r).clean, f"step {c.steps}: {full_census(r)}"
            live = live_requests(r)
            assert all(q.kv_allocated_len >= q.kv_committed_len for q in live)
            ahead += sum(1 for q in live if q.kv_allocated_len > q.kv_committed_len)
    assert ahead > 0  # the reserve was allocated ahead of the committed KV
    ranks = c.schedulers
    assert sum(r.emu_finished_total for r in ranks) > 10
    assert sum(r.spec_num_accepted_tokens for r in ranks) > 0  # drafts were accepted
    assert sum(r.spec_num_forward_ct for r in ranks) > 0


def test_the_reserve_is_allocated_ahead_and_rejected_drafts_keep_their_slots_for_the_next_step() -> None:
    c = _spec_cluster("0.5.9", False, PLAIN, EAGLE, seed=5, workload=replace(HEAVY, abort_fraction=0.0))
    r = c.schedulers[0]
    reserve = 2 * EAGLE.alloc_len_per_decode()

    def long_way_to_go(q: Req) -> bool:
        return len(q.output_ids) > 3 and q.max_new_tokens - len(q.output_ids) > 2 * EAGLE.num_draft_tokens

    assert c.run_until(lambda: any(long_way_to_go(q) for q in r.running_batch.reqs), 2000)
    q = next(q for q in r.running_batch.reqs if long_way_to_go(q))
    table = r.req_to_token_pool.req_to_token
    assert q.kv_committed_len < q.kv_allocated_len <= q.kv_committed_len + reserve
    slots = table[q.req_pool_idx, : q.kv_allocated_len].tolist()
    committed, allocated = q.kv_committed_len, q.kv_allocated_len
    c.step()
    assert not q.finished()
    accepted = q.kv_committed_len - committed
    assert 1 <= accepted <= EAGLE.num_draft_tokens
    # the slots allocated ahead are kept: the next top-up only adds what the accepted tokens used
    assert table[q.req_pool_idx, :allocated].tolist() == slots
    assert q.kv_allocated_len == committed + reserve  # topped up from the committed KV, not past it


def test_a_finished_request_gives_back_its_draft_reserve() -> None:
    workload = replace(HEAVY, rate=2.0, gap_s=60.0, burst_s=10.0, output_median=40, abort_fraction=0.0)
    c = _spec_cluster("0.5.9", False, PAGED, EAGLE, seed=9, workload=workload)
    c.run_for(10.0)
    c.drain(abort_queued=True)
    r = c.schedulers[0]
    assert c.run_until(lambda: not live_requests(r) and not r.waiting_queue, 4000)
    alloc = r.token_to_kv_pool_allocator
    assert alloc.available_size() + r.tree_cache.evictable_size() == alloc.size
    assert r.tree_cache.protected_size() == 0
    assert full_census(r).clean
    assert r.emu_finished_total > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"version": "0.5.4.post1"}, "0.5.4.post1 keeps no kv_allocated_len"),
        ({"version": "0.5.9", "shape": PAGED, "speculative": WIDE}, "topk > 1 with page_size > 1"),
        ({"version": "0.5.9", "speculative": SpecConfig(accept_rate=1.5)}, r"accept_rate in \[0, 1\]"),
    ],
)
def test_a_speculative_setting_sglang_refuses_is_a_clear_error(
    kwargs: dict[str, object], message: str
) -> None:
    settings: dict[str, object] = {"pd": False, "shape": PLAIN, "speculative": EAGLE, **kwargs}
    with pytest.raises(ValueError, match=message):
        cluster(**settings)  # type: ignore[arg-type]


def test_the_row_is_as_wide_as_the_fix_of_pr_26972_sizes_it() -> None:
    c = _spec_cluster("0.5.9", False, PLAIN, WIDE)
    r = c.schedulers[0]
    width = r.req_to_token_pool.req_to_token.shape[1]
    assert width == PLAIN.context_len + WIDE.row_headroom(PLAIN.page_size)
    assert width >= PLAIN.context_len + 2 * WIDE.alloc_len_per_decode()
    assert r.tree_cache.emu_narrow_row == PLAIN.context_len + 4 + WIDE.num_draft_tokens
    assert ceil_page(17, 16) == 32
