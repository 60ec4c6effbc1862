"""The SGLang room's identity censuses, as the neutral schedule runs them (scheduler thread).

* :class:`MambaCensus` (:mod:`~poolwatch.probe.sglang.mamba_census`): the Mamba free list against
  the tree's values and the live requests' slots (and, with int8 checkpoints, the checkpoint pool's
  free list against the tree's values), every ``census_interval_s`` (busy or idle) and on entering
  idle -- the moment SGLang's own idle check looks; never on a model without one;
* :class:`KvCensus` (:mod:`~poolwatch.probe.sglang.kv_census`): the full (or SWA) KV free list, every
  ``kv_census_interval_s`` while busy and on entering idle when ``idle_kv_census_gap_s`` have passed.

Both synchronise with the GPU, so they run at these low rates; a new exact gap in their pools runs
them at once, rate-limited (:mod:`poolwatch.probe.core.schedule`).  Cost: what each census module
says; timed by the probe for its health (``census_cost``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from poolwatch.model.rank import Pool
from poolwatch.probe.census.proofs import PoolCensus
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import EngineSample
from poolwatch.probe.core.reading import Reading
from poolwatch.probe.core.schedule import CensusRule
from poolwatch.probe.sglang.kv_census import kv_census
from poolwatch.probe.sglang.mamba_census import checkpoint_census, mamba_census
from poolwatch.probe.sglang.shapes import Shape

__all__ = ["KvCensus", "MambaCensus"]


class MambaCensus:
    name = "mamba"
    pools = frozenset({Pool.MAMBA, Pool.MAMBA_CKPT})

    def __init__(self, scheduler: Any, shape: Shape) -> None:
        self.scheduler, self.shape = scheduler, shape

    def rule(self, config: ProbeConfig) -> CensusRule:
        every = config.census_interval_s
        return CensusRule(busy_every_s=every, idle_every_s=every, idle_entry_gap_s=0.0)

    def run(
        self, sample: EngineSample, reading: Reading, *, idle: bool, lost: Mapping[Pool, int]
    ) -> Sequence[PoolCensus]:
        live = sample.detail.live
        found = [
            mamba_census(self.scheduler, self.shape, reading, live, idle=idle, lost=lost.get(Pool.MAMBA)),
            checkpoint_census(self.scheduler, reading, idle=idle, lost=lost.get(Pool.MAMBA_CKPT)),
        ]
        return [f for f in found if f is not None]


class KvCensus:
    name = "kv"
    pools = frozenset({Pool.FULL, Pool.SWA})

    def __init__(self, scheduler: Any, shape: Shape) -> None:
        self.scheduler, self.shape = scheduler, shape

    def rule(self, config: ProbeConfig) -> CensusRule:
        return CensusRule(
            busy_every_s=config.kv_census_interval_s,
            idle_every_s=None,
            idle_entry_gap_s=config.idle_kv_census_gap_s,
        )

    def run(
        self, sample: EngineSample, reading: Reading, *, idle: bool, lost: Mapping[Pool, int]
    ) -> Sequence[PoolCensus]:
        live = sample.detail.live
        found = kv_census(self.scheduler, self.shape, reading, live, idle=idle, lost=lost.get(Pool.FULL))
        return [found] if found is not None else []
