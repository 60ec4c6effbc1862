"""When a probe censuses, for every engine alike (scheduler thread; pure bookkeeping, time passed in).

A census walks a whole pool (and, on a GPU, synchronises with it), so it runs off the hot path.
Each census of a room follows its :class:`CensusRule`:

* while busy, every ``busy_every_s``;
* on entering idle (the first idle sample after a busy one), when ``idle_entry_gap_s`` have passed
  since it last ran (0: always -- the moment an engine's own idle check looks);
* while idle, every ``idle_every_s`` (None: only on entering idle);
* at once when ``force`` (a room's suspicion: its own check is about to fail);
* at once when the sample shows a *new* exact conservation gap in one of its pools, so the slot or
  block ids reach the page within a sample instead of at the next busy census.  That trigger runs
  once per new set of gaps (a standing gap costs nothing more) and, while a leak keeps growing, at
  most once per :data:`GAP_CENSUS_EVERY_S` for all censuses together -- and no more often than keeps
  the censuses' own cost under :data:`CENSUS_BUDGET` of the thread (a large pool's walk is spaced out).
  A new *surplus* is held back by the budget alone: it is a double free or an engine counter that
  drifted (:mod:`~poolwatch.probe.core.counters`), and only the census tells which, so it is
  censused before it can page as a double free.

The census of a model's pool that does not exist never runs (a census applies when one of its pools
is in the sample).  Nothing here reads the engine; :class:`CensusSchedule` only says what is due.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from poolwatch.conservation import gap
from poolwatch.model.rank import Exactness, Pool, PoolAccount

__all__ = ["CENSUS_BUDGET", "GAP_CENSUS_EVERY_S", "CensusRule", "CensusSchedule", "Due", "exact_gaps"]

GAP_CENSUS_EVERY_S = 5.0  # a gap-triggered census runs at most this often (a leak that keeps growing)
CENSUS_BUDGET = 0.002  # ... and never takes more than this share of the scheduler thread: a census
# whose sample took c seconds (the walk, the read again, the proofs) is followed by the next
# gap-triggered one no sooner than c / CENSUS_BUDGET


@dataclass(frozen=True, slots=True)
class CensusRule:
    busy_every_s: float
    idle_every_s: float | None = None
    idle_entry_gap_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Due:
    """The censuses due after one sample, and the busy deficits they may name ids for."""

    names: frozenset[str]
    lost: Mapping[Pool, int]
    by_gap: frozenset[str] = frozenset()  # those due because of a new gap

    def __bool__(self) -> bool:
        return bool(self.names)


def exact_gaps(pools: Mapping[Pool, PoolAccount]) -> dict[Pool, int]:
    """The pools whose exact figures do not balance, with their signed gaps."""
    out = {}
    for pool, account in pools.items():
        g = gap(account) if account.exactness is Exactness.EXACT else None
        if g:
            out[pool] = g
    return out


_NONE: frozenset[str] = frozenset()
_QUIET = Due(_NONE, MappingProxyType({}))  # nothing due
_NEVER = float("inf")


def _shortest(rule: CensusRule, *, longest: bool = False) -> float:
    """The shorter of a rule's busy and idle intervals (``longest``: the longer; no idle interval
    counts as never)."""
    idle = _NEVER if rule.idle_every_s is None else rule.idle_every_s
    return max(rule.busy_every_s, idle) if longest else min(rule.busy_every_s, idle)


@dataclass(frozen=True, slots=True)
class _Entry:
    rule: CensusRule
    pools: frozenset[Pool]


class CensusSchedule:
    """The censuses of one probe: when each last ran, and the gap trigger's memory (time passed in;
    a census's interval starts at the first sample the schedule sees)."""

    def __init__(self, entries: Iterable[tuple[str, CensusRule, frozenset[Pool]]]) -> None:
        self._entries = {name: _Entry(rule, pools) for name, rule, pools in entries}
        self.last: dict[str, float] = {}  # when each census last ran (or the first sample seen)
        self.was_idle = False
        self.gaps: dict[Pool, int] = {}  # the gaps the last gap-triggered census was taken for
        self.last_gap = -float("inf")
        self.gap_runs = 0  # gap-triggered census passes
        self.pass_cost = 0.0  # seconds the last sample that censused took (the budget spaces the next out)
        self._soonest: float | None = None  # no census is due by the clock before this (None: unknown)
        # the censuses due at every sample, busy or idle (a zero interval: one that applies only to
        # a pool some models lack, the encoder's)
        self._always = frozenset(n for n, e in self._entries.items() if _shortest(e.rule, longest=True) <= 0)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def _since(self, name: str, now: float) -> float:
        if name not in self.last:
            self.last[name], self._soonest = now, None  # busy censuses start one interval in
        return now - self.last[name]

    def _quiet(self, now: float) -> bool:
        """Whether no census but those due at every sample (:attr:`_always`) can be due by the clock
        at ``now``, busy or idle: one comparison while none is near (the earliest interval's end is
        kept until a census runs)."""
        soonest = self._soonest
        if soonest is None:
            timed = [n for n in self._entries if n not in self._always]
            if not self.last.keys() >= set(timed):
                return False  # a census not yet seen: its interval starts at this sample
            soonest = self._soonest = min(
                (self.last[n] + _shortest(self._entries[n].rule) for n in timed), default=_NEVER
            )
        return now < soonest

    def by_clock(self, now: float, *, idle: bool) -> frozenset[str]:
        """The censuses whose interval has passed (asked before a read: it reads what they need)."""
        if self._quiet(now):
            return self._always
        return frozenset(
            n for n, e in self._entries.items() if self._interval_due(e, self._since(n, now), idle)
        )

    def _interval_due(self, entry: _Entry, since: float, idle: bool) -> bool:
        if not idle:
            return since >= entry.rule.busy_every_s
        every = entry.rule.idle_every_s
        return every is not None and since >= every

    def due(self, now: float, pools: Mapping[Pool, PoolAccount], *, idle: bool, force: bool = False) -> Due:
        """What to census after a sample of ``pools`` (``idle``: the sample's phase)."""
        entering, self.was_idle = idle and not self.was_idle, idle
        gaps = exact_gaps(pools)
        quiet = not (force or entering or gaps) and self._quiet(now)
        if quiet and all(self._entries[n].pools.isdisjoint(pools) for n in self._always):
            self.gaps = {}  # (balanced: the next gap is new)
            return _QUIET  # the usual busy sample: nothing forced, no gap, no interval ended
        gapped = self.gapped(gaps, now)
        names, by_gap = set(), set()
        for name, entry in self._entries.items():
            if entry.pools.isdisjoint(pools):
                continue  # the model has no such pool
            since = self._since(name, now)
            clocked = self._interval_due(entry, since, idle)
            entry_due = entering and since >= entry.rule.idle_entry_gap_s
            if force or clocked or entry_due:
                names.add(name)
            elif not entry.pools.isdisjoint(gapped):
                names.add(name)
                by_gap.add(name)
        lost = {} if idle else {p: g for p, g in gaps.items() if g > 0}
        return Due(frozenset(names), lost, frozenset(by_gap))

    def ran(self, name: str, now: float) -> None:
        self.last[name], self._soonest = now, None

    @property
    def gap_interval(self) -> float:
        """The least time between two gap-triggered censuses (the rate limit, or the budget)."""
        return max(GAP_CENSUS_EVERY_S, self.pass_cost / CENSUS_BUDGET)

    def gapped(self, gaps: Mapping[Pool, int], now: float) -> frozenset[Pool]:
        """The pools to census now because their gap is new (none while rate-limited: the gap is
        looked at again at the next sample)."""
        if not gaps:
            self.gaps = {}  # balanced again: the next gap is new
            return frozenset()
        if gaps == self.gaps:
            return frozenset()
        changed = frozenset(p for p, g in gaps.items() if self.gaps.get(p) != g)
        surplus = any(gaps[p] < 0 for p in changed)  # a double free, or a counter that drifted
        wait = self.pass_cost / CENSUS_BUDGET if surplus else self.gap_interval
        if now - self.last_gap < wait:
            return frozenset()
        self.gaps, self.last_gap = dict(gaps), now
        self.gap_runs += bool(changed)
        return changed
