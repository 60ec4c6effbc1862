"""The cheap path: one exact account of a vLLM block pool, read at a step boundary.

O(requests + blocks appended since the last sample): the free counter, and the distinct blocks each
kind of holder lists, from the incremental :class:`~poolwatch.probe.vllm.holders.HolderIndex` (the
lists of managers that edit them in place, the deferred frees, pins and reserved blocks are read
afresh: they are few).  Mapped onto the pool account every engine shares
(:class:`poolwatch.model.rank.PoolAccount`)::

    size          N - 1 (the null block is taken at start and never counted)
    available     free blocks without a hash      } their sum is the queue's counter, exact every
    evictable     free blocks with a hash (cached) } sample; the split is the last full walk's
    protected     0 (vLLM keeps no separate lock: a cached block in use is simply held)
    held          blocks listed by running/waiting requests, awaiting a deferred free, pinned, reserved
    session_held  blocks of finished requests kept while a KV connector transfers them

so ``gap = size - free - held - session_held`` is vLLM's invariant (a) with the owners of (c):
negative after a double free (a block both free and held, or queued twice), positive after a
leak (a block held by no one: an aborted request's blocks never returned, a stale list).  A pool
some HiSparse manager lists without holding (0.30+) is exported coarse: no gap is proven there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from poolwatch.model.rank import Exactness, Phase, Pool, PoolAccount
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.vllm.holders import LIVE, STALE, Held, HolderIndex, lists_of
from poolwatch.probe.vllm.pool_terms import (
    block_pool,
    connector_pins,
    cow_lists,
    deferred_lists,
    hisparse,
    kind_of,
    managers,
    pin_lists,
    queue_depths,
    reserved_blocks,
)
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = ["Kinds", "VllmSample", "read_holders", "take_sample"]

_ID = attrgetter("block_id")


@dataclass(frozen=True, slots=True)
class VllmSample:
    phase: Phase
    pools: dict[Pool, PoolAccount]
    queues: dict[str, int]
    held: Held | None
    managers: tuple[Any, ...] = ()  # the single-type managers as this read found them


def _phase(queues: dict[str, int]) -> Phase:
    if "requests" not in queues:
        return Phase.UNKNOWN
    return Phase.IDLE if queues["requests"] == 0 and not queues.get("deferred_frees") else Phase.BUSY


class Kinds:
    """Each request's kind, asked only for the requests that list blocks, once per sample."""

    def __init__(self, sched: Any, reading: Reading) -> None:
        requests = reading.attr(sched, "requests")
        self.requests: Mapping[str, Any] = requests if requests is not MISSING else {}
        self._reading = reading
        self._memo: dict[str, str] = {}

    def __call__(self, rid: str) -> str:
        kind = self._memo.get(rid)
        if kind is None:
            request = self.requests.get(rid)
            kind = STALE if request is None else kind_of(request, self._reading)
            self._memo[rid] = kind
        return kind


def read_holders(
    sched: Any,
    shape: VllmShape,
    pool: Any,
    index: HolderIndex,
    reading: Reading,
    *,
    census: bool = False,
    read: bool = False,
    mgrs: tuple[Any, ...] | None = None,
) -> Held:
    """Bring ``index`` up to date and count the distinct blocks each kind holds (``read``: reading
    every pending entry too; ``census``: and re-telling every request's kind; ``mgrs``: the
    managers, when the caller read them already)."""
    mgrs = managers(sched, reading) if mgrs is None else mgrs
    index.null_id = reading.attr(pool, "null_block.block_id", optional=True)
    kinds = Kinds(sched, reading)
    append_only: list[tuple[int, Any]] = []
    afresh: list[tuple[int, Any]] = []
    for i, lists, incremental in lists_of(pool, mgrs, reading):
        (append_only if incremental else afresh).append((i, lists))
    reading.guard("holders", lambda: index.sync(append_only, kinds.requests, kinds, read=read), None)
    if census:
        reading.guard("holders.kinds", lambda: index.kinds_at_census(kinds), None)
    extra: set[int] = set()
    session: set[int] = set()
    for _, lists in afresh:
        for rid, blocks in list(lists.items()):
            kind = kinds(rid)
            if kind != STALE:
                (extra if kind == LIVE else session).update(map(_ID, blocks))
    owners = [blocks for _, blocks in deferred_lists(sched, shape, pool, reading)]
    owners += [blocks for _, blocks in cow_lists(pool, mgrs, reading)]
    owners += [blocks for _, blocks in pin_lists(sched, shape, reading)]
    owners += [blocks for _, blocks in connector_pins(sched, pool)]
    owners.append(reserved_blocks(pool, mgrs, shape, reading))
    for blocks in owners:
        extra.update(map(_ID, blocks))
    if index.null_id is not None:
        extra.discard(index.null_id)
        session.discard(index.null_id)
    return index.held(extra, session)


def take_sample(
    sched: Any, shape: VllmShape, reading: Reading, index: HolderIndex, *, evictable: int = 0
) -> VllmSample:
    """Read the pool and its holders; ``evictable`` is the last walk's count of cached free blocks."""
    queues = queue_depths(sched, shape, reading)
    pool = block_pool(sched, reading)
    if pool is MISSING:
        return VllmSample(_phase(queues), {}, queues, None)
    n = reading.int_of(reading.attr(pool, "num_gpu_blocks"), "block_pool.num_gpu_blocks")
    free = reading.int_of(reading.attr(pool, "free_block_queue.num_free_blocks"), "num_free_blocks")
    mgrs = managers(sched, reading)
    held = read_holders(sched, shape, pool, index, reading, mgrs=mgrs)
    if n is None or free is None:
        account = PoolAccount(Pool.FULL, n, unreadable=tuple(sorted(reading.failures)))
        return VllmSample(_phase(queues), {Pool.FULL: account}, queues, held, mgrs)
    cached = max(0, min(evictable, free))
    exact = not (shape.hisparse and hisparse(mgrs))
    account = PoolAccount(
        pool=Pool.FULL,
        size=n - 1,
        available=free - cached,
        evictable=cached,
        protected=0,
        held=held.held if exact else None,
        session_held=held.session,
        exactness=Exactness.EXACT if exact else Exactness.COARSE,
        unreadable=tuple(sorted(reading.failures)),
    )
    return VllmSample(_phase(queues), {Pool.FULL: account}, queues, held, mgrs)
