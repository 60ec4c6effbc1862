"""When a vLLM probe walks the whole pool, what the walk cost, and its last detail (EngineCore thread).

The walk (:mod:`~poolwatch.probe.vllm.census`) is O(blocks), so it runs off the hot path: at the
first idle after work and then at most every ``idle_kv_census_gap_s`` while idle, every
``kv_census_interval_s`` while busy, and at once when a sample shows a gap the last walk did not
(so a premature free is named by block id at the next step boundary).  Its findings go to the
probe's :class:`~poolwatch.probe.core.tripwires.TripwireLog`; its detail is ``GET /v1/census``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from poolwatch.conservation import gap
from poolwatch.model import Phase, Pool
from poolwatch.probe.census.report import census_envelope
from poolwatch.probe.core.access import MISSING, Reading
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.tripwires import TripwireLog
from poolwatch.probe.vllm.census import Walk, pool_doc, walk_pool
from poolwatch.probe.vllm.readers import block_pool
from poolwatch.probe.vllm.sample import VllmSample
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = ["Walks"]

Clock = Callable[[], float]


class Walks:
    def __init__(
        self,
        scheduler: object,
        shape: VllmShape,
        config: ProbeConfig,
        tripwires: TripwireLog,
        *,
        clock: Clock,
        wall: Clock,
    ) -> None:
        self.scheduler, self.shape, self.config, self.tripwires = scheduler, shape, config, tripwires
        self.clock, self.wall = clock, wall
        self.last: Walk | None = None
        self.doc: dict[str, Any] | None = None
        self.total = 0
        self.cost = 0.0  # seconds, the last walk
        self.unclaimed = 0.0  # the last walk's seconds not yet taken out of a sample's cost
        self._at = clock()  # the busy walk starts one interval in
        self._gap: int | None = 0  # the gap the last walk saw (a new gap forces a walk)
        self._busy_since = True

    @property
    def evictable(self) -> int:
        """The last walk's count of cached free blocks (0 before the first)."""
        return self.last.evictable if self.last is not None else 0

    def due(self, sample: VllmSample, idle: bool) -> bool:
        account = sample.pools.get(Pool.FULL)
        now_gap = gap(account) if account is not None else None
        if now_gap not in (0, None) and now_gap != self._gap:
            return True  # a new imbalance: name the blocks now
        if idle or sample.phase is Phase.IDLE:
            since = self.clock() - self._at
            return self._busy_since or since >= self.config.idle_kv_census_gap_s
        return self.clock() - self._at >= self.config.kv_census_interval_s

    def busy(self) -> None:
        """A busy sample went by without a walk: the next idle walks."""
        self._busy_since = True

    def run(self, sample: VllmSample, hook: str, seq: int, reading: Reading) -> None:
        started = time.perf_counter()
        pool = block_pool(self.scheduler, reading)
        if pool is MISSING:
            return
        walk = walk_pool(self.scheduler, self.shape, pool, reading)
        cost = time.perf_counter() - started
        self.last = walk
        self._at = self.clock()
        account = sample.pools.get(Pool.FULL)
        self._gap = gap(account) if account is not None else None
        self._busy_since = sample.phase is not Phase.IDLE
        self.total += 1
        self.cost = self.unclaimed = cost
        self.tripwires.add(walk.census.tripwires(hook, seq))
        pools = [pool_doc(walk)]
        now = self.wall()
        self.doc = census_envelope(pools, seq=seq, hook=hook, taken_at=now, cost=cost, phase=sample.phase)
