from __future__ import annotations

from dataclasses import replace

import pytest

from poolwatch.errors import Reason
from poolwatch.model import Incident, IncidentKind, Snapshot
from poolwatch.sidecar.store import SnapshotStore


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
    assert store.incidents(seed_snapshot.worker.key)[IncidentKind.SCHEDULER_EXCEPTION] == 2


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
