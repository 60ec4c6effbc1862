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
from dataclasses import replace
from typing import Any

from poolwatch.model.rank import Exactness, Pool, PoolAccount, Role, WorkerId
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import EngineSample, ReadAsk, Release
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.core.schedule import CensusRule
from poolwatch.probe.vllm.census import Walk, walk_pool
from poolwatch.probe.vllm.encoder import EncoderCensus, encoder_account
from poolwatch.probe.vllm.holders import HolderIndex
from poolwatch.probe.vllm.identity import local_index, rank_identity
from poolwatch.probe.vllm.pool_terms import block_pool, managers
from poolwatch.probe.vllm.sample import Kinds, read_holders, take_sample
from poolwatch.probe.vllm.shape_check import check_shape
from poolwatch.probe.vllm.shapes import VllmShape, shape_of_family
from poolwatch.probe.vllm.waits import VllmWaits

__all__ = ["BlockWalk", "VllmReader", "coarse"]


def coarse(account: PoolAccount) -> PoolAccount:
    """The figures without a proven gap (an unverified release before its first balanced idle walk)."""
    return replace(account, held=None, exactness=Exactness.COARSE)


class BlockWalk:
    """The full walk of the block pool, as a census; it also rebuilds the holder index from scratch
    (a drift from the incremental counts is counted: ``HolderIndex.drift``)."""

    name = "blocks"
    pools = frozenset({Pool.FULL})

    def __init__(self, scheduler: Any, shape: VllmShape, index: HolderIndex, *, trusted: bool) -> None:
        self.scheduler, self.shape, self.index = scheduler, shape, index
        self.last: Walk | None = None
        self.trusted = trusted  # an unverified release: not until an idle walk balanced
        self.distrusted = ""  # why an unverified release's first idle walk did not balance

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
        if idle or self.last.census.clean():
            # the holder index checked against a fresh count: at idle, and when the walk found
            # nothing (a gap the walk cannot explain would be the index's own); a real fault's
            # walk leaves it be (the index is not what is wrong, and the walk costs enough)
            self._rebuild(pool, reading)
        if self.trusted:
            return [self.last]
        if idle:  # an unverified release: its first idle walk decides (nothing published before)
            found = {name: n for name, n in self.last.census.counts.items() if n}
            self.trusted = not found
            self.distrusted = "" if self.trusted else ", ".join(f"{k} {n}" for k, n in sorted(found.items()))
        return []

    def _rebuild(self, pool: Any, reading: Reading) -> None:
        fresh = HolderIndex()
        fresh.null_id = self.index.null_id
        read_holders(self.scheduler, self.shape, pool, fresh, reading, census=True)
        self.index.adopt(fresh, Kinds(self.scheduler, reading))


class VllmReader:
    """The reads of one EngineCore's scheduler."""

    idle_check_strict: bool | None = None  # vLLM has no idle check of its own

    def __init__(
        self, scheduler: object, config: ProbeConfig, release: Release, environ: Mapping[str, str]
    ) -> None:
        self.scheduler = scheduler
        self.shape = shape_of_family(release.family)
        self.waits = VllmWaits(scheduler, self.shape, environ)  # transfer owners and progress
        self.index = HolderIndex()
        self.walk = BlockWalk(scheduler, self.shape, self.index, trusted=release.verified)
        self.censuses = (self.walk, EncoderCensus(scheduler))

    @property
    def trusted(self) -> bool:
        """Whether the figures count as exact: a verified release, or an idle walk balanced."""
        return self.walk.trusted

    @property
    def distrusted(self) -> str:
        return self.walk.distrusted

    def read(self, reading: Reading, ask: ReadAsk) -> EngineSample:
        sample = take_sample(self.scheduler, self.shape, reading, self.index, evictable=self.walk.evictable)
        pools = sample.pools if self.trusted else {p: coarse(a) for p, a in sample.pools.items()}
        encoder = encoder_account(self.scheduler, reading)
        if encoder is not None:
            pools[Pool.ENCODER] = encoder
        mgrs = sample.managers if sample.held is not None else managers(self.scheduler, reading)
        waits = self.waits.read(sample.queues, mgrs, reading)
        return EngineSample(Role.UNIFIED, sample.phase, pools, sample.queues, detail=sample.held, waits=waits)

    def resync(self) -> None:
        """Bring the holder index up to date now (the free-time check, before it names a block)."""
        reading = Reading()
        pool = block_pool(self.scheduler, reading)
        if pool is not MISSING:
            read_holders(self.scheduler, self.shape, pool, self.index, reading, read=True)

    def identify(self, reading: Reading, role: Role) -> WorkerId:
        return rank_identity(self.scheduler, reading, self.shape)

    def local_index(self, reading: Reading) -> int:
        return local_index(self.scheduler, reading, self.shape)

    def shape_problems(self) -> tuple[str, ...]:
        """What the shape check finds missing or changed (empty: every field the probe reads is there)."""
        return check_shape(self.scheduler, self.shape)
