"""The probe's exact accounts, read from small fakes with SGLang 0.5.4's attribute names."""

from __future__ import annotations

from dataclasses import replace

import torch

from poolwatch.conservation import Balance, assess_snapshot, gap
from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Exactness, Phase, Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.probe import new_probe
from poolwatch.probe.sglang.engine import SGLANG
from poolwatch.probe.sglang.extras import SglangProbe
from rigs.fakes.clock import FakeClock
from rigs.fakes.sglang import Rank

CONFIG = ProbeConfig(
    sample_interval_s=0.0, census_interval_s=0.0, serve=False, directory="/nonexistent-poolwatch-test-dir"
)


def probe_for(rank: Rank, version: str = "0.5.4.post1", clock: FakeClock | None = None) -> SglangProbe:
    clock = clock or FakeClock()
    config = replace(CONFIG, release=version)
    return new_probe(SGLANG, rank.sched, config, environ={"POOLWATCH_WORKER": "w0"}, clock=clock, wall=clock)


def busy_rank() -> Rank:
    rank = Rank(kv=64, mamba=8, rows=4)
    shared = rank.cache(10, locked=True)  # a prefix the running request locks
    rank.cache(6)  # an unlocked (evictable) prefix
    rank.running("a", origin=15, outputs=3, prefix=shared)
    rank.running("b", origin=5, outputs=1)
    rank.waiting("w-cow", cow=True)
    rank.waiting("w-plain", cow=False)
    return rank


def gaps(snap: Snapshot) -> dict[Pool, int | None]:
    return {pool: gap(account) for pool, account in snap.pools.items()}


def test_a_busy_rank_without_faults_balances_every_pool_exactly() -> None:
    snap = probe_for(busy_rank()).sample_now("recv_requests")
    assert snap is not None
    assert snap.phase is Phase.BUSY
    assert gaps(snap) == {Pool.FULL: 0, Pool.MAMBA: 0, Pool.REQ: 0}
    full = snap.pools[Pool.FULL]
    assert (full.size, full.evictable, full.protected, full.held) == (64, 6, 10, 5 + 7)
    mamba = snap.pools[Pool.MAMBA]
    assert (mamba.evictable, mamba.protected, mamba.held) == (1, 1, 3)  # two running + one COW slot
    assert all(a.exactness is Exactness.EXACT and a.unreadable == () for a in snap.pools.values())


def test_the_snapshot_names_the_rank_its_queues_and_the_probe_health() -> None:
    snap = probe_for(busy_rank()).sample_now()
    assert snap is not None
    assert snap.worker.key == "w0/dp0-tp0-pp0"
    assert snap.worker.release == "0.5.4.post1"
    assert snap.queues["running"] == 2
    assert snap.queues["waiting"] == 2
    assert snap.probe is not None
    assert snap.probe.samples_total == 1
    assert snap.probe.errors_total == 0
    assert snap.source == "probe"
    assert snap.idle_check_strict is True


def test_a_rank_with_nothing_queued_is_idle_and_balanced() -> None:
    rank = Rank()
    rank.cache(12)
    snap = probe_for(rank).sample_now("self_check_during_idle")
    assert snap is not None
    assert snap.phase is Phase.IDLE
    assert all(f.balance is Balance.BALANCED for f in assess_snapshot(snap))


def test_waiting_requests_keep_the_rank_busy_so_their_cow_slots_are_not_a_leak() -> None:
    rank = Rank()
    rank.waiting("w", cow=True)  # SGLang <= 0.5.10 would run its idle check here (no batch)
    snap = probe_for(rank).sample_now("self_check_during_idle")
    assert snap is not None
    assert snap.phase is Phase.BUSY
    assert gap(snap.pools[Pool.MAMBA]) == 0


def seed_rank() -> tuple[Rank, torch.Tensor]:
    """PD prefill, chunk boundary of 0.5.4.post1: the row was freed with free_mamba_cache=True."""
    rank = Rank(kv=64, mamba=8, rows=4)
    req = rank.chunked("long", origin=40, chunk=16)
    assert req.mamba_pool_idx is not None
    assert req.req_pool_idx is not None
    rank.mamba.free(req.mamba_pool_idx.reshape(1))  # the #12994 double free
    return rank, req.mamba_pool_idx


def test_the_seed_double_free_is_a_mamba_surplus_of_one_while_the_full_pool_balances() -> None:
    rank, _ = seed_rank()
    snap = probe_for(rank).sample_now("recv_requests")
    assert snap is not None
    assert gaps(snap)[Pool.MAMBA] == -1
    assert gaps(snap)[Pool.FULL] == 0
    assert snap.worker.role.value == "prefill"


def test_the_chunk_tripwire_names_the_slot_and_the_hook_right_after_process_prefill_chunk() -> None:
    rank, slot = seed_rank()
    probe = probe_for(rank)
    probe.seq = 7
    probe.after_prefill_chunk("process_prefill_chunk")
    snap = probe.latest
    assert snap is not None
    (wire,) = snap.tripwires
    assert (wire.kind, wire.pool, wire.slots) == (TripwireKind.FREE_AND_LIVE, Pool.MAMBA, (int(slot),))
    assert (wire.first_seen_hook, wire.seq) == ("process_prefill_chunk", 7)


def test_a_tripwire_keeps_its_first_sighting_in_later_snapshots() -> None:
    rank, _ = seed_rank()
    probe = probe_for(rank)
    probe.after_prefill_chunk("process_prefill_chunk")
    probe.on_loop_boundary("recv_requests")
    probe.after_prefill_chunk("process_prefill_chunk")
    snap = probe.latest
    assert snap is not None
    assert [(t.first_seen_hook, t.seq) for t in snap.tripwires] == [("process_prefill_chunk", 0)]


def test_a_second_free_of_the_same_slot_is_a_free_list_duplicate() -> None:
    rank, slot = seed_rank()
    rank.mamba.free(slot.reshape(1))
    probe = probe_for(rank)
    probe.after_prefill_chunk("process_prefill_chunk")
    assert probe.latest is not None
    kinds = {t.kind for t in probe.latest.tripwires}
    assert kinds == {TripwireKind.FREE_AND_LIVE, TripwireKind.FREE_DUPLICATE, TripwireKind.OVER_SIZE}


def test_a_fault_free_run_of_boundaries_keeps_the_gap_at_zero_at_every_sample() -> None:
    rank = busy_rank()
    probe = probe_for(rank)
    seen = []
    for _ in range(5):
        probe.on_loop_boundary("recv_requests")
        assert probe.latest is not None
        seen.append(gaps(probe.latest))
    assert seen == [{Pool.FULL: 0, Pool.MAMBA: 0, Pool.REQ: 0}] * 5
    assert probe.latest is not None
    assert probe.latest.seq == 5


def test_0_5_4_overlap_scheduling_makes_the_busy_full_held_unreadable_rather_than_wrong() -> None:
    rank = busy_rank()
    rank.sched.enable_overlap = True
    snap = probe_for(rank).sample_now()
    assert snap is not None
    assert snap.pools[Pool.FULL].held is None
    assert "held" in snap.pools[Pool.FULL].unreadable
    assert gap(snap.pools[Pool.MAMBA]) == 0
