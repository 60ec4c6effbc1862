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
"""

from __future__ import annotations

from typing import Any

from poolwatch.model.rank import Exactness, Pool, PoolAccount
from poolwatch.probe.core.reading import MISSING, Reading

__all__ = ["encoder_account"]


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
