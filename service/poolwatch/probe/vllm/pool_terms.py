"""Reading a vLLM V1 scheduler's block pool and who holds its blocks (never raises; never writes).

Everything is read at a step boundary on the EngineCore thread: Python ints, ``len()`` and the
block objects' plain fields.  The owners of a block, per release family
(:mod:`~poolwatch.probe.vllm.shapes`):

* the single-type managers' ``req_to_blocks`` lists (one per KV cache group and request).  A
  request the scheduler still knows but that has finished keeps its blocks while a KV connector
  transfers them (vLLM's counterpart of SGLang's session-held); a list whose request the scheduler
  no longer knows at all is stale: its blocks are held by no one (a leak);
* the scheduler's ``deferred_frees`` (0.24+: blocks popped from a manager whose return waits for an
  in-flight step; from 0.30 they may be another pool's, told by ``KVCacheBlock.pool``), the
  managers' pending copy-on-write pairs (0.26+) and the KV cache manager's partial-tail pins
  (0.27-0.28); the SimpleCPUOffload connector's in-flight stores (0.19.1+: each pins the GPU blocks
  it copies to the host, one reference a listing, until the worker reports it done);
* reserved, not owned: a sink-attention manager's ``sink_blocks`` (0.14-0.29) sit off the free
  queue at ``ref_cnt`` 0 for the engine's life.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from operator import attrgetter
from typing import Any

from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = [
    "block_pool",
    "connector_pins",
    "cow_lists",
    "deferred_lists",
    "hisparse",
    "in_pool",
    "kind_of",
    "managers",
    "owner_lists",
    "pin_lists",
    "queue_depths",
    "reserved_blocks",
    "side_owners",
    "walk_free",
]

_ID = attrgetter("block_id")


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


def cow_lists(pool: Any, mgrs: Iterable[Any], reading: Reading) -> Iterator[tuple[str, list[Any]]]:
    for mgr in mgrs:
        pending = reading.attr(mgr, "_pending_cow_copies", optional=True)
        if pending and reading.attr(mgr, "block_pool", optional=True) is pool:
            for source, copy in list(pending):
                yield "cow-source", [source]
                yield "cow-copy", [copy]


def in_pool(block: Any, pool: Any, shape: VllmShape) -> bool:
    """Whether ``block`` is ``pool``'s (from 0.30 a deferred list may carry another pool's blocks)."""
    if not shape.block_pool_ref:
        return True
    owner = getattr(block, "pool", None)
    if shape.block_pool_ref == "weakref" and owner is not None:
        owner = owner()
    return owner is None or owner is pool


def deferred_lists(
    sched: Any, shape: VllmShape, pool: Any, reading: Reading
) -> Iterator[tuple[str, list[Any]]]:
    """The deferred frees' blocks of ``pool`` (0.24+), one list per entry."""
    if not shape.deferred_frees:
        return
    entries = reading.attr(sched, "deferred_frees")
    if entries is MISSING:
        return
    for fence, blocks in list(entries):
        yield f"deferred@{fence}", [b for b in blocks if in_pool(b, pool, shape)]


def pin_lists(sched: Any, shape: VllmShape, reading: Reading) -> Iterator[tuple[str, list[Any]]]:
    """The KV cache manager's partial-tail pins (0.27-0.28): owners beside the requests' lists."""
    if not shape.tail_pins:
        return
    pins = reading.attr(sched, "kv_cache_manager._partial_tail_pins", optional=True)
    if pins is not MISSING and pins is not None:
        for rid, blocks in list(pins.items()):
            yield f"pin@{rid}", list(blocks)


def connector_pins(sched: Any, pool: Any) -> Iterator[tuple[str, list[Any]]]:
    """The GPU blocks of each in-flight store of the scheduler's SimpleCPUOffload connector: none
    without one, or where it cannot be read (never raises)."""
    try:
        connector = getattr(sched, "connector", None)
        if connector is None:  # the usual case: nothing pinned, and no exception built to say so
            return iter(())
        manager = connector.scheduler_manager
        owner, stores = manager._gpu_block_pool, list(manager._store_event_to_blocks.items())
        pins = [(f"store@{e}", [owner.blocks[i] for i in t.gpu_block_ids]) for e, t in stores]
    except Exception:
        return iter(())
    return iter(pins if owner is pool else ())


