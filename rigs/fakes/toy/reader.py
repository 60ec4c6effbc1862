"""Reading the toy scheduler: the pool account, and the census of its free list (its room's reads)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount, Role, WorkerId
from poolwatch.probe.census.proofs import PoolCensus, busy_lost, id_census
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import EngineSample, ReadAsk
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.core.schedule import CensusRule


class FreeListCensus:
    name = "slots"
    pools = frozenset({Pool.FULL})

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def rule(self, config: ProbeConfig) -> CensusRule:
        return CensusRule(config.kv_census_interval_s, None, config.idle_kv_census_gap_s)

    def run(
        self, sample: EngineSample, reading: Reading, *, idle: bool, lost: Mapping[Pool, int]
    ) -> Sequence[PoolCensus]:
        free = reading.attr(self.scheduler, "free")
        held = reading.attr(self.scheduler, "held")
        size = reading.int_of(reading.attr(self.scheduler, "size"), "size")
        if free is MISSING or held is MISSING or size is None:
            return []
        owners = [(rid, list(slots)) for rid, slots in dict(held).items()]
        found = id_census(Pool.FULL, size, 0, list(free), [], [], check_missing=True, owners=owners)
        missing = found.missing_count or 0
        if not idle and not busy_lost(missing, 1, lost.get(Pool.FULL)):
            found = id_census(Pool.FULL, size, 0, list(free), [], [], check_missing=False, owners=owners)
        return [found]


class ToyReader:
    idle_check_strict = None  # the toy has no idle check of its own

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.censuses = (FreeListCensus(scheduler),)

    def read(self, reading: Reading, ask: ReadAsk) -> EngineSample:
        sched = self.scheduler
        free = reading.attr(sched, "free")
        held = reading.attr(sched, "held")
        waiting = reading.attr(sched, "waiting")
        size = reading.int_of(reading.attr(sched, "size"), "size")
        queues = {"running": len(held) if held is not MISSING else 0}
        queues["waiting"] = len(waiting) if waiting is not MISSING else 0
        phase = Phase.IDLE if not any(queues.values()) else Phase.BUSY
        if free is MISSING or held is MISSING or size is None:
            account = PoolAccount(Pool.FULL, size, unreadable=tuple(sorted(reading.failures)))
        else:
            account = PoolAccount(
                Pool.FULL, size, available=len(free), evictable=0, protected=0,
                held=sum(map(len, dict(held).values())), session_held=0, exactness=Exactness.EXACT,
            )  # fmt: skip
        return EngineSample(Role.UNIFIED, phase, {Pool.FULL: account}, queues)

    def identify(self, reading: Reading, role: Role) -> WorkerId:
        rank = reading.attr(self.scheduler, "rank", optional=True)
        return WorkerId(worker="", role=role, dp_rank=rank if isinstance(rank, int) else 0, engine="toy")

    def local_index(self, reading: Reading) -> int:
        rank = reading.attr(self.scheduler, "rank", optional=True)
        return rank if isinstance(rank, int) else 0
