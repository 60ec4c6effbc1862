"""The cheap path: one exact account of a vLLM block pool, read at a step boundary.

O(blocks listed by the requests): the free counter, and the distinct ids of the blocks each kind
of holder lists (``set.update`` over the lists, no per-block Python work).  Mapped onto the pool
account every engine shares (:class:`poolwatch.model.PoolAccount`)::

    size          N - 1 (the null block is taken at start and never counted)
    available     free blocks without a hash      } their sum is the queue's counter, exact every
    evictable     free blocks with a hash (cached) } sample; the split is the last full walk's
    protected     0 (vLLM keeps no separate lock: a cached block in use is simply held)
    held          blocks listed by running/waiting requests, or awaiting a deferred free
    session_held  blocks of finished requests kept while a KV connector transfers them

so ``gap = size - free - held - session_held`` is vLLM's invariant (a) with the owners of (c):
negative after a double free (a block both free and held, or queued twice), positive after a
leak (a block held by no one: an aborted request's blocks never returned, a stale list).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from poolwatch.model import Exactness, Phase, Pool, PoolAccount
from poolwatch.probe.core.access import MISSING, Reading
from poolwatch.probe.vllm.readers import Holders, block_pool, holders, queue_depths
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = ["VllmSample", "take_sample"]


@dataclass(frozen=True, slots=True)
class VllmSample:
    phase: Phase
    pools: dict[Pool, PoolAccount]
    queues: dict[str, int]
    holders: Holders | None


def _phase(queues: dict[str, int]) -> Phase:
    if "requests" not in queues:
        return Phase.UNKNOWN
    return Phase.IDLE if queues["requests"] == 0 and not queues.get("deferred_frees") else Phase.BUSY


def take_sample(sched: Any, shape: VllmShape, reading: Reading, *, evictable: int = 0) -> VllmSample:
    """Read the pool and its holders; ``evictable`` is the last walk's count of cached free blocks."""
    queues = queue_depths(sched, shape, reading)
    pool = block_pool(sched, reading)
    if pool is MISSING:
        return VllmSample(_phase(queues), {}, queues, None)
    n = reading.int_of(reading.attr(pool, "num_gpu_blocks"), "block_pool.num_gpu_blocks")
    free = reading.int_of(reading.attr(pool, "free_block_queue.num_free_blocks"), "num_free_blocks")
    held = holders(sched, shape, pool, reading)
    if n is None or free is None:
        account = PoolAccount(Pool.FULL, n, unreadable=tuple(sorted(reading.failures)))
        return VllmSample(_phase(queues), {Pool.FULL: account}, queues, held)
    live = held.live | held.deferred
    session = held.transfer - live
    cached = max(0, min(evictable, free))
    account = PoolAccount(
        pool=Pool.FULL,
        size=n - 1,
        available=free - cached,
        evictable=cached,
        protected=0,
        held=len(live),
        session_held=len(session),
        exactness=Exactness.EXACT,
        unreadable=tuple(sorted(reading.failures)),
    )
    return VllmSample(_phase(queues), {Pool.FULL: account}, queues, held)
