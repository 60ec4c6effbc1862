"""What today's probe and detector see of the classes that keep the books balanced (issue 39), on
the emulator through the real in-process probe.

The conservation gap is honest about the ids, so for a stranded hold, a lock without its locker
and the encoder cache's stall it stays 0 and nothing of the gap family pages: the snapshot shows
the capacity as held or protected, and the queue that holds it.  For a counter bug the gap is the
counter's lie while no id is named.  The detectors for these classes (each fault's
``FaultInfo.pages``) are being built beside this; a page test per class goes with each.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.emulator.emu_census import full_census

from poolwatch.conservation import gap
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.lifecycle import probe_of
from poolwatch_emulator import FAULTS, truth
from poolwatch_emulator.catalogue import COUNTER, FREED_IN_FLIGHT, STALL, STRANDED
from poolwatch_emulator.scenarios import scenario_config
from poolwatch_emulator.scheduler import Scheduler
from rigs.emulated.watched import EPOCH, Watched

GAP_PAGES = ("PoolwatchDoubleFree", "PoolwatchSlotLeak", "PoolwatchHostPoolGap")


def _watch(fault: str, directory: Path, *, guard: bool = False, **overrides: object) -> Watched:
    config = scenario_config(fault, epoch=EPOCH, **overrides)  # type: ignore[arg-type]
    return Watched(config, directory, guard=guard)


def _snap(rank: Scheduler) -> Snapshot:
    probe = probe_of(rank)
    assert probe is not None
    assert probe.latest is not None
    return probe.latest


def _gap_pages(w: Watched) -> list[str]:
    return [f.alert.name for f in w.first_firing.values() if f.alert.name in GAP_PAGES]


def _balanced(snap: Snapshot) -> None:
    assert {p: gap(a) for p, a in snap.pools.items()} == dict.fromkeys(snap.pools, 0)
    assert snap.tripwires == ()


COUNTER_CASES = [
    pytest.param("decode-offload-protected-drift", "protected_size_", marks=pytest.mark.slow),
    ("radix-evictable-overcount", "full_evictable_size_"),
]


@pytest.mark.parametrize(("fault", "counter"), COUNTER_CASES)
def test_a_counter_bug_shows_as_the_full_gap_with_no_id_named(
    fault: str, counter: str, tmp_path: Path
) -> None:
    """S12 / #35270: the probe's census re-counts the lying counter from the ids and names no slot --
    every id is where it belongs: the pool is judged from the census (gap 0) and the counter is a
    witness of its own (which counter, by how much), paged as PoolwatchCounterDrift, never as a
    double free or a leak."""
    assert FAULTS[fault].pages == COUNTER
    w = _watch(fault, tmp_path)
    assert w.run_until(lambda: fault in w.struck, 2000)
    w.run_until(lambda: False, 3)
    rank = next(r for r in w.cluster.schedulers if r.faults.fired[fault])
    drift = truth.counter_drift(rank)[counter]
    snap = _snap(rank)
    assert gap(snap.pools[Pool.FULL]) == 0
    assert snap.tripwires == ()
    assert sum(x.drift for x in snap.witnesses if x.pool is Pool.FULL) == drift
    assert full_census(rank).clean
    assert _gap_pages(w) == []


STRANDED_CASES = [
    # (fault, the role it strands on, the probe's queue that holds the owners)
    ("pd-prefill-stranded-kv", "prefill", "prefill_inflight"),
    ("pd-decode-stranded-kv", "decode", "decode_transfer"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "role", "queue"), STRANDED_CASES)
def test_a_stranded_hold_is_balanced_and_unpaged_its_owners_sit_in_a_queue(
    fault: str, role: str, queue: str, tmp_path: Path
) -> None:
    """V05 / S20, V02, PR #11656: the KV of owners that no longer progress.  Should page: the
    stranded-hold detector (held capacity and the oldest holder's age, owners named)."""
    assert FAULTS[fault].pages == STRANDED
    w = _watch(fault, tmp_path)
    rank = w.cluster.by_role(role)[0].ranks[0]
    assert w.run_until(lambda: len(truth.stranded(rank)) >= 2, 3000)
    w.run_until(lambda: False, 3)
    holds = truth.stranded(rank)
    snap = _snap(rank)
    _balanced(snap)
    assert snap.queues[queue] >= len(holds)  # the probe counts the owners, and nothing tells them apart
    assert _gap_pages(w) == []


@pytest.mark.slow
def test_finished_requests_parked_for_their_offload_leave_the_full_pool_and_rows_coarse(
    tmp_path: Path,
) -> None:
    """PR #11656 (0.5.4.post1's decode offload under retraction).  The requests parked in
    ``decode_offload_manager.ongoing_offload`` hold KV and rows no queue the probe reads lists (and
    0.5.4's chunk cache still counts their prefix protected), so while any is parked the full pool
    and the request rows are coarse: no gap, so no slot-leak page naming nothing that leaked (it
    once paged so).  The queue is counted; the stranded-hold page for them is still to come (the
    emulator's ``pages`` says so)."""
    fault = "decode-offload-acks-behind-retract"
    assert FAULTS[fault].pages == STRANDED
    w = _watch(fault, tmp_path)
    rank = w.cluster.by_role("decode")[0].ranks[0]
    assert w.run_until(lambda: len(truth.stranded(rank)) >= 2, 3000)
    w.run_until(lambda: False, 3)
    holds = truth.stranded(rank)
    parked = len(rank.decode_offload_manager.ongoing_offload)
    snap = _snap(rank)
    assert snap.queues["decode_offload"] == parked >= len(holds)
    assert gap(snap.pools[Pool.FULL]) is None
    assert gap(snap.pools[Pool.REQ]) is None
    assert snap.tripwires == ()
    assert _gap_pages(w) == []
    assert full_census(rank).clean  # the emulator's census counts them: every id is owned once


@pytest.mark.slow
def test_write_locks_left_by_undrained_acks_show_as_protected_and_nothing_pages(tmp_path: Path) -> None:
    """S14: the written nodes stay locked while only decode runs.  Should page: stranded holds
    (tree locks with no live locker)."""
    fault = "hicache-write-acks-undrained"
    assert FAULTS[fault].pages == STRANDED
    w = _watch(fault, tmp_path)
    rank = w.cluster.schedulers[0]
    assert w.run_until(lambda: len(truth.stranded(rank)) >= 2, 3000)
    w.run_until(lambda: False, 2)
    locked = sum(h.tokens for h in truth.stranded(rank))
    snap = _snap(rank)
    _balanced(snap)
    protected = snap.pools[Pool.FULL].protected
    assert protected is not None
    assert protected >= locked
    assert _gap_pages(w) == []


@pytest.mark.slow
def test_an_unlock_without_its_lock_frees_a_live_prefix_unseen_by_the_gap(tmp_path: Path) -> None:
    """O12 / S13's class: a live request's prefix becomes evictable and is freed under it; the
    books balance at every sample, nothing pages, and the engine's own signal is a failed
    allocation.  Should page: freed while in flight."""
    fault = "hicache-unlock-without-lock"
    assert FAULTS[fault].pages == FREED_IN_FLIGHT
    w = _watch(fault, tmp_path)
    rank = w.cluster.schedulers[0]
    assert w.run_until(lambda: truth.prefix_freed(rank) > 0 or bool(w.cluster.crashed), 3000)
    assert truth.prefix_freed(rank) > 0
    assert truth.lock_deficit(rank) > 0
    _balanced(_snap(rank))
    assert _gap_pages(w) == []


@pytest.mark.slow
def test_an_encoder_cache_stall_leaves_the_kv_pools_balanced_and_unpaged(tmp_path: Path) -> None:
    """V16: requests wait, the chunked one cannot get its next image, KV is free.  The probe reads
    no encoder cache.  Should page: the admission stall (and the encoder cache, unwatched today)."""
    fault = "encoder-waiting-holds-entries"
    assert FAULTS[fault].pages == STALL
    w = _watch(fault, tmp_path)
    rank = w.cluster.schedulers[0]
    assert w.run_until(lambda: not rank.running_batch.reqs and len(rank.waiting_queue) > 10, 3000)
    w.run_until(lambda: False, 20)
    snap = _snap(rank)
    _balanced(snap)
    assert snap.queues["running"] == 0
    assert snap.queues["waiting"] > 10
    full = snap.pools[Pool.FULL]
    assert (full.available or 0) + (full.evictable or 0) > len(rank.waiting_queue[0].origin_input_ids)
    assert "encoder" not in {p.value for p in snap.pools}
    assert _gap_pages(w) == []


SPEC_CLEAN = [
    ("spec-stranded-tail-page", {}),  # EAGLE, page 16, 0.5.9
    ("spec-row-clamped-release", {}),  # topk 2, 8 drafts, requests to the context's end
    ("spec-swa-frontier-off-by-one", {}),  # SWA + EAGLE, 0.5.12
    ("spec-stranded-tail-page", {"prefill": 1, "decode": 1, "unified": 0}),  # PD
]


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "overrides"), SPEC_CLEAN)
def test_speculative_decoding_without_a_fault_balances_at_every_sample_and_nothing_fires(
    fault: str, overrides: dict[str, int], tmp_path: Path
) -> None:
    """The draft reserve past the committed KV is the request's own (``kv_allocated_len``): the
    probe counts it, every sample balances, no tripwire, no alert; guard (on) refuses and repairs
    nothing."""
    w = _watch(fault, tmp_path, guard=True, faults=(), **overrides)
    for _ in range(600):
        w.step()
        for rank in w.cluster.schedulers:
            probe = probe_of(rank)
            if probe is not None and probe.latest is not None:
                _balanced(probe.latest)
                assert probe.latest.repairs == ()
    probes = [p for rank in w.cluster.schedulers if (p := probe_of(rank)) is not None]
    assert sum(p.refuser.refused for p in probes if p.refuser is not None) == 0
    assert w.first_firing == {}
    assert not w.cluster.crashed
    assert sum(r.spec_num_accepted_tokens for r in w.cluster.schedulers) > 0
