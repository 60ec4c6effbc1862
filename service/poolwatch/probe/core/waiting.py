"""What waits on a rank, turned into holds and progress: ages, counters and the current stall, once for
every engine (scheduler thread; stdlib only).

A room reads, at each sample, which owners keep capacity while they wait (:class:`Owner`) and what its
scheduler did since the last read (:class:`Moves`), and hands both over as :class:`Waits` on its
:class:`~poolwatch.probe.core.engine.EngineSample`.  The :class:`WaitBook` here keeps what needs a clock
and memory across samples:

* when each owner was first seen waiting in its way (keyed by the room's own stable key, a request id
  or a node id; an owner gone is forgotten, one back later starts over), so a hold's age is its oldest
  owner's wait; the owners' names are made inert (:func:`poolwatch.model.holds.owner_name`) and the
  oldest :data:`~poolwatch.model.holds.MAX_HOLDERS` of each hold named;
* the counters (admitted, preempted, fruitless preemptions) and the latest fruitless preemptions;
* the current stall: the iteration and time of the first read that found no progress while requests
  the scheduler could admit waited; any progress, or nothing admittable waiting, ends it.

Cost: O(owners) per sample when they changed (a dict look-up each), nothing per request or block; the
same owners as the last read (compared by identity first, then by value) return the last holds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from poolwatch.model.holds import MAX_HOLDERS, Hold, Holder, HoldReason, owner_name
from poolwatch.model.progress import MAX_VICTIMS, Progress
from poolwatch.model.rank import Pool

__all__ = ["Moves", "Owner", "WaitBook", "Waits", "merged"]

MAX_OWNERS = 1 << 16  # owners remembered at most (a flood of transfers cannot grow the book for ever)


@dataclass(frozen=True, slots=True)
class Owner:
    """One owner a room found keeping capacity while it waits."""

    pool: Pool
    reason: HoldReason
    key: str  # the room's stable identity for it (a request id, ``node <id>``), raw
    slots: int
    aborted: bool = False


@dataclass(frozen=True, slots=True)
class Moves:
    """What the scheduler did since the room's last read (``None``: the room cannot tell)."""

    progressed: bool  # something admitted, computed or finished
    admitted: int = 0  # requests that began to run
    waiting: int = 0  # requests waiting that the scheduler could admit now
    head: tuple[str, ...] = ()  # the first few of them (raw ids), asked only while stalled
    preempted: tuple[tuple[str, bool], ...] = ()  # (request id, fruitless) of each preemption
    preemptions_seen: bool = True  # False: this engine's preemptions are not observed


@dataclass(frozen=True, slots=True)
class Waits:
    """A room's read of what waits on its rank."""

    owners: tuple[Owner, ...] = ()
    timeouts: Mapping[HoldReason, tuple[float, str]] = field(default_factory=dict)  # bound, where read
    moves: Moves | None = None
    parked: bool = False  # nothing to step, only owners waiting: keep the snapshot fresh while quiet


class WaitBook:
    """Ages, counters and the stall of one rank, across samples (see the module docstring)."""

    def __init__(self) -> None:
        self._since: dict[tuple[HoldReason, str], float] = {}
        self.admitted = self.preempted = self.fruitless = 0
        self._recent: deque[tuple[float, str]] = deque(maxlen=MAX_VICTIMS)
        self._stall: tuple[int, float] | None = None  # (iteration, time) of the last read before the stall
        self._last: tuple[int, float] | None = None  # (iteration, time) of the last read
        self._last_holds: (
            tuple[tuple[Owner, ...], Mapping[HoldReason, tuple[float, str]], tuple[Hold, ...]] | None
        )
        self._last_holds = None  # (owners, timeouts, holds) of the last read

    def holds(self, waits: Waits, now: float) -> tuple[Hold, ...]:
        """The holds of ``waits`` at ``now``: one per pool and reason, its owners aged; the last
        read's very holds when the same owners wait (their ages run from the same sightings)."""
        last = self._last_holds
        if last is not None and waits.owners == last[0] and waits.timeouts == last[1]:
            return last[2]
        holds = self._aged(waits, now)
        self._last_holds = (waits.owners, waits.timeouts, holds)
        return holds

    def _aged(self, waits: Waits, now: float) -> tuple[Hold, ...]:
        since = self._since
        seen: dict[tuple[HoldReason, str], float] = {}
        groups: dict[tuple[Pool, HoldReason], list[Holder]] = {}
        for o in waits.owners:
            key = (o.reason, o.key)
            first = seen[key] = since.get(key, now)
            holder = Holder(o.key, o.slots, first, o.aborted)
            groups.setdefault((o.pool, o.reason), []).append(holder)
        if len(seen) <= MAX_OWNERS:
            self._since = seen
        out = []
        for (pool, reason), holders in groups.items():
            holders.sort(key=lambda h: h.since)
            bound = waits.timeouts.get(reason)
            named = tuple(
                Holder(owner_name(h.owner), h.slots, h.since, h.aborted) for h in holders[:MAX_HOLDERS]
            )
            out.append(
                Hold(
                    pool,
                    reason,
                    slots=sum(h.slots for h in holders),
                    owners=len(holders),
                    oldest=holders[0].since,
                    timeout=None if bound is None else bound[0],
                    named=named,
                    source="" if bound is None else bound[1],
                )
            )
        return tuple(out)

    def progress(self, moves: Moves, seq: int, now: float) -> Progress:
        """Count ``moves`` and carry the stall at iteration ``seq``, time ``now``."""
        self.admitted += moves.admitted
        for rid, fruitless in moves.preempted:
            self.preempted += 1
            if fruitless:
                self.fruitless += 1
                self._recent.append((now, owner_name(rid)))
        if moves.progressed or not moves.waiting:
            self._stall = None
        elif self._stall is None:  # nothing moved since the last read: the stall began there
            self._stall = self._last or (seq, now)
        self._last = (seq, now)
        steps, since = (0, 0.0) if self._stall is None else (max(1, seq - self._stall[0]), self._stall[1])
        head = tuple(owner_name(r) for r in moves.head[:MAX_VICTIMS]) if steps else ()
        return Progress(
            admitted=self.admitted,
            preempted=self.preempted,
            fruitless=self.fruitless,
            waiting=moves.waiting,
            stalled_steps=steps,
            stalled_since=since,
            head=head,
            recent=tuple(self._recent),
            preemptions_seen=moves.preemptions_seen,
        )


def merged(first: Waits | None, then: Waits | None) -> Waits | None:
    """``then`` read after ``first`` in the same sample (a census asked for a second read): the
    owners and state of ``then``, the moves of both (the second read's are relative to the first's)."""
    if first is None or then is None or first.moves is None or then.moves is None:
        return then if then is not None else first
    a, b = first.moves, then.moves
    moves = Moves(
        progressed=a.progressed or b.progressed,
        admitted=a.admitted + b.admitted,
        waiting=b.waiting,
        head=b.head or a.head,
        preempted=a.preempted + b.preempted,
        preemptions_seen=b.preemptions_seen,
    )
    return Waits(then.owners, then.timeouts, moves, then.parked)
