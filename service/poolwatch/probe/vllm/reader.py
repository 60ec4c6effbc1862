"""One vLLM EngineCore's scheduler, as the vLLM room reads it: the cheap sample, who it is, and the
full walk of its block pool as a census (EngineCore thread).

The walk (:func:`~poolwatch.probe.vllm.census.walk_pool`) is O(blocks), so it runs off the hot path
on the neutral schedule (:mod:`poolwatch.probe.core.schedule`): every
``POOLWATCH_PROBE_KV_CENSUS_INTERVAL`` while busy, at the first idle sample after work and then at
most every ``idle_kv_census_gap_s`` while idle, and at once -- rate-limited like every engine's --
when a sample shows a new gap, so the blocks are named by id at the next step boundary.  The split
of the free count into cached (evictable) and plain blocks is the last walk's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from poolwatch.model import Pool, Role, WorkerId
from poolwatch.probe.core.access import MISSING, Reading
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import EngineSample, ReadAsk, Release
from poolwatch.probe.core.schedule import CensusRule
from poolwatch.probe.vllm.census import Walk, walk_pool
from poolwatch.probe.vllm.identity import local_index, rank_identity
from poolwatch.probe.vllm.readers import block_pool
from poolwatch.probe.vllm.sample import take_sample
from poolwatch.probe.vllm.shapes import SHAPES, VllmShape

__all__ = ["BlockWalk", "VllmReader"]


class BlockWalk:
    """The full walk of the block pool, as a census."""

    name = "blocks"
    pools = frozenset({Pool.FULL})

    def __init__(self, scheduler: Any, shape: VllmShape) -> None:
        self.scheduler, self.shape = scheduler, shape
        self.last: Walk | None = None

    @property
    def evictable(self) -> int:
        """The last walk's count of cached free blocks (0 before the first)."""
        return self.last.evictable if self.last is not None else 0

    def rule(self, config: ProbeConfig) -> CensusRule:
        return CensusRule(
            busy_every_s=config.kv_census_interval_s,
            idle_every_s=config.idle_kv_census_gap_s,
            idle_entry_gap_s=0.0,
        )

    def run(
        self, sample: EngineSample, reading: Reading, *, idle: bool, lost: Mapping[Pool, int]
    ) -> Sequence[Walk]:
        pool = block_pool(self.scheduler, reading)
        if pool is MISSING:
            return []
        self.last = walk_pool(self.scheduler, self.shape, pool, reading)
        return [self.last]


class VllmReader:
    """The reads of one EngineCore's scheduler."""

    idle_check_strict: bool | None = None  # vLLM has no idle check of its own

    def __init__(self, scheduler: object, config: ProbeConfig, release: Release) -> None:
        self.scheduler = scheduler
        self.shape = next(s for s in SHAPES if s.family == release.family)
        self.walk = BlockWalk(scheduler, self.shape)
        self.censuses = (self.walk,)

    def read(self, reading: Reading, ask: ReadAsk) -> EngineSample:
        sample = take_sample(self.scheduler, self.shape, reading, evictable=self.walk.evictable)
        return EngineSample(Role.UNIFIED, sample.phase, sample.pools, sample.queues, detail=sample.holders)

    def identify(self, reading: Reading, role: Role) -> WorkerId:
        return rank_identity(self.scheduler, reading)

    def local_index(self, reading: Reading) -> int:
        return local_index(self.scheduler, reading)
