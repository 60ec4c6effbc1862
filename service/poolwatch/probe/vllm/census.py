"""The full walk of a vLLM block pool: every block's ``ref_cnt`` against its owners (EngineCore thread).

O(blocks): the free queue walked from both ends, one ``ref_cnt`` read per block, one pass over the
owners' lists.  About 5 ms per 100k blocks on the machines measured (docs/vllm.md), so it runs at
idle and at a low rate while busy (``POOLWATCH_PROBE_KV_CENSUS_INTERVAL``), never every step.  The
proof itself is pure (:func:`~poolwatch.probe.census.refcount.refcount_census`); this module reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from poolwatch.model import Phase, Pool
from poolwatch.probe.census.refcount import RefCensus, refcount_census
from poolwatch.probe.core.access import MISSING, Reading
from poolwatch.probe.vllm.readers import owner_lists, walk_free
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = ["CENSUS_SCHEMA", "Walk", "census_doc", "walk_pool"]

CENSUS_SCHEMA = "poolwatch.census"
_REF = attrgetter("ref_cnt")


@dataclass(frozen=True, slots=True)
class Walk:
    census: RefCensus
    evictable: int  # free blocks that carry a hash (prefix-cache eviction candidates)


def _connector(sched: Any, reading: Reading) -> bool:
    """Whether something outside the owners' lists may hold references (a KV connector/offloader)."""
    return reading.attr(sched, "connector", optional=True) not in (None, MISSING)


def walk_pool(sched: Any, shape: VllmShape, pool: Any, reading: Reading) -> Walk:
    blocks = pool.blocks
    n = len(blocks)
    queue = pool.free_block_queue
    forward = walk_free(pool, n + 2)
    backward = walk_free(pool, n + 2, backward=True)
    owners: dict[int, list[str]] = {}
    stale: dict[int, list[str]] = {}
    for kind, owner, listed in owner_lists(sched, shape, pool, reading):
        target = stale if kind == "stale" else owners
        for block in listed:
            target.setdefault(block.block_id, []).append(owner)
    null_id = pool.null_block.block_id
    census = refcount_census(
        Pool.FULL,
        free=forward,
        free_back=backward,
        free_counter=queue.num_free_blocks,
        ref_cnt=list(map(_REF, blocks)),
        owners=owners,
        null_id=null_id,
        null_marked=[b.block_id for b in blocks if b.is_null],
        pins_possible=_connector(sched, reading),
        stale=stale,
    )
    queued = set(forward) | set(backward)
    evictable = sum(1 for i in queued if 0 <= i < n and blocks[i].block_hash is not None)
    return Walk(census, evictable)


def census_doc(
    walk: Walk, *, seq: int, hook: str, taken_at: float, cost: float, phase: Phase
) -> dict[str, Any]:
    """The ``GET /v1/census`` detail (the same envelope as SGLang's, a ``refcount`` pool body)."""
    c = walk.census
    pool: dict[str, Any] = {
        "pool": c.pool.value,
        "engine": "vllm",
        "blocks": c.blocks,
        "null_id": c.null_id,
        "free_counter": c.free_counter,
        "free_walked": c.free_walked,
        "evictable": walk.evictable,
        "pinned": c.pinned,
        "counts": dict(c.counts),
        **{name: list(ids) for name, ids in c.findings().items()},
        "owners": {str(block): list(who) for block, who in c.owners.items()},
        "balanced_ids": c.clean(),
    }
    return {
        "schema": CENSUS_SCHEMA,
        "version": 1,
        "seq": seq,
        "hook": hook,
        "phase": phase.value,
        "taken_at": taken_at,
        "cost_seconds": cost,
        "pools": [pool],
    }
