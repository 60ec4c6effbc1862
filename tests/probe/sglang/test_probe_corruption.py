"""What a double free does next, seen by the census; one finding per slot; dropped findings counted."""

from __future__ import annotations

from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.census.proofs import id_census
from poolwatch.probe.core.tripwires import TripwireLog


def wire(kind: TripwireKind, *slots: int, seq: int = 1) -> Tripwire:
    return Tripwire(kind, Pool.MAMBA, slots, "recv_requests", seq)


def test_a_slot_held_by_two_live_requests_is_one_finding_naming_both() -> None:
    owners = [("a", [0]), ("b", [1]), ("c", [1])]  # b and c were both handed slot 1
    census = id_census(Pool.MAMBA, 4, 0, [2, 3], [], [], check_missing=True, owners=owners)
    (shared,) = [t for t in census.tripwires("recv_requests", 9) if t.kind is TripwireKind.LIVE_SHARED]
    assert (shared.slots, shared.requests, shared.seq) == ((1,), ("b", "c"), 9)
    assert census.missing == ()  # the slot is held (twice), not lost


def test_a_live_slot_that_a_tree_node_also_owns_is_found_with_its_request() -> None:
    census = id_census(Pool.MAMBA, 4, 0, [2, 3], [0, 1], [], check_missing=False, owners=[("a", [1])])
    kinds = {t.kind: (t.slots, t.requests) for t in census.tripwires("h", 1)}
    assert kinds == {TripwireKind.LIVE_AND_TREE: ((1,), ("a",))}


def test_a_free_listed_live_slot_names_the_request_that_holds_it() -> None:
    census = id_census(Pool.MAMBA, 4, 0, [1, 2, 3], [], [], check_missing=False, owners=[("seed", [1])])
    (found,) = census.tripwires("process_prefill_chunk", 3)
    assert (found.kind, found.slots, found.requests) == (TripwireKind.FREE_AND_LIVE, (1,), ("seed",))


def test_the_same_slot_seen_again_is_not_a_second_finding() -> None:
    log = TripwireLog()
    assert log.add([wire(TripwireKind.FREE_AND_LIVE, 5, seq=1)])
    assert not log.add([wire(TripwireKind.FREE_AND_LIVE, 5, seq=2)])
    assert log.add([wire(TripwireKind.FREE_AND_LIVE, 5, 6, seq=3)])  # only slot 6 is new
    assert [(t.slots, t.seq) for t in log.all()] == [((5,), 1), ((6,), 3)]
    assert log.dropped == 0


def test_findings_beyond_the_limit_are_counted_as_dropped() -> None:
    log = TripwireLog(limit=2)
    log.add([wire(TripwireKind.FREE_AND_LIVE, s) for s in range(5)])
    assert len(log.all()) == 2
    assert log.dropped == 3


def test_a_repaired_slot_leaves_the_log_and_a_new_fault_on_it_is_new_again() -> None:
    log = TripwireLog()
    log.add([wire(TripwireKind.FREE_AND_LIVE, 5, 7)])
    log.settle([TripwireKind.FREE_AND_LIVE], Pool.MAMBA, [5])
    assert [t.slots for t in log.all()] == [(7,)]
    assert log.add([wire(TripwireKind.FREE_AND_LIVE, 5, seq=9)])
