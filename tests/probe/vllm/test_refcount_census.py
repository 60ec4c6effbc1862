"""The pure reference-count census: each fault named by block id, a sound pool clean."""

from __future__ import annotations

from typing import Any

from poolwatch.model.findings import TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.census.proofs import MAX_IDS, MAX_LEAK_IDS
from poolwatch.probe.census.refcount import RefCensus, refcount_census


def census(
    free: list[int],
    refs: list[int],
    owners: dict[int, list[str]],
    *,
    stale: dict[int, list[str]] | None = None,
    **kw: Any,
) -> RefCensus:
    """The census with owners given by name (counted here, named back on request, as the probe does)."""
    every = {i: [*owners.get(i, ()), *(stale or {}).get(i, ())] for i in {*owners, *(stale or {})}}
    return refcount_census(
        Pool.FULL,
        free=kw.pop("free_back_first", free),
        free_counter=kw.pop("free_counter", len(free)),
        ref_cnt=refs,
        owned={i: len(who) for i, who in owners.items()},
        names=lambda wanted: {i: every[i] for i in wanted if i in every},
        **kw,
    )


def test_a_sound_pool_is_clean() -> None:
    # block 0 null; 1, 2 held by r1 (2 shared with r2); 3, 4 free
    c = census([3, 4], [0, 1, 2, 0, 0], {1: ["r1"], 2: ["r1", "r2"], 0: ["r1"]})
    assert c.clean()
    assert c.tripwires("schedule", 1) == []


def test_a_premature_free_is_free_and_held_below_its_owners() -> None:
    # r1's blocks 1, 2 returned while r1 still lists them
    c = census([3, 1, 2], [0, 0, 0, 0], {1: ["r1"], 2: ["r1"]})
    assert c.free_and_held == (1, 2)
    assert c.below_owners == (1, 2)
    kinds = {t.kind: t for t in c.tripwires("schedule", 7)}
    assert kinds[TripwireKind.FREE_AND_LIVE].slots == (1, 2)
    assert kinds[TripwireKind.FREE_AND_LIVE].requests == ("r1",)
    assert kinds[TripwireKind.FREE_AND_LIVE].seq == 7


def test_a_double_free_is_negative_and_queued_twice() -> None:
    # block 2 freed twice: ref -1, appended a second time (seen twice walking back from the tail)
    c = census([1, 2], [0, 0, -1, 0], {}, free_back=[2, 3, 2], free_counter=4)
    assert c.negative == (2,)
    assert c.duplicates == (2,)
    assert not c.orphaned  # block 3 is on the queue (reached from the tail)


def test_a_leak_is_an_orphan_and_a_lost_block() -> None:
    # block 1: ref 1, no owner (an aborted request's list gone); block 2: ref 0, not queued
    c = census([3], [0, 1, 0, 0], {}, stale={1: ["aborted-7"]})
    assert c.orphaned == (1, 2)
    assert c.owners[1] == ("aborted-7",)
    assert {t.kind for t in c.tripwires("h", 1)} == {TripwireKind.MISSING}


def test_more_references_than_owners_is_a_leak_unless_a_connector_may_pin() -> None:
    refs, owners = [0, 2, 0], {1: ["r1"]}
    assert census([2], refs, owners).above_owners == (1,)
    pinned = census([2], refs, owners, pins_possible=True)
    assert pinned.clean()
    assert pinned.pinned == 1


def test_the_null_block_on_the_queue_or_a_second_null_is_misuse() -> None:
    c = census([0, 1, 2], [0, 0, 0], {}, null_marked=[0, 2])
    assert c.null_misuse == (0, 2)
    assert {t.kind for t in c.tripwires("h", 1)} == {TripwireKind.NULL_BLOCK}


def test_a_duplicate_in_one_list_is_below_owners_before_the_free() -> None:
    # vLLM #42571: one request's list holds block 1 twice; the free will drive it to -1
    c = census([2], [0, 1, 0], {1: ["r1", "r1"]})
    assert c.below_owners == (1,)


def test_counts_are_complete_and_ids_capped_a_leak_named_whole_up_to_its_bound() -> None:
    n = MAX_LEAK_IDS + 200
    c = census([], [0] + [1] * (n - 1), {})
    assert c.counts["missing"] == n - 1
    assert len(c.orphaned) == MAX_LEAK_IDS  # a leak: every id up to the bound
    (trip,) = c.tripwires("h", 1)
    assert (len(trip.slots), trip.count) == (MAX_LEAK_IDS, n - 1)  # the count exact beyond it
    refs = [1] * n
    refs[0] = 0
    other = census(list(range(1, n)), refs, {})  # every block queued with a count: free_and_live
    assert len(other.free_and_held) == MAX_IDS
    assert other.counts["free_and_live"] == n - 1


def test_only_named_blocks_are_looked_up() -> None:
    asked: list[set[int]] = []
    refcount_census(
        Pool.FULL,
        free=[2],
        free_counter=1,
        ref_cnt=[0, 1, 0],
        owned={1: 1},
        names=lambda wanted: asked.append(wanted) or {},
    )
    assert asked == []  # a sound pool asks for no names
