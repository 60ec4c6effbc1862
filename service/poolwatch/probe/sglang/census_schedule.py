"""When the probe censuses a rank, and what becomes of the findings (scheduler thread).

The identity censuses (:mod:`poolwatch.probe.sglang.mamba_census` for the Mamba pool,
:mod:`poolwatch.probe.sglang.kv_census` for full KV) synchronise with the GPU, so they run at a low rate:
the Mamba census once per ``census_interval_s`` and on entering idle (never on a model without a
Mamba pool); the full-KV census once per ``kv_census_interval_s`` while busy, and on entering idle
when ``idle_kv_census_gap_s`` have passed since the last; both at once when a sample looks wrong
(``force``); and the census of a pool whose cheap sample shows a nonzero exact conservation gap, at
once, so a leak's or an SWA double free's slot ids reach the page within seconds instead of at the
next busy census (300 s for full KV).  That trigger runs once per new set of gaps (a standing gap
costs nothing more) and at most once per :data:`GAP_CENSUS_EVERY_S` (a growing leak); while busy
the census then names the ids in no set when they account for exactly the sample's deficit
(:func:`~poolwatch.probe.census.proofs.busy_lost`).  The findings become tripwires
(:class:`~poolwatch.probe.core.tripwires.TripwireLog`), the census detail served at
``/v1/census`` (:func:`~poolwatch.probe.census.report.census_doc`) and, in guard mode, the repairs
of :class:`~poolwatch.probe.sglang.repair.Repairer`.

Cost: nothing when no census is due (a few float comparisons and one gap per pool per sample); a
census costs what its module says, and is timed here for the probe's health (``census_cost``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model import Exactness, Phase, Pool, PoolAccount
from poolwatch.probe.census.proofs import PoolCensus
from poolwatch.probe.census.report import census_doc
from poolwatch.probe.core.access import Reading
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.containment import Guard
from poolwatch.probe.core.tripwires import TripwireLog
from poolwatch.probe.sglang.kv_census import kv_census
from poolwatch.probe.sglang.mamba_census import mamba_census
from poolwatch.probe.sglang.repair import Repairer, census_of
from poolwatch.probe.sglang.shapes import Shape
from poolwatch.probe.sglang.snapshot import Sample
from poolwatch.probe.sglang.tripwires import chunk_tripwires

__all__ = ["GAP_CENSUS_EVERY_S", "Censuses", "exact_gaps"]

Clock = Callable[[], float]
GAP_CENSUS_EVERY_S = 5.0  # a gap-triggered census runs at most this often (a leak that keeps growing)
KV_POOLS = frozenset({Pool.FULL, Pool.SWA})  # the pools the full-KV census looks at


def exact_gaps(pools: Mapping[Pool, PoolAccount]) -> dict[Pool, int]:
    """The pools whose exact figures do not balance, with their signed gaps."""
    out = {}
    for pool, account in pools.items():
        g = gap(account) if account.exactness is Exactness.EXACT else None
        if g:
            out[pool] = g
    return out


class Censuses:
    """The censuses of one scheduler rank: when each last ran, what it cost, its last detail."""

    def __init__(
        self,
        scheduler: object,
        shape: Shape,
        config: ProbeConfig,
        tripwires: TripwireLog,
        repairer: Repairer | None,
        guard: Guard,
        *,
        clock: Clock,
        wall: Clock,
    ) -> None:
        self.scheduler, self.shape, self.config = scheduler, shape, config
        self.tripwires, self.repairer, self.guard = tripwires, repairer, guard
        self.clock, self.wall = clock, wall
        self.last_mamba = self.last_kv = clock()  # busy censuses start one interval in
        self.was_idle = False
        self.has_mamba = True  # until a sample shows the model has no Mamba pool
        self.cost = 0.0  # seconds the last census took
        self.total = 0
        self.mamba_runs = 0  # Mamba censuses taken (guard v2 re-indexes the tree after each)
        self.doc: dict[str, Any] | None = None  # the last census detail (``GET /v1/census``)
        self.gaps: dict[Pool, int] = {}  # the gaps the last gap-triggered census was taken for
        self.last_gap = -float("inf")
        self.gap_runs = 0  # gap-triggered censuses taken

    def maybe(
        self, sample: Sample, reading: Reading, hook: str, seq: int, *, force: bool
    ) -> list[PoolCensus]:
        """The censuses due after ``sample`` (none most of the time), with what they found."""
        idle = sample.phase is Phase.IDLE
        entering_idle, self.was_idle = idle and not self.was_idle, idle
        now = self.clock()
        mamba_due = force or entering_idle or now - self.last_mamba >= self.config.census_interval_s
        kv_gap = self.config.idle_kv_census_gap_s if idle else self.config.kv_census_interval_s
        kv_due = force or ((entering_idle or not idle) and now - self.last_kv >= kv_gap)
        self.has_mamba = Pool.MAMBA in sample.pools  # a model without one has nothing to census
        mamba_due = mamba_due and self.has_mamba
        gaps = exact_gaps(sample.pools)
        gapped = self.gapped(gaps, now)
        mamba_due = mamba_due or Pool.MAMBA in gapped
        kv_due = kv_due or bool(gapped & KV_POOLS)
        if mamba_due or kv_due:
            lost = {} if idle else {p: g for p, g in gaps.items() if g > 0}
            return self.run(sample, reading, hook, seq, mamba=mamba_due, kv=kv_due, idle=idle, lost=lost)
        return []

    def gapped(self, gaps: Mapping[Pool, int], now: float) -> frozenset[Pool]:
        """The pools to census now because their gap is new (none while rate-limited: the gap is
        looked at again at the next sample)."""
        if not gaps:
            self.gaps = {}  # balanced again: the next gap is new
            return frozenset()
        if gaps == self.gaps or now - self.last_gap < GAP_CENSUS_EVERY_S:
            return frozenset()
        changed = frozenset(p for p, g in gaps.items() if self.gaps.get(p) != g)
        self.gaps, self.last_gap = dict(gaps), now
        self.gap_runs += bool(changed)
        return changed

    def run(
        self,
        sample: Sample,
        reading: Reading,
        hook: str,
        seq: int,
        *,
        mamba: bool,
        kv: bool,
        idle: bool,
        lost: Mapping[Pool, int] | None = None,
    ) -> list[PoolCensus]:
        """The censuses asked for; ``lost``: the sample's exact deficits while busy (the censuses
        then name the lost ids when they account for exactly that deficit)."""
        lost = lost or {}
        started = time.perf_counter()
        found: list[PoolCensus] = []
        if mamba:
            self.last_mamba = self.clock()
            self.mamba_runs += 1
            result = mamba_census(
                self.scheduler, self.shape, reading, sample.live, idle=idle, lost=lost.get(Pool.MAMBA)
            )
            found += [result] if result is not None else []
        if kv:
            self.last_kv = self.clock()
            result = kv_census(
                self.scheduler, self.shape, reading, sample.live, idle=idle, lost=lost.get(Pool.FULL)
            )
            found += [result] if result is not None else []
        for pool_census in found:
            self.tripwires.add(pool_census.tripwires(hook, seq))
        self.total += 1
        self.cost = time.perf_counter() - started
        self.doc = census_doc(
            found, seq=seq, hook=hook, taken_at=self.wall(), cost=self.cost, phase=sample.phase
        )
        return found

    def repair(
        self, found: list[PoolCensus], pools: Mapping[Pool, PoolAccount], phase: Phase, hook: str, seq: int
    ) -> bool:
        """Guard mode: act on what the censuses prove (settling those findings); True if a free
        list changed (never outside guard mode).  A lost slot is returned only with the pool's
        exact gap at full idle."""
        if self.repairer is None:
            return False
        settled = self.repairer.act_all(self.scheduler, found, pools, phase, hook, seq)
        for kinds, pool, slots in settled:
            self.tripwires.settle(kinds, pool, slots)
        return bool(settled)

    def chunk(self, hook: str, seq: int) -> bool:
        """Right after a prefill chunk, the direct #12994 tripwire (models with a Mamba pool): its
        findings logged and (guard mode) quarantined before the next allocation can hand the slot
        out; True when any is new (then the probe publishes at once)."""
        if not self.has_mamba:
            return False
        reading = Reading()
        found = chunk_tripwires(self.scheduler, self.shape, reading, seq, hook)
        for label, message in reading.failures.items():
            self.guard.note(label, message)
        if not found or not self.tripwires.add(found):
            return False
        self.repair(census_of(found), {}, Phase.BUSY, hook, seq)  # a no-op outside guard mode
        return True
