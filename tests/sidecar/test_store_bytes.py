"""The store holds its snapshots to a byte budget, whatever they weigh (issue 42, break 4).

Before: schema-valid 3.4 MB snapshots once a second from one source took the sidecar from 312 MB
to 1,227 MB in two minutes (256 of them kept per rank).  Now each (rank, source) holds its share of
``history_bytes``, the oldest shed first, and a latest snapshot heavier than the share is named
more briefly -- its counts, pools and kinds unchanged -- before the detector or the API reads it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.strategies import wire_snapshots

from poolwatch.codec.footprint import FLOOR_IDS, compact, weight
from poolwatch.model.findings import Repair, RepairKind, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.model.snapshot import Snapshot
from poolwatch.sidecar.store import MIN_SHARE, SnapshotStore


def heavy(seed: Snapshot, seq: int, findings: int = 128, ids: int = 4000) -> Snapshot:
    """As heavy as the flood benchmark's: ``findings`` tripwires of ``ids`` ids and 8 requests."""
    wires = tuple(
        Tripwire(
            (TripwireKind.FREE_DUPLICATE, TripwireKind.MISSING)[n % 2],
            (Pool.MAMBA, Pool.FULL)[n % 2],
            tuple(range(100_000 + n * ids, 100_000 + (n + 1) * ids)),
            "process_prefill_chunk",
            seq,
            tuple(f"req-{n}-{r}-" + "r" * 40 for r in range(8)),
        )
        for n in range(findings)
    )
    return replace(seed, seq=seq, taken_at=seed.taken_at + seq, tripwires=wires)


def _counts(snap: Snapshot) -> Counter[tuple[str, str]]:
    found: Counter[tuple[str, str]] = Counter()
    for f in (*snap.tripwires, *snap.repairs):
        found[(f.kind.value, f.pool.value)] += f.count
    return found


def test_heavy_snapshots_from_one_source_are_held_within_its_share(seed_snapshot: Snapshot) -> None:
    budget = 8 << 20
    store = SnapshotStore(history_bytes=budget)
    for seq in range(1, 40):
        assert store.put(heavy(seed_snapshot, seq))
    held = store.history(seed_snapshot.worker.key)
    assert sum(map(weight, held)) <= budget
    assert len(held) >= 1
    latest = store.get(seed_snapshot.worker.key)
    assert latest is not None
    assert latest.seq == 39  # the newest is never the one shed
    assert _counts(latest) == _counts(heavy(seed_snapshot, 39))  # every finding still counted


def test_ten_sources_hold_at_most_the_budget_together(seed_snapshot: Snapshot) -> None:
    budget = 16 << 20
    store = SnapshotStore(history_bytes=budget)
    for seq in range(1, 12):
        for rank in range(10):
            snap = heavy(seed_snapshot, seq, findings=32)
            store.put(replace(snap, worker=replace(snap.worker, tp_rank=rank)))
    held = [s for r in range(10) for s in store.history(replace(seed_snapshot.worker, tp_rank=r).key)]
    assert sum(map(weight, held)) <= budget + 10 * MIN_SHARE


def test_a_snapshot_of_the_usual_weight_is_never_touched(seed_snapshot: Snapshot) -> None:
    store = SnapshotStore()
    store.put(seed_snapshot)
    assert store.get(seed_snapshot.worker.key) is seed_snapshot
    assert weight(seed_snapshot) < 16 << 10


def test_a_heavy_snapshot_made_lighter_keeps_every_count_pool_and_kind(seed_snapshot: Snapshot) -> None:
    snap = heavy(seed_snapshot, 7)
    done = Repair(RepairKind.REFUSE, Pool.MAMBA, 5000, tuple(range(5000)), "mamba_pool.free", 7, ("r",) * 100)
    snap = replace(snap, repairs=(done,))
    light = compact(snap, 256 << 10)
    assert weight(light) <= 256 << 10
    assert _counts(light) == _counts(snap)
    assert light.pools == snap.pools
    assert light.queues == snap.queues
    assert all(len(f.slots) >= min(FLOOR_IDS, 1) for f in light.tripwires)


@settings(max_examples=60, deadline=None)
@given(wire_snapshots, st.integers(min_value=1, max_value=1 << 16))
def test_compaction_never_changes_what_is_counted(snap: Snapshot, limit: int) -> None:
    light = compact(snap, limit)
    assert _counts(light) == _counts(snap)
    assert [i.kind for i in light.incidents] == [i.kind for i in snap.incidents]
    assert light.pools == snap.pools
    assert (light.worker, light.seq, light.taken_at, light.boot_id) == (
        snap.worker,
        snap.seq,
        snap.taken_at,
        snap.boot_id,
    )
