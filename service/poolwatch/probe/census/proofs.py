"""The census arithmetic: what the id sets of one pool prove (pure; nothing is read here).

Given ``F`` the free list, ``T`` the tree's values and ``Q`` the live requests' slots (each with
the requests holding it), a duplicate in ``F``, ``F & Q`` (the seed: the chunked request's slot
is on the free list), ``F & T``, more free ids than the pool has, and ids outside the pool's
range (``0..size-1`` up to 0.5.6, ``1..size`` from 0.5.9) are proofs at any moment.  So is the
damage a double free does once the slot is handed out again: one slot held by *two* live
requests (``LIVE_SHARED``, with both request ids), or by a live request and a tree node
(``LIVE_AND_TREE``: no known release lets an unfinished request's working Mamba slot be a tree
value; the tree gets a copy).  Ids in none of the sets (``MISSING``) are reported at idle, when
nobody may legitimately hold a slot the probe does not see, and while busy only when the cheap
sample's exact count already shows that many slots lost (:func:`busy_lost`): the ids then account
for exactly the deficit the page reports, so they are as proven as the gap itself.  Ids in no set
that a live request's row holds past what its release frees (``UNRELEASED``: allocated to it, freed
by no release) are that request's, named with it while it runs
(:mod:`poolwatch.probe.sglang.unreleased`), and are not missing.

Both censuses (:mod:`poolwatch.probe.sglang.mamba_census`, :mod:`poolwatch.probe.sglang.kv_census`) produce a
:class:`PoolCensus`; each finding names at most ``MAX_IDS`` slot ids (the counts are complete).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from poolwatch.model.findings import Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.census.readings import CounterReading

__all__ = ["MAX_IDS", "MAX_LEAK_IDS", "MAX_RETURN", "Owners", "PoolCensus", "busy_lost", "id_census"]

MAX_IDS = 64  # slot ids named per finding; the counts are always complete
MAX_LEAK_IDS = 4096  # a leak is named whole up to this many ids (the wire's list bound); its count is exact
MAX_RETURN = 1 << 16  # missing ids kept (unnamed) for the guard to give back at idle
Owners = Sequence[tuple[str, Sequence[int]]]  # (request id, the slot ids it holds), per live request


@dataclass(frozen=True, slots=True)
class PoolCensus:
    """The identity census of one pool."""

    pool: Pool
    size: int
    first_id: int
    free: int  # entries on the free list(s), duplicates included
    tree: int
    live: int
    duplicates: tuple[int, ...]
    free_and_live: tuple[int, ...]
    free_and_tree: tuple[int, ...]
    out_of_range: tuple[int, ...]
    missing: tuple[int, ...] | None  # None: not checked (busy)
    missing_count: int | None = None
    live_shared: tuple[int, ...] = ()  # held by two or more live requests
    live_and_tree: tuple[int, ...] = ()  # held by a live request and owned by a tree node
    owners: Mapping[int, tuple[str, ...]] = field(default_factory=dict)  # flagged slot -> request ids
    missing_ids: tuple[int, ...] = ()  # every missing id (up to MAX_RETURN), for the guard only
    page_size: int = 1  # > 1: the ids are pages of this many slots (a paged free list)
    # allocated to a live request past what its release frees (``owners`` names the request)
    unreleased: tuple[int, ...] = ()
    unreleased_count: int = 0
    # the engine's counters and the census's count of the same quantities, read at this census
    counter_readings: tuple[CounterReading, ...] = ()

    def counters(self) -> tuple[CounterReading, ...]:
        """The counter witness's readings (:mod:`poolwatch.probe.core.counters`)."""
        return self.counter_readings

    def body(self) -> dict[str, Any]:
        """This pool's body in ``GET /v1/census``."""
        doc = asdict(self)
        doc.pop("missing_ids")  # the guard's working set; ``missing`` names the first ids
        doc["counter_readings"] = [
            {**asdict(r), "pool": r.pool.value, "drift": r.reported - r.census} for r in self.counter_readings
        ]
        doc["owners"] = {str(slot): list(rids) for slot, rids in self.owners.items()}
        doc["pool"] = self.pool.value
        doc["last_id"] = self.first_id + self.size - 1
        for key in (
            "duplicates",
            "free_and_live",
            "free_and_tree",
            "out_of_range",
            "live_shared",
            "live_and_tree",
            "unreleased",
        ):
            doc[key] = list(doc[key])
        doc["missing"] = None if self.missing is None else list(self.missing)
        doc["balanced_ids"] = not any(self.tripwires("", 0))
        return doc

    def requests_of(self, slots: Iterable[int]) -> tuple[str, ...]:
        """The live requests holding any of ``slots`` (in slot order, each once)."""
        return tuple(dict.fromkeys(r for s in slots for r in self.owners.get(s, ())))

    def tripwires(self, hook: str, seq: int) -> tuple[Tripwire, ...]:
        found = [
            (TripwireKind.FREE_DUPLICATE, self.duplicates),
            (TripwireKind.FREE_AND_LIVE, self.free_and_live),
            (TripwireKind.FREE_AND_TREE, self.free_and_tree),
            (TripwireKind.OUT_OF_RANGE, self.out_of_range),
            (TripwireKind.MISSING, self.missing or ()),
            (TripwireKind.LIVE_AND_TREE, self.live_and_tree),
            (TripwireKind.UNRELEASED, self.unreleased),
        ]
        page = self.page_size
        out = [Tripwire(k, self.pool, ids, hook, seq, self.requests_of(ids), page) for k, ids in found if ids]
        totals = {
            TripwireKind.MISSING: self.missing_count or 0,
            TripwireKind.UNRELEASED: self.unreleased_count,
        }
        for i, t in enumerate(out):
            if totals.get(t.kind, 0) > len(t.slots):
                out[i] = replace(t, total=totals[t.kind])
        for slot in self.live_shared:  # one finding per shared slot, naming every holder
            out.append(
                Tripwire(TripwireKind.LIVE_SHARED, self.pool, (slot,), hook, seq, self.owners[slot], page)
            )
        if self.free > self.size:
            out.append(Tripwire(TripwireKind.OVER_SIZE, self.pool, self.duplicates, hook, seq, (), page))
        return tuple(out)


