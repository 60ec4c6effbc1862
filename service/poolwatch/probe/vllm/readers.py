"""Reading a vLLM V1 scheduler's block pool and who holds its blocks (never raises; never writes).

Everything is read at a step boundary on the EngineCore thread: Python ints, ``len()`` and the
block objects' plain fields.  Owners of a block are the single-type managers' ``req_to_blocks``
lists (one per KV cache group and request), the scheduler's ``deferred_frees`` (blocks popped from
a manager whose return waits for an in-flight step, 0.33) and the managers' pending copy-on-write
retentions.  A request the scheduler still knows but that has finished keeps its blocks while a KV
connector transfers them (vLLM's counterpart of SGLang's session-held); a list whose request the
scheduler no longer knows at all is stale: its blocks are held by no one (a leak).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from poolwatch.probe.core.access import MISSING, Reading
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = ["Holders", "block_pool", "holders", "managers", "queue_depths", "walk_free"]

_ID = attrgetter("block_id")


@dataclass(slots=True)
class Holders:
    """Distinct block ids of one pool by kind of holder (the cheap, every-sample view)."""

    live: set[int] = field(default_factory=set)  # requests running or waiting
    transfer: set[int] = field(default_factory=set)  # finished, blocks kept for a KV transfer
    deferred: set[int] = field(default_factory=set)  # popped, return fenced behind a step
    stale: set[int] = field(default_factory=set)  # listed for a request the scheduler forgot
    stale_requests: list[str] = field(default_factory=list)


def block_pool(sched: Any, reading: Reading) -> Any:
    return reading.attr(sched, "kv_cache_manager.block_pool")


def managers(sched: Any, reading: Reading) -> tuple[Any, ...]:
    found = reading.attr(sched, "kv_cache_manager.coordinator.single_type_managers")
    return tuple(found) if found is not MISSING else ()


def _own_lists(pool: Any, mgrs: Iterable[Any], reading: Reading) -> Iterator[tuple[str, list[Any]]]:
    """``(request id, blocks)`` of every manager bound to ``pool`` (a HiSparse host pool is another)."""
    for index, mgr in enumerate(mgrs):
        if reading.attr(mgr, "block_pool", optional=True) is not pool:
            continue
        lists = reading.attr(mgr, "req_to_blocks")
        if lists is MISSING:
            continue
        try:
            yield from list(lists.items())
        except Exception as exc:
            reading.fail(f"single_type_managers[{index}].req_to_blocks", exc)


def _cow(pool: Any, mgrs: Iterable[Any], reading: Reading) -> Iterator[tuple[str, list[Any]]]:
    for mgr in mgrs:
        pending = reading.attr(mgr, "_pending_cow_copies", optional=True)
        if pending and reading.attr(mgr, "block_pool", optional=True) is pool:
            for source, copy in list(pending):
                yield "cow-source", [source]
                yield "cow-copy", [copy]


def _deferred(sched: Any, shape: VllmShape, reading: Reading) -> Iterator[tuple[str, list[Any]]]:
    if not shape.deferred_frees:
        return
    entries = reading.attr(sched, "deferred_frees")
    if entries is MISSING:
        return
    for fence, blocks in list(entries):
        yield f"deferred@{fence}", list(blocks)


def _finished(request: Any, reading: Reading) -> bool:
    try:
        return request.is_finished() is True
    except Exception as exc:
        reading.fail("request.is_finished()", exc)
        return False


def owner_lists(
    sched: Any, shape: VllmShape, pool: Any, reading: Reading
) -> Iterator[tuple[str, str, list[Any]]]:
    """``(kind, owner, blocks)`` with kind ``live``, ``transfer``, ``deferred`` or ``stale``."""
    requests = reading.attr(sched, "requests")
    known: dict[str, Any] = dict(requests) if requests is not MISSING else {}
    mgrs = managers(sched, reading)
    for rid, blocks in _own_lists(pool, mgrs, reading):
        request = known.get(rid)
        if request is None:
            yield "stale", rid, blocks
        else:
            yield ("transfer" if _finished(request, reading) else "live"), rid, blocks
    for owner, blocks in _deferred(sched, shape, reading):
        yield "deferred", owner, blocks
    for owner, blocks in _cow(pool, mgrs, reading):
        yield "deferred", owner, blocks


def holders(sched: Any, shape: VllmShape, pool: Any, reading: Reading) -> Holders:
    """The distinct ids of each kind of holder (the null block left out)."""
    out = Holders()
    sets = {"live": out.live, "transfer": out.transfer, "deferred": out.deferred, "stale": out.stale}
    for kind, owner, blocks in owner_lists(sched, shape, pool, reading):
        if blocks:
            sets[kind].update(map(_ID, blocks))
            if kind == "stale":
                out.stale_requests.append(owner)
    null = reading.attr(pool, "null_block.block_id", optional=True)
    for ids in sets.values():
        ids.discard(null)
    return out


def queue_depths(sched: Any, shape: VllmShape, reading: Reading) -> dict[str, int]:
    out: dict[str, int] = {}
    names = ["running", "waiting"] + (["kv_holding_waiting"] if shape.kv_holding_waiting else [])
    for name in names:
        queue = reading.attr(sched, name)
        if queue is not MISSING:
            out[name] = reading.guard(name, functools.partial(len, queue), 0)
    requests = reading.attr(sched, "requests")
    if requests is not MISSING:
        out["requests"] = len(requests)
    if shape.deferred_frees:
        deferred = reading.attr(sched, "deferred_frees")
        if deferred is not MISSING:
            out["deferred_frees"] = len(deferred)
    return out


def walk_free(pool: Any, limit: int, *, backward: bool = False) -> list[Any]:
    """The blocks on the free queue from its head (or tail), at most ``limit`` steps (a corrupt
    queue can loop).  A block appended while already queued keeps its old predecessor's link, so the
    forward walk skips part of the queue and the backward walk meets the block twice."""
    queue = pool.free_block_queue
    start, end = (
        (queue.fake_free_list_tail, queue.fake_free_list_head)
        if backward
        else (queue.fake_free_list_head, queue.fake_free_list_tail)
    )
    nodes: list[Any] = []
    append = nodes.append
    if backward:
        node = start.prev_free_block
        for _ in range(limit):
            if node is None or node is end:
                break
            append(node)
            node = node.prev_free_block
        return nodes
    node = start.next_free_block
    for _ in range(limit):
        if node is None or node is end:
            break
        append(node)
        node = node.next_free_block
    return nodes
