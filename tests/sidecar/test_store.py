from __future__ import annotations

from dataclasses import replace

import pytest

from poolwatch.errors import Reason
from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Exactness, IncidentKind, Pool, PoolAccount
from poolwatch.model.snapshot import Incident, Snapshot
from poolwatch.sidecar.store import SnapshotStore
from rigs.fakes.clock import FakeClock


def test_the_latest_snapshot_per_rank_is_kept(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    later = replace(seed_snapshot, seq=seed_snapshot.seq + 1, taken_at=seed_snapshot.taken_at + 1)
    assert store.put(seed_snapshot)
    assert store.put(later)
    assert store.latest() == [later]
    assert store.history(later.worker.key) == [seed_snapshot, later]


def test_a_duplicate_or_older_snapshot_is_ignored(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    store.put(seed_snapshot)
    older = replace(seed_snapshot, seq=seed_snapshot.seq - 5, taken_at=seed_snapshot.taken_at - 5)
    assert not store.put(seed_snapshot)
    assert not store.put(older)
    assert store.history(seed_snapshot.worker.key) == [seed_snapshot]


def test_a_restarted_scheduler_starts_a_fresh_history(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    store.put(seed_snapshot)
    reborn = replace(seed_snapshot, seq=1, taken_at=seed_snapshot.taken_at + 3, boot_id="second-boot")
    assert store.put(reborn)
    assert store.history(seed_snapshot.worker.key) == [reborn]


def test_history_is_bounded(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore(history=3)
    for i in range(10):
        store.put(replace(seed_snapshot, seq=i, taken_at=float(i)))
    assert [s.seq for s in store.history(seed_snapshot.worker.key)] == [7, 8, 9]


def _rank(snap: Snapshot, tp: int) -> Snapshot:
    return replace(snap, worker=replace(snap.worker, tp_rank=tp))


def test_many_ranks_share_the_history_budget_and_keep_their_newest(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore(history=8, history_budget=12)
    for i in range(10):  # one rank alone keeps its whole history
        store.put(replace(seed_snapshot, seq=i, taken_at=float(i)))
    assert [s.seq for s in store.history(seed_snapshot.worker.key)] == list(range(2, 10))
    for tp in (1, 2, 3):  # four ranks: 12 // 4 = 3 each, the newest three of the first one kept
        store.put(_rank(seed_snapshot, tp))
    for i in range(10, 12):
        store.put(replace(seed_snapshot, seq=i, taken_at=float(i)))
    assert store.history_depth() == 3
    assert [s.seq for s in store.history(seed_snapshot.worker.key)] == [9, 10, 11]
    assert sum(len(store.history(_rank(seed_snapshot, tp).worker.key)) for tp in range(4)) <= 12


def test_the_budget_never_drops_the_latest_and_grows_back_when_ranks_go(seed_snapshot: Snapshot) -> None:
    clock = FakeClock(1000.0)
    store = SnapshotStore(history=4, history_budget=2, clock=clock)
    for tp in range(5):  # more ranks than the budget: each still keeps its latest
        store.put(_rank(seed_snapshot, tp))
    assert store.history_depth() == 1
    assert len(store.latest()) == 5
    clock.advance(60)
    store.put(replace(seed_snapshot, seq=seed_snapshot.seq + 1, taken_at=seed_snapshot.taken_at + 1))
    assert len(store.forget_silent(before=1030.0)) == 4
    assert store.history_depth() == 2


def test_listeners_see_every_accepted_snapshot(seed_snapshot: Snapshot) -> None:
    seen: list[int] = []
    store = SnapshotStore(on_snapshot=lambda s: seen.append(s.seq))
    store.put(seed_snapshot)
    store.put(seed_snapshot)
    assert seen == [seed_snapshot.seq]


def test_incidents_are_counted_per_rank(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    crash = Incident(IncidentKind.SCHEDULER_EXCEPTION, "Scheduler hit an exception", 1.0)
    store.put(replace(seed_snapshot, incidents=(crash,)))
    store.put(replace(seed_snapshot, seq=seed_snapshot.seq + 1, incidents=(crash,)))
    assert store.incident_counts(seed_snapshot.worker.key)[IncidentKind.SCHEDULER_EXCEPTION] == 2


def test_target_health_counts_failures_by_reason_and_keeps_the_last_success() -> None:
    store = SnapshotStore()
    store.record_success("probe:a", "probe", 0.01, at=100.0)
    store.record_failure("probe:a", "probe", 2.0, Reason.TIMEOUT, "no answer")
    store.record_failure("probe:a", "probe", 0.1, Reason.SCHEMA, "pools: expected an object")
    (t,) = store.targets()
    assert (t.up, t.scrapes, t.last_success_at, t.last_error) == (
        False,
        3,
        100.0,
        "pools: expected an object",
    )
    assert dict(t.errors) == {Reason.TIMEOUT: 1, Reason.SCHEMA: 1}
    store.forget_targets([])
    assert store.targets() == []


def test_history_must_hold_something() -> None:
    with pytest.raises(ValueError, match="history"):
        SnapshotStore(history=0)
    with pytest.raises(ValueError, match="history_budget"):
        SnapshotStore(history_budget=0)


def coarse(snap: Snapshot, taken_at: float, source: str = "sglang-metrics") -> Snapshot:
    """The same rank as SGLang's /metrics or log sees it: used counts only, no boot id."""
    pools = {
        p: PoolAccount(p, a.size, a.available, a.evictable, exactness=Exactness.COARSE)
        for p, a in snap.pools.items()
    }
    return replace(snap, source=source, pools=pools, taken_at=taken_at, seq=1, boot_id="", probe=None)


def test_coarse_figures_of_the_same_moment_never_hide_the_probes_exact_ones(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    probe = replace(seed_snapshot, source="probe")
    for i in range(37):  # one-second scrapes of both sources, interleaved
        t = seed_snapshot.taken_at + i
        store.put(replace(probe, seq=seed_snapshot.seq + i, taken_at=t))
        store.put(replace(coarse(seed_snapshot, t + 0.5), seq=i + 1))
        (view,) = store.latest()
        assert view.source == "probe"
    assert [s.source for s in store.sources(seed_snapshot.worker.key)] == ["probe", "sglang-metrics"]


def test_a_silent_probe_gives_way_to_sglangs_own_figures(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore(fresh_within=10.0)
    store.put(seed_snapshot)
    store.put(coarse(seed_snapshot, seed_snapshot.taken_at + 11))
    assert store.get(seed_snapshot.worker.key).source == "sglang-metrics"  # type: ignore[union-attr]


def test_incidents_of_every_source_and_boot_add_up_and_never_go_back(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    crash = Incident(IncidentKind.SCHEDULER_EXCEPTION, "Scheduler hit an exception", 1.0)
    store.put(replace(coarse(seed_snapshot, 5.0, "sglang-log"), incidents=(crash,)))
    store.put(seed_snapshot)
    store.put(replace(seed_snapshot, boot_id="second-boot", seq=1, taken_at=seed_snapshot.taken_at + 9))
    store.put(coarse(seed_snapshot, 6.0))
    assert store.incident_counts(seed_snapshot.worker.key) == {IncidentKind.SCHEDULER_EXCEPTION: 1}


def test_a_rank_no_source_reports_any_more_is_forgotten_with_its_history(seed_snapshot: Snapshot) -> None:
    clock = FakeClock(1000.0)
    store = SnapshotStore(clock=clock)
    other = replace(seed_snapshot, worker=replace(seed_snapshot.worker, tp_rank=1))
    store.put(seed_snapshot)
    clock.advance(50)
    store.put(other)
    store.put(other)  # a duplicate still says the rank is there
    assert store.forget_silent(before=1010.0) == [seed_snapshot.worker.key]
    assert [s.worker.key for s in store.latest()] == [other.worker.key]
    assert store.history(seed_snapshot.worker.key) == []
    assert store.incident_counts(seed_snapshot.worker.key) == {}
    assert len(store) == 1


def test_tp_peers_counts_the_ranks_of_a_worker_that_share_its_dp_and_pp_rank(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    for dp, tp in ((0, 0), (0, 1), (1, 0)):
        worker = replace(seed_snapshot.worker, worker="prefill-0", dp_rank=dp, tp_rank=tp)
        store.put(replace(seed_snapshot, worker=worker))
    assert store.tp_peers({"worker": "prefill-0", "dp_rank": "0", "pp_rank": "0", "tp_rank": "1"}) == 2
    assert store.tp_peers({"worker": "prefill-0", "dp_rank": "1", "pp_rank": "0"}) == 1
    assert store.tp_peers({"worker": "decode-0", "dp_rank": "0", "pp_rank": "0"}) == 1  # unknown: itself


def test_a_final_snapshot_or_a_new_finding_of_the_held_sample_is_kept(seed_snapshot: Snapshot) -> None:
    """vLLM's free-time proof amends the last sample (its clock, a new tripwire), published again
    and written as the rank's final snapshot when EngineCore is about to die: neither is a duplicate
    of the sample the store already holds (a busy bench_page run lost its page this way)."""
    found = (Tripwire(TripwireKind.NEGATIVE_REF, Pool.FULL, (1, 2, 3), "free_blocks", seed_snapshot.seq),)
    store = SnapshotStore()
    sample = replace(seed_snapshot, tripwires=(), final=False)
    proof = replace(sample, tripwires=found)
    final = replace(proof, final=True)
    assert store.put(sample)
    assert store.put(proof)  # published again mid-step, with the finding
    assert not store.put(proof)  # delivered twice
    assert store.put(final)  # the last word, read from the rank's final file
    assert not store.put(final)
    assert not store.put(sample)  # the sample before the finding, delivered late
    assert store.latest() == [final]
    fresh = SnapshotStore()
    assert fresh.put(sample)
    assert fresh.put(final)  # the long-poll never collected the proof: the final file still pages
    assert fresh.latest()[0].tripwires == found
