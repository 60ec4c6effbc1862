"""The full walk of a vLLM block pool: every block's ``ref_cnt`` against its owners (EngineCore thread).

O(blocks): the free queue walked from its head (and from its tail when the walk falls short of the
counter), one ``ref_cnt`` read per block, one counting pass over the owners' lists; Python work per
block only for the suspects, and the owners' names looked up only for findings.  Milliseconds per
10k blocks (docs/engines/vllm.md), so it runs at idle and at a low rate while busy
(``POOLWATCH_PROBE_KV_CENSUS_INTERVAL``), never every step.  The proof itself is pure
(:func:`~poolwatch.probe.census.refcount.refcount_census`); this module reads.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter
from typing import Any

from poolwatch.model.findings import Tripwire
from poolwatch.model.rank import Pool
from poolwatch.probe.census.readings import CounterReading
from poolwatch.probe.census.refcount import RefCensus, refcount_census
from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.vllm.pool_terms import hisparse, managers, owner_lists, reserved_blocks, walk_free
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = ["Walk", "walk_pool"]

_REF = attrgetter("ref_cnt")
_ID = attrgetter("block_id")
_NULL = attrgetter("is_null")
_HASH = attrgetter("block_hash")
_COUNTER = "block_pool.free_block_queue.num_free_blocks"


@dataclass(frozen=True, slots=True)
class Walk:
    """What one walk proved (a :class:`~poolwatch.probe.core.engine.Proof`)."""

    census: RefCensus
    evictable: int  # free blocks that carry a hash (prefix-cache eviction candidates)

    def tripwires(self, hook: str, seq: int) -> list[Tripwire]:
        return self.census.tripwires(hook, seq)

    def counters(self) -> tuple[CounterReading, ...]:
        """The free queue's own counter against the blocks its walk reached (the counter witness).
        Only where the queue itself is sound -- no block queued twice, no null block on it: then
        a counter that differs counts blocks that are not there (vLLM's ``popleft_n`` trusts it,
        and fails its assertion when an allocation drains the queue); a corrupt queue is a double
        free the walk names instead."""
        c = self.census
        if c.duplicates or c.null_misuse:
            return ()
        return (CounterReading(c.pool, "available", _COUNTER, c.free_counter, c.free_walked),)

    def body(self) -> dict[str, Any]:
        """The walked pool's body in ``GET /v1/census`` (in the same envelope as SGLang's)."""
        c = self.census
        return {
            "pool": c.pool.value,
            "engine": "vllm",
            "blocks": c.blocks,
            "null_id": c.null_id,
            "free_counter": c.free_counter,
            "free_walked": c.free_walked,
            "evictable": self.evictable,
            "pinned": c.pinned,
            "counts": dict(c.counts),
            **{name: list(ids) for name, ids in c.findings().items()},
            "owners": {str(block): list(who) for block, who in c.owners.items()},
            "balanced_ids": c.clean(),
        }


def _connector(sched: Any, reading: Reading) -> bool:
    """Whether something outside the owners' lists may hold references (a KV connector/offloader)."""
    return reading.attr(sched, "connector", optional=True) not in (None, MISSING)


def _names(sched: Any, shape: VllmShape, pool: Any, wanted: set[int]) -> dict[int, list[str]]:
    """The owners (and stale requests) listing each wanted block: a second pass, only on findings."""
    out: dict[int, list[str]] = {}
    for _kind, owner, listed in owner_lists(sched, shape, pool, Reading()):
        if not wanted.isdisjoint(map(_ID, listed)):
            for block in listed:
                if block.block_id in wanted:
                    out.setdefault(block.block_id, []).append(owner)
    return out


def walk_pool(sched: Any, shape: VllmShape, pool: Any, reading: Reading) -> Walk:
    mgrs = managers(sched, reading)
    blocks = pool.blocks
    n = len(blocks)
    counter = pool.free_block_queue.num_free_blocks
    forward = walk_free(pool, n + 2)
    ids = list(map(_ID, forward))
    # a block queued twice cuts the forward walk short; only then is the tail's walk needed
    backward = walk_free(pool, n + 2, backward=True) if len(ids) != counter else []
    owned: Counter[int] = Counter()
    for kind, _owner, listed in owner_lists(sched, shape, pool, reading):
        if kind != "stale":
            owned.update(map(_ID, listed))
    census = refcount_census(
        Pool.FULL,
        free=ids,
        free_back=list(map(_ID, backward)),
        free_counter=counter,
        ref_cnt=list(map(_REF, blocks)),
        owned=owned,
        names=lambda wanted: _names(sched, shape, pool, wanted),
        null_id=pool.null_block.block_id,
        null_marked=list(compress(range(n), map(_NULL, blocks))),
        pins_possible=_connector(sched, reading),
        reserved=frozenset(map(_ID, reserved_blocks(pool, mgrs, shape, reading))),
        owners_exact=not (shape.hisparse and hisparse(mgrs)),
    )
    queued = {id(b): b for b in (*forward, *backward)}.values() if backward else forward
    hashes = list(map(_HASH, queued))
    return Walk(census, len(hashes) - hashes.count(None))
