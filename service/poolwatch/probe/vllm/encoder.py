"""vLLM's encoder cache as a pool: the budget of encoder outputs (multimodal and encoder-decoder
models) the scheduler admits against (EngineCore thread; never raises, never writes).

``Scheduler.encoder_cache_manager`` counts the cache in encoder-embedding slots: ``cache_size``, its
``num_free_slots`` (what ``can_allocate`` admits against) and, for multimodal models
(``EncoderCacheManager``), ``num_freeable_slots`` -- the free ones and the cached outputs no request
references any more, evicted on demand.  So, coarse (no owner is counted)::

    size       cache_size
    available  num_free_slots
    evictable  num_freeable_slots - num_free_slots   (0 for the encoder-decoder manager, which caches none)

and ``size - available - evictable`` is what requests reference.  It is never below zero in a sound
manager: below zero, slots are counted free twice -- the budget exceeds the cache, so admission
control stops limiting encoder inputs (vLLM's encoder-decoder manager credits ``num_free_slots`` at
every decode step, 0.13 - 0.34: PR #51228) -- a surplus proven from these three figures alone.  At
idle nothing references an output, so a residual is slots lost.  A text-only model has a cache of
size 0: no account.  Three attribute reads per sample.

``num_free_slots`` is a counter, the only record of what is free: its census (:class:`EncoderCensus`,
every sample) counts the same quantity from the entries -- ``cache_size`` less the sizes the
multimodal manager keeps per entry, or, where the manager keeps none (the encoder-decoder one), the
bound a free count cannot pass, the cache's size.  A disagreement is a counter witness (the
PoolwatchCounterDrift page, pool ``encoder``): the slots are fine, the count is not, so it is never
paged as a double free -- the pool's figures are then the census's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from poolwatch.model.findings import Tripwire
from poolwatch.model.rank import Exactness, Pool, PoolAccount
from poolwatch.probe.census.readings import CounterReading
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.probe.core.engine import EngineSample
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.core.schedule import CensusRule

__all__ = ["EncoderCensus", "EncoderCount", "encoder_account", "encoder_count"]


def encoder_account(sched: Any, reading: Reading) -> PoolAccount | None:
    """The encoder cache's account, or ``None`` when the model has none."""
    mgr = reading.attr(sched, "encoder_cache_manager", optional=True)
    if mgr is MISSING or mgr is None:
        return None
    size = reading.int_of(reading.attr(mgr, "cache_size", optional=True), "encoder.cache_size")
    if not size:
        return None
    free = reading.int_of(reading.attr(mgr, "num_free_slots"), "encoder.num_free_slots")
    freeable_raw = reading.attr(mgr, "num_freeable_slots", optional=True)
    freeable = None if freeable_raw is MISSING else reading.int_of(freeable_raw, "encoder.num_freeable_slots")
    evictable = 0 if free is None or freeable is None else max(0, freeable - free)
    return PoolAccount(
        pool=Pool.ENCODER,
        size=size,
        available=free,
        evictable=evictable if free is not None else None,
        exactness=Exactness.COARSE,
        unreadable=tuple(sorted(k for k in reading.failures if k.startswith("encoder."))),
    )


_COUNTER = "encoder_cache_manager.num_free_slots"


@dataclass(frozen=True, slots=True)
class EncoderCount:
    """The encoder cache's free count against what its entries leave free (a census proof)."""

    size: int
    reported: int  # ``num_free_slots``
    census: int  # the cache less its entries' sizes; or, where the manager keeps no sizes, the bound
    exact: bool  # counted from the entries (else the bound: no slot can be free beyond the cache)

    def tripwires(self, hook: str, seq: int) -> list[Tripwire]:
        return []

    def counters(self) -> tuple[CounterReading, ...]:
        return (CounterReading(Pool.ENCODER, "available", _COUNTER, self.reported, self.census),)

    def body(self) -> dict[str, Any]:
        return {
            "pool": Pool.ENCODER.value,
            "engine": "vllm",
            "size": self.size,
            "free_counter": self.reported,
            "free_counted": self.census,
            "counted_from": "entries" if self.exact else "bound",
        }


def encoder_count(sched: Any, reading: Reading) -> EncoderCount | None:
    """The census of the encoder cache: ``cache_size`` less the sizes of the entries it holds
    (``num_embeds_by_hash``, the multimodal manager's, 0.3x); where the manager keeps no sizes (the
    encoder-decoder one, older releases) the bound ``min(num_free_slots, cache_size)``: a free count
    above the cache counts slots that are not there.  ``None``: no encoder cache."""
    mgr = reading.attr(sched, "encoder_cache_manager", optional=True)
    if mgr is MISSING or mgr is None:
        return None
    size = reading.int_of(reading.attr(mgr, "cache_size", optional=True), "encoder.cache_size")
    free = reading.int_of(reading.attr(mgr, "num_free_slots", optional=True), "encoder.num_free_slots")
    if not size or free is None:
        return None
    sizes = getattr(mgr, "num_embeds_by_hash", None)
    if isinstance(sizes, dict):
        return EncoderCount(size, free, size - sum(sizes.values()), True)
    return EncoderCount(size, free, min(free, size), False)


class EncoderCensus:
    """The encoder cache's census (three reads and a sum over its entries: every sample)."""

    name = "encoder"
    pools = frozenset({Pool.ENCODER})

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def rule(self, config: ProbeConfig) -> CensusRule:
        return CensusRule(busy_every_s=0.0, idle_every_s=0.0)

    def run(
        self, sample: EngineSample, reading: Reading, *, idle: bool, lost: Mapping[Pool, int]
    ) -> Sequence[EncoderCount]:
        found = encoder_count(self.scheduler, reading)
        return [found] if found is not None else []