def busy_lost(missing: int, page: int, lost: int | None) -> bool:
    """Whether ``missing`` ids in no set, found while busy, are the lost ones: they account for
    exactly the sample's exact deficit ``lost`` (slots; an id is a page of ``page`` slots).  Any
    other count means something holds slots where the census does not look (a batch in flight):
    then the ids prove nothing and are dropped."""
    return lost is not None and missing > 0 and missing * page == lost


def _cap(ids: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(ids)[:MAX_IDS])


def _holders(owners: Owners) -> dict[int, tuple[str, ...]]:
    single = _single_holders(owners)
    if single is not None:
        return single
    held: dict[int, list[str]] = {}
    for rid, ids in owners:
        for slot in dict.fromkeys(ids):
            held.setdefault(slot, []).append(rid)
    return {slot: tuple(rids) for slot, rids in held.items()}


def _single_holders(owners: Owners) -> dict[int, tuple[str, ...]] | None:
    """The usual case at C speed: every owner holds one slot and no slot has two owners (else
    ``None``: the general path)."""
    slot_lists = list(map(operator.itemgetter(1), owners))
    if list(map(len, slot_lists)).count(1) != len(slot_lists):
        return None
    slots = list(map(operator.itemgetter(0), slot_lists))
    held = dict(zip(slots, zip(map(operator.itemgetter(0), owners)), strict=True))
    return held if len(held) == len(slots) else None


def id_census(
    pool: Pool,
    size: int,
    first: int,
    free: Sequence[int],
    tree: Sequence[int],
    live: Sequence[int],
    *,
    check_missing: bool,
    owners: Owners = (),
) -> PoolCensus:
    """The census arithmetic on plain id lists (pure; also used by the tests and the KV census).
    ``owners`` names the live requests behind ``live`` (then ``live`` may be empty)."""
    counts = Counter(free)
    held = _holders(owners)
    free_set, tree_set, live_set = set(counts), set(tree), set(live) | set(held)
    expected = range(first, first + size)
    missing = None
    if check_missing:
        seen = free_set | tree_set | live_set
        missing = tuple(i for i in expected if i not in seen)
    shared = _cap(s for s, rids in held.items() if len(rids) > 1)
    live_tree = _cap(set(held) & tree_set)
    flagged = set(shared) | set(live_tree) | (free_set & set(held))
    return PoolCensus(
        pool=pool,
        size=size,
        first_id=first,
        free=len(free),
        tree=len(tree),
        live=len(live) + sum(map(len, map(operator.itemgetter(1), owners))),
        duplicates=_cap(i for i, n in counts.items() if n > 1),
        free_and_live=_cap(free_set & live_set),
        free_and_tree=_cap(free_set & tree_set),
        out_of_range=_cap(i for i in free_set if not first <= i < first + size),
        missing=None if missing is None else missing[:MAX_LEAK_IDS],
        missing_count=None if missing is None else len(missing),
        live_shared=shared,
        live_and_tree=live_tree,
        owners={s: held[s] for s in sorted(flagged)[:MAX_IDS]},
        missing_ids=() if missing is None else missing[:MAX_RETURN],
    )
