"""The cheap sample's incremental paths give the figures a from-scratch sample gives.

The waiting queue's copy-on-write Mamba holders are recalled between exact scans instead of
walking the queue; what did not change since the last sample (each holder's figures, the deduplicated
holders) is kept by identity (:mod:`poolwatch.probe.sglang.ledger`).  None of it may
change a figure.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from tests.probe.sglang.setups import BUSY

from poolwatch.conservation import gap
from poolwatch.model.rank import Pool
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.sglang import mamba_census as census
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from poolwatch.probe.sglang.footprint import _one
from poolwatch.probe.sglang.ledger import Ledger
from poolwatch.probe.sglang.requests import collect_live
from poolwatch.probe.sglang.shapes import SHAPES, HeldRule, shape_for_version
from poolwatch.probe.sglang.snapshot import take_sample
from poolwatch.probe.sglang.totals import Memo
from poolwatch.probe.sglang.waiting import WaitingHolders
from poolwatch_emulator.build import ModelShape
from poolwatch_emulator.cluster import Cluster
from poolwatch_emulator.cluster_config import ClusterConfig
from rigs.fakes.clock import FakeClock
from rigs.fakes.sglang import Rank

CONFIG = ProbeConfig(
    sample_interval_s=0.0,
    census_interval_s=60.0,
    serve=False,
    directory="/nonexistent-poolwatch-test-dir",
    release="0.5.4.post1",  # the fakes' attribute names
)
SHAPE = ModelShape(full_kv_tokens=3072, mamba_slots=48, max_running_requests=12, context_len=2048)


class CountingQueue(list[Any]):
    """A waiting queue that counts every walk over it (``len()`` is not a walk)."""

    walks = 0

    def __iter__(self) -> Iterator[Any]:
        CountingQueue.walks += 1
        return super().__iter__()

    def __getitem__(self, index: Any) -> Any:
        CountingQueue.walks += 1
        return super().__getitem__(index)


def probe_for(rank: Rank, clock: FakeClock) -> SglangProbe:
    return new_probe(SGLANG, rank.sched, CONFIG, environ={"POOLWATCH_WORKER": "w0"}, clock=clock, wall=clock)


def long_queue_rank(waiting: int) -> Rank:
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.running("a", origin=15, outputs=3, prefix=rank.cache(10, locked=True))
    rank.waiting("w-cow", cow=True)
    for i in range(waiting - 1):
        rank.waiting(f"w{i}", cow=False)
    rank.sched.waiting_queue = CountingQueue(rank.sched.waiting_queue)
    return rank


def test_a_9000_request_waiting_queue_is_not_walked_by_the_cheap_samples_after_the_first() -> None:
    rank, clock = long_queue_rank(9000), FakeClock()
    probe = probe_for(rank, clock)
    first = probe.sample_now()
    walks = CountingQueue.walks
    assert first is not None
    assert walks > 0  # the first sample scans the queue once
    for step in range(20):
        clock.advance(0.1)
        rank.sched.forward_ct = step  # the scheduler moves (a stalled one has its head read once)
        snap = probe.sample_now()
        assert snap is not None
        assert gap(snap.pools[Pool.MAMBA]) == 0
        assert snap.pools[Pool.MAMBA].held == 2  # the running request and the waiting COW holder
    assert CountingQueue.walks == walks


def test_a_stalled_9000_request_queue_has_its_head_read_once_per_stall_not_per_sample() -> None:
    rank, clock = long_queue_rank(9000), FakeClock()
    probe = probe_for(rank, clock)
    rank.sched.forward_ct = 0
    probe.sample_now()
    walks = CountingQueue.walks
    for _ in range(20):
        clock.advance(0.1)
        snap = probe.sample_now()
        assert snap is not None
        assert snap.progress is not None
    assert snap.progress.stalled_steps >= 1  # sample_now reads between the same two loop boundaries
    assert snap.progress.stalled_for(snap.taken_at) >= 1.9
    assert snap.progress.waiting == 9000
    assert snap.progress.head[:2] == ("w-cow", "w0")
    assert CountingQueue.walks == walks + 1  # the first eight, once, when the stall began


def test_a_waiting_request_taking_a_slot_between_scans_is_found_by_a_rescan_not_reported_as_a_gap() -> None:
    rank, clock = long_queue_rank(500), FakeClock()
    probe = probe_for(rank, clock)
    probe.sample_now()
    walks = CountingQueue.walks
    rank.sched.waiting_queue[-1].mamba_pool_idx = rank.mamba.take()  # considered, not admitted
    snap = probe.sample_now()
    assert snap is not None
    assert gap(snap.pools[Pool.MAMBA]) == 0
    assert snap.pools[Pool.MAMBA].held == 3
    assert CountingQueue.walks > walks  # the deficit sent it back to the queue once


def test_a_waiting_holder_dropped_with_its_slot_is_a_deficit_at_once() -> None:
    rank, clock = long_queue_rank(500), FakeClock()
    probe = probe_for(rank, clock)
    probe.sample_now()
    del rank.sched.waiting_queue[0]  # aborted; its COW slot is never given back (a leak)
    snap = probe.sample_now()
    assert snap is not None
    assert gap(snap.pools[Pool.MAMBA]) == 1


def test_a_leaked_waiting_holder_still_referenced_is_named_by_the_next_exact_scan() -> None:
    rank, clock = long_queue_rank(500), FakeClock()
    probe = probe_for(rank, clock)
    probe.sample_now()
    kept = rank.sched.waiting_queue.pop(0)  # aborted, leaked, and still referenced somewhere
    cheap = probe.sample_now()
    assert cheap is not None
    assert gap(cheap.pools[Pool.MAMBA]) == 0  # recalled: the leak waits for the next exact scan
    probe.on_idle("self_check_during_idle")  # SGLang's own idle check: always an exact scan
    snap = probe.latest
    assert snap is not None
    assert gap(snap.pools[Pool.MAMBA]) == 1
    assert kept.mamba_pool_idx is not None


def test_a_leaked_waiting_holder_still_referenced_is_named_within_one_census_interval() -> None:
    rank, clock = long_queue_rank(500), FakeClock()
    probe = probe_for(rank, clock)
    probe.sample_now()
    kept = rank.sched.waiting_queue.pop(0)
    clock.advance(CONFIG.census_interval_s - 1)
    assert gap(probe.sample_now().pools[Pool.MAMBA]) == 0  # type: ignore[union-attr]
    clock.advance(1)
    assert gap(probe.sample_now().pools[Pool.MAMBA]) == 1  # type: ignore[union-attr]
    assert kept.mamba_pool_idx is not None


def test_a_short_waiting_queue_is_scanned_on_every_sample() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.waiting("w", cow=False)
    tracker, reading = WaitingHolders(), Reading()
    for _ in range(3):
        collect_live(rank.sched, reading, "null", tracker=tracker, exact_waiting=False)
    assert tracker.scans == 3


def busy_cluster(version: str, **roles: int) -> Cluster:
    config = ClusterConfig(version=version, shape=SHAPE, workload=BUSY, chunked_prefill_size=128, **roles)
    return Cluster(replace(config, idle_check_strict=False))


UNIFIED = {"unified": 1, "prefill": 0, "decode": 0}


@pytest.mark.parametrize(
    ("version", "roles"),
    [
        ("0.5.4.post1", UNIFIED),
        ("0.5.9", UNIFIED),
        ("0.5.12", UNIFIED),
        ("0.5.12", {"prefill": 1, "decode": 1}),
    ],
)
def test_samples_kept_between_steps_match_from_scratch_samples_as_requests_join_leave_and_move(
    version: str, roles: dict[str, int]
) -> None:
    shape = shape_for_version(version)
    cluster = busy_cluster(version, **roles)
    # exact_below=0: recall even a short queue between exact scans
    kept = {id(s): (WaitingHolders(exact_below=0), Memo()) for s in cluster.schedulers}
    recalled_holders = 0
    for _ in range(150):
        cluster.step()
        for sched in cluster.schedulers:
            tracker, memo = kept[id(sched)]
            cheap = take_sample(sched, shape, Reading(), waiting=tracker, exact_waiting=False, memo=memo)
            fresh = take_sample(sched, shape, Reading())
            assert cheap.pools == fresh.pools
            if not cheap.live.waiting_exact and cheap.live.waiting:
                recalled_holders += 1
    if roles is UNIFIED:
        assert recalled_holders > 0  # the recall path really ran with waiting COW holders


@pytest.mark.parametrize("emulated", ["0.5.4.post1", "0.5.9", "0.5.12"])
def test_the_kept_totals_equal_the_per_request_rules_of_every_release_family(emulated: str) -> None:
    # the emulator's requests keep their lengths on the request: the families that read them in
    # ``req.kv`` (0.5.17's KV_LENGTHS: tests/probe/sglang/test_session_and_kv_layouts.py) are not theirs
    shapes = [s for s in SHAPES if s.held_rule not in (HeldRule.REQ_KV, HeldRule.KV_LENGTHS)]
    cluster = busy_cluster(emulated, unified=1, prefill=0, decode=0)
    ledgers = {s.family: {page: Ledger() for page in (1, 4)} for s in shapes}
    compared = 0
    for _ in range(120):
        cluster.step()
        sched = cluster.schedulers[0]
        for shape in shapes:  # each family's rules, read from the same requests
            live = collect_live(sched, Reading(), "null", shape=shape)
            for page in (1, 4):
                per_request = [_one(r, shape, page, live) for r in live.holders]
                expected = tuple(sum(t[i] for t in per_request) for i in range(3))
                rule = functools.partial(_one, shape=shape, page=page, live=live)
                got = ledgers[shape.family][page].totals(live.holders, live.chunked, shape, page, rule)
                assert got == expected
        compared += len(live.holders) > 1
    assert compared > 50


@pytest.mark.parametrize("emulated", ["0.5.4.post1", "0.5.9", "0.5.12"])
def test_the_c_speed_mamba_census_names_the_slots_the_per_request_census_names(emulated: str) -> None:
    shape = shape_for_version(emulated)
    cluster = busy_cluster(emulated, unified=1, prefill=0, decode=0)
    compared = 0
    for step in range(120):
        cluster.step()
        sched = cluster.schedulers[0]
        live = collect_live(sched, Reading(), "null", shape=shape)
        fast = census._single_slot_owners(live, shape)
        each = census._live_mamba_each(live, shape)
        assert fast is not None
        assert {rid: list(ids) for rid, ids in fast} == dict(each)
        if step % 10 == 0 and fast:  # as is, and with one slot held by two requests
            for owners in (fast, [*fast, ("twin", fast[0][1])]):
                free = [1, 1, 2]
                got = census.id_census(Pool.MAMBA, 48, 1, free, [], (), check_missing=True, owners=owners)
                general = [*owners, ("nothing", [])]  # an owner without a slot takes the general path
                assert got == census.id_census(
                    Pool.MAMBA, 48, 1, free, [], (), check_missing=True, owners=general
                )
        compared += len(fast) > 1
    assert compared > 50


def test_the_holders_are_the_last_samples_very_tuple_until_a_list_they_come_from_changes() -> None:
    shape = shape_for_version("0.5.4.post1")
    cluster = busy_cluster("0.5.4.post1", **UNIFIED)
    (sched,) = cluster.schedulers
    memo, tracker, last, renewed = Memo(), WaitingHolders(), None, 0
    for _ in range(150):
        cluster.step()
        first = take_sample(sched, shape, Reading(), waiting=tracker, exact_waiting=False, memo=memo)
        again = take_sample(sched, shape, Reading(), waiting=tracker, exact_waiting=False, memo=memo)
        fresh = take_sample(sched, shape, Reading())
        assert again.live.holders is first.live.holders  # nothing moved: kept, not rebuilt
        assert list(first.live.holders) == list(fresh.live.holders)
        assert first.pools == again.pools == fresh.pools
        renewed += first.live.holders is not last
        last = first.live.holders
    assert renewed > 10  # requests joined, left and moved: each time a new tuple, checked above


def test_a_request_finishing_or_losing_its_row_under_kept_holders_is_picked_up() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    a = rank.running("a", origin=15, outputs=3, prefix=rank.cache(10, locked=True))
    rank.running("b", origin=9, outputs=2)
    shape, memo, tracker = shape_for_version("0.5.4.post1"), Memo(), WaitingHolders()

    def both() -> tuple[Any, Any]:
        cheap = take_sample(rank.sched, shape, Reading(), waiting=tracker, exact_waiting=False, memo=memo)
        return cheap, take_sample(rank.sched, shape, Reading())

    before, _ = both()
    a.finished_reason = "length"  # finished in place: the same request objects, the same lists
    cheap, fresh = both()
    assert cheap.live.holders is before.live.holders
    assert cheap.pools == fresh.pools != before.pools
    a.finished_reason, a.req_pool_idx = None, None  # the row pointer cleared in place
    cheap, fresh = both()
    assert cheap.live.holders is before.live.holders
    assert cheap.pools == fresh.pools != before.pools


def test_a_decode_steps_shared_batch_is_read_once_and_a_request_joining_it_in_place_is_picked_up() -> None:
    rank = Rank(kv=64, mamba=8, rows=4)
    rank.running("a", origin=5, outputs=2)
    rank.running("b", origin=7, outputs=3)
    assert rank.sched.last_batch is rank.sched.running_batch  # a decode step
    shape, memo, tracker = shape_for_version("0.5.4.post1"), Memo(), WaitingHolders()

    def cheap() -> Any:
        return take_sample(rank.sched, shape, Reading(), waiting=tracker, exact_waiting=False, memo=memo)

    before = cheap()
    assert [r.rid for r in before.live.holders] == ["a", "b"]  # each once
    rank.running("c", origin=4, outputs=2)  # appended to the very list both batches share
    after, fresh = cheap(), take_sample(rank.sched, shape, Reading())
    assert [r.rid for r in after.live.holders] == ["a", "b", "c"]
    assert after.pools == fresh.pools != before.pools
    assert after.pools[Pool.REQ].held == 3
    assert gap(after.pools[Pool.FULL]) == 0
