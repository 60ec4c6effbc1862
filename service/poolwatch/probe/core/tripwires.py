"""The tripwires a rank has tripped: kept from the first sighting on, one finding per slot, bounded.

A leak (``missing``) is one finding per pool that grows with every census that finds more: its ids
extended up to :data:`~poolwatch.probe.census.proofs.MAX_LEAK_IDS` and its exact count kept
(``Tripwire.total``), so a leak of any size is reported whole.

A proven identity fault (a slot or block freed twice, a free one still in use) does not heal: the
pool is corrupt until the server restarts.  So a tripwire stays in every later snapshot with the
hook and iteration where it was *first* seen.  The same slot seen again (by the next census, or by
a direct check and then the census) is the same finding: a later tripwire keeps only the slots not
yet reported under its kind and pool, and adds nothing when none are new; a finding that names no
slot is kept once per kind and pool.  At most ``limit`` findings are kept; what does not fit is
counted in :attr:`TripwireLog.dropped` (published in the probe's health) instead of growing the
snapshot.

Each new finding carries the engine's call site (:mod:`~poolwatch.probe.core.call_site`), captured
once when it is kept, from inside :meth:`TripwireLog.add` (so every caller gets one without doing
anything; a leak that grows captures nothing).  A finding first seen at a hook has no free's site:
when it is seen again inside a free (vLLM's free-time check after a census named the block), that
sighting's site replaces the hook's (tried at most :data:`MAX_UPGRADES` times per finding: a
repeat captures nothing once the finding has a free's site); and a room may hand it the site of the
next identical wrong free (:meth:`TripwireLog.witness`).

The one way out is a repair by an opt-in guard (SGLang's ``repair``): :meth:`TripwireLog.settle`
takes the repaired slots out of the log (they are reported as repairs instead) and forgets them,
so the same fault striking that slot again is a new finding.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from poolwatch.model.findings import CallSite, CallSiteKind, Tripwire, TripwireKind
from poolwatch.model.rank import Pool
from poolwatch.probe.census.proofs import MAX_IDS, MAX_LEAK_IDS
from poolwatch.probe.core.call_site import CallSites

__all__ = ["MAX_TRIPWIRES", "MAX_UPGRADES", "TripwireLog"]

MAX_TRIPWIRES = 32
MAX_UPGRADES = 8  # captures tried per finding seen again, for a better call site than a hook's


class TripwireLog:
    def __init__(self, limit: int = MAX_TRIPWIRES, sites: CallSites | None = None) -> None:
        self.limit = limit
        self.sites = sites if sites is not None else CallSites("")
        self._found: list[Tripwire] = []
        self._seen: set[tuple[TripwireKind, Pool, int]] = set()
        self._caught: dict[Pool, tuple[frozenset[TripwireKind], CallSite]] = {}  # the last witnessed free
        self._tries: dict[tuple[TripwireKind, Pool, int, str], int] = {}  # upgrades tried, per finding
        self.dropped = 0

    def add(self, found: Iterable[Tripwire]) -> bool:
        """Record new findings, each with the engine's call site; True if a slot was new, or a
        finding first seen at a hook took the call site of a free that repeated it."""
        new = False
        here = _Here(self.sites)  # at most one capture per call, made only when needed
        for tripwire in found:
            fresh = tuple(s for s in tripwire.slots if (tripwire.kind, tripwire.pool, s) not in self._seen)
            if tripwire.kind is TripwireKind.MISSING and self._has(tripwire.kind, tripwire.pool):
                new |= self._grow(tripwire, fresh)
                continue
            if tripwire.slots and not fresh:
                new |= self._upgrade(tripwire, here)
                continue
            if not tripwire.slots and self._has(tripwire.kind, tripwire.pool):
                continue
            if len(self._found) >= self.limit:
                self.dropped += 1
                continue
            self._seen.update((tripwire.kind, tripwire.pool, s) for s in fresh)
            site = tripwire.call_site or self._witnessed(tripwire) or here.site(tripwire.seq)
            self._found.append(replace(tripwire, slots=fresh, call_site=site))
            new = True
        return new

    def _upgrade(self, seen: Tripwire, here: _Here) -> bool:
        """A finding seen again: when it was first seen at a hook (its free had returned, or no
        free made it) and this sighting is inside a free, that free's call site is the better one.
        Tried at most :data:`MAX_UPGRADES` times per finding (a census repeating it at every hook
        captures a hook's site each time, and stops trying)."""
        ids = set(seen.slots)
        for i, kept in enumerate(self._found):
            if kept.kind is not seen.kind or kept.pool is not seen.pool or ids.isdisjoint(kept.slots):
                continue
            key = (kept.kind, kept.pool, kept.seq, kept.first_seen_hook)
            if _at_free(kept.call_site) or self._tries.get(key, 0) >= MAX_UPGRADES:
                continue
            self._tries[key] = self._tries.get(key, 0) + 1
            site = here.site(seen.seq)
            if _at_free(site):
                self._found[i] = replace(kept, call_site=site)
                return True
        return False

    def witness(self, pool: Pool, kinds: Iterable[TripwireKind], site: CallSite) -> bool:
        """The next identical wrong free was caught (``site``): findings of ``kinds`` in ``pool``
        whose free had returned before the probe looked (no site, or a hook's) take it, and so does
        a new one of them found later in the same iteration (what that free did: a slot now twice on
        the free list); True if a finding already kept took it."""
        wanted = set(kinds)
        self._caught[pool] = (frozenset(wanted), site)
        took = False
        for i, t in enumerate(self._found):
            if (
                t.pool is pool
                and t.kind in wanted
                and (t.call_site is None or t.call_site.kind is CallSiteKind.HOOK)
            ):
                self._found[i] = replace(t, call_site=site)
                took = True
        return took

    def _grow(self, tripwire: Tripwire, fresh: tuple[int, ...]) -> bool:
        """A leak keeps growing: one finding per pool, its ids extended (bounded) and its count
        the largest any census found; True when it grew."""
        i = next(k for k, t in enumerate(self._found) if t.kind is tripwire.kind and t.pool is tripwire.pool)
        old = self._found[i]
        room = MAX_LEAK_IDS - len(old.slots)
        added = fresh[: max(0, room)]
        self._seen.update((tripwire.kind, tripwire.pool, s) for s in added)
        count = max(old.count + len(fresh) - len(added), tripwire.count, old.count)
        slots = old.slots + added
        requests = tuple(dict.fromkeys((*old.requests, *tripwire.requests)))[:MAX_IDS]
        grown = replace(old, slots=slots, requests=requests, total=count if count > len(slots) else 0)
        self._found[i] = grown
        return grown.count > old.count

    def _witnessed(self, tripwire: Tripwire) -> CallSite | None:
        """The witnessed free's site, for a finding of its kinds and pool in its iteration."""
        caught = self._caught.get(tripwire.pool)
        if caught is None or tripwire.kind not in caught[0] or caught[1].seq != tripwire.seq:
            return None
        return caught[1]

    def settle(self, kinds: Iterable[TripwireKind], pool: Pool, slots: Iterable[int]) -> None:
        """The guard repaired ``slots`` of ``pool``: findings of ``kinds`` about them are over."""
        gone = set(slots)
        wanted = set(kinds)
        kept: list[Tripwire] = []
        for t in self._found:
            if t.pool is not pool or t.kind not in wanted:
                kept.append(t)
                continue
            self._seen -= {(t.kind, pool, s) for s in gone}
            rest = tuple(s for s in t.slots if s not in gone)
            if rest or not t.slots:
                left = t.count - (len(t.slots) - len(rest))
                kept.append(replace(t, slots=rest, total=left if left > len(rest) else 0))
        self._found = kept

    def _has(self, kind: TripwireKind, pool: Pool) -> bool:
        return any(t.kind is kind and t.pool is pool for t in self._found)

    def all(self) -> tuple[Tripwire, ...]:
        return tuple(self._found)


def _at_free(site: CallSite | None) -> bool:
    """A call site captured inside the engine's free (or the next identical one)."""
    return site is not None and site.kind is not CallSiteKind.HOOK


class _Here:
    """The engine's call site of one :meth:`TripwireLog.add`, captured at the first ask only."""

    def __init__(self, sites: CallSites) -> None:
        self._sites = sites
        self._asked = False
        self._site: CallSite | None = None

    def site(self, seq: int) -> CallSite | None:
        if not self._asked:
            self._asked = True
            self._site = self._sites.capture(seq)
        return self._site
