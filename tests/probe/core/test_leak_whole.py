"""A leak of any size is reported whole: one finding per pool that grows with every census, every
id named up to the wire's bound and the exact count beyond it, in the snapshot and the page text."""

from __future__ import annotations

from poolwatch.codec.snapshot import dump_snapshot, parse_snapshot
from poolwatch.detect.evidence import id_ranges
from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Phase, Pool, WorkerId
from poolwatch.model.snapshot import Snapshot
from poolwatch.probe.census.proofs import MAX_LEAK_IDS
from poolwatch.probe.core.tripwires import TripwireLog


def leak(ids: range, total: int = 0) -> Tripwire:
    return Tripwire(TripwireKind.MISSING, Pool.FULL, tuple(ids), "schedule", 1, total=total)


def test_a_growing_leak_is_one_finding_that_grows_with_every_census() -> None:
    log = TripwireLog()
    assert log.add([leak(range(0, 64))])
    for census in range(1, 30):  # each census finds the leak larger than the last
        assert log.add([leak(range(0, 64 * (census + 1)))])
    (found,) = log.all()
    assert found.slots == tuple(range(0, 64 * 30))  # every id, in one finding
    assert found.count == 64 * 30
    assert found.first_seen_hook == "schedule"
    assert log.dropped == 0
    assert not log.add([leak(range(0, 64 * 30))])  # a standing leak: nothing new


def test_past_the_bound_the_ids_stop_and_the_count_stays_exact() -> None:
    log = TripwireLog()
    log.add([leak(range(0, MAX_LEAK_IDS), total=MAX_LEAK_IDS + 500)])
    log.add([leak(range(0, MAX_LEAK_IDS), total=MAX_LEAK_IDS + 900)])
    (found,) = log.all()
    assert len(found.slots) == MAX_LEAK_IDS
    assert found.count == MAX_LEAK_IDS + 900


def test_the_count_survives_the_wire_and_an_old_reader_still_reads_the_ids() -> None:
    trip = leak(range(10, 20), total=5000)
    snap = Snapshot(WorkerId("w", engine="sglang"), 1, 0.0, Phase.BUSY, {}, "probe", tripwires=(trip,))
    doc = dump_snapshot(snap)
    assert doc["tripwires"][0]["total"] == 5000
    assert parse_snapshot(doc).tripwires == (trip,)
    every = dump_snapshot(
        Snapshot(WorkerId("w", engine="sglang"), 1, 0.0, Phase.BUSY, {}, "probe", tripwires=(leak(range(3)),))
    )
    assert "total" not in every["tripwires"][0]  # every id named: the form earlier sidecars read


def test_ids_read_as_runs_in_the_page_text() -> None:
    assert id_ranges([5, 1, 2, 3, 9, 10]) == "1-3, 5, 9-10"
    assert id_ranges(range(0, 1400, 2), limit=3) == "0, 2, 4 ..."
    assert id_ranges(range(100, 1500)) == "100-1499"