def reserved_blocks(pool: Any, mgrs: Iterable[Any], shape: VllmShape, reading: Reading) -> list[Any]:
    """Blocks a manager took off the queue for good (sink attention's, 0.14-0.29)."""
    if not shape.sink_blocks:
        return []
    out: list[Any] = []
    for mgr in mgrs:
        sink = reading.attr(mgr, "sink_blocks", optional=True)
        if sink and reading.attr(mgr, "block_pool", optional=True) is pool:
            out += list(sink)
    return out


def side_owners(sched: Any, shape: VllmShape, mgrs: Iterable[Any]) -> dict[int, int]:
    """Occurrences of each block in the owners beside the requests' lists: the deferred frees, the
    pending copy-on-write pairs, the partial-tail pins and a connector's store pins, as far as the
    family has them ({} when none holds anything: the usual case, a few attribute reads).  Read at
    every free, so plain ``getattr``; the pool's own blocks only (``in_pool`` is left to the census:
    the guard is off where another pool's blocks can appear, HiSparse)."""
    lists: list[Iterable[Any]] = []
    kvm = getattr(sched, "kv_cache_manager", None)  # (each owner gone through only when it holds some)
    if shape.deferred_frees and (deferred := getattr(sched, "deferred_frees", None)):
        lists += [blocks for _fence, blocks in deferred]
    if shape.cow:
        for mgr in mgrs:
            pending = getattr(mgr, "_pending_cow_copies", None)
            if pending:
                lists += list(pending)
    if shape.tail_pins and (pins := getattr(kvm, "_partial_tail_pins", None)):
        lists += list(pins.values())
    if getattr(sched, "connector", None) is not None:
        lists += [blocks for _event, blocks in connector_pins(sched, getattr(kvm, "block_pool", None))]
    out: dict[int, int] = {}
    for blocks in lists:
        for i in map(_ID, blocks):
            out[i] = out.get(i, 0) + 1
    return out


def hisparse(mgrs: Iterable[Any]) -> bool:
    """Whether a HiSparse manager is present: it lists pages it holds no reference to (0.30+)."""
    return any(type(m).__name__.startswith(("HiSparse", "_HiSparse")) for m in mgrs)


def _finished(request: Any, reading: Reading) -> bool:
    try:
        return request.is_finished() is True
    except Exception as exc:
        reading.fail("request.is_finished()", exc)
        return False


def owner_lists(
    sched: Any, shape: VllmShape, pool: Any, reading: Reading
) -> Iterator[tuple[str, str, list[Any]]]:
    """``(kind, owner, blocks)`` with kind ``live``, ``transfer``, ``deferred`` (deferred frees,
    copy-on-write pairs, pins) or ``stale`` -- every list, read afresh (the census's view)."""
    requests = reading.attr(sched, "requests")
    known: dict[str, Any] = dict(requests) if requests is not MISSING else {}
    mgrs = managers(sched, reading)
    for rid, blocks in _own_lists(pool, mgrs, reading):
        request = known.get(rid)
        if request is None:
            yield "stale", rid, blocks
        else:
            yield ("transfer" if _finished(request, reading) else "live"), rid, blocks
    for owner, blocks in deferred_lists(sched, shape, pool, reading):
        yield "deferred", owner, blocks
    for owner, blocks in cow_lists(pool, mgrs, reading):
        yield "deferred", owner, blocks
    for owner, blocks in pin_lists(sched, shape, reading):
        yield "deferred", owner, blocks
    for owner, blocks in connector_pins(sched, pool):
        yield "deferred", owner, blocks


def kind_of(request: Any, reading: Reading) -> str:
    """``live`` or ``transfer`` (finished, its blocks kept while a KV connector moves them)."""
    return "transfer" if _finished(request, reading) else "live"


def queue_depths(sched: Any, shape: VllmShape, reading: Reading) -> dict[str, int]:
    """``len`` of each queue, of ``requests`` and of the deferred frees (0.24+): plain ``getattr``
    at every sample, a failure noted under the field's name (a queue whose ``len`` fails counts 0)."""
    out: dict[str, int] = {}
    names = (*shape.queues, "requests", *(("deferred_frees",) if shape.deferred_frees else ()))
    for name in names:
        try:
            queue = getattr(sched, name)
        except Exception as exc:
            reading.fail(name, exc)
            continue
        try:
            out[name] = len(queue)
        except Exception as exc:
            reading.fail(name, exc)
            if name in shape.queues:
                out[name] = 0
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
    step = attrgetter("prev_free_block" if backward else "next_free_block")
    nodes: list[Any] = []
    append = nodes.append
    node = step(start)
    for _ in range(limit):
        if node is None or node is end:
            break
        append(node)
        node = step(node)
    return nodes
