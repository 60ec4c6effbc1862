"""The shape check: every field the vLLM probe reads, looked at once on the live scheduler.

Run when a scheduler gets its probe (its ``__init__`` has returned: the pool and the managers exist).
Each field is checked for presence and type -- ``ref_cnt`` a plain ``int`` attribute (not a
property), the free queue's counter an ``int``, ``blocks`` as long as ``num_gpu_blocks``, the null
block block 0 with ``is_null``, ``req_to_blocks`` a mapping, every queue of the family a sized
collection.  A problem names the field and what is wrong; any problem refuses the probe on that
scheduler (a probe that misread a pool whose fields changed meaning would page for nothing or miss
real faults).  The release's family decides what is read (:mod:`~poolwatch.probe.vllm.shapes`).
Never raises.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sized
from typing import Any

from poolwatch.probe.core.reading import MISSING, Reading
from poolwatch.probe.vllm.shapes import VllmShape

__all__ = ["check_shape"]


def _typed(reading: Reading, obj: Any, path: str, kind: type | tuple[type, ...], label: str) -> Iterator[str]:
    value = reading.attr(obj, path)
    if value is MISSING:
        yield f"{label}{path}: missing"
    elif not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        yield f"{label}{path}: a {type(value).__name__}, not {getattr(kind, '__name__', kind)}"


def _block(block: Any, label: str) -> Iterator[str]:
    cls = type(block)
    for name in ("block_id", "ref_cnt"):
        if isinstance(getattr(cls, name, None), property):
            yield f"{label}.{name}: a property, not a plain field"
        elif not isinstance(getattr(block, name, None), int):
            yield f"{label}.{name}: missing or not an int"
    if not isinstance(getattr(block, "is_null", None), bool):
        yield f"{label}.is_null: missing or not a bool"
    for name in ("prev_free_block", "next_free_block", "block_hash"):
        try:
            getattr(block, name)
        except Exception as exc:
            yield f"{label}.{name}: {type(exc).__name__}"


def _pool(pool: Any, reading: Reading) -> Iterator[str]:
    label = "kv_cache_manager.block_pool."
    yield from _typed(reading, pool, "num_gpu_blocks", int, label)
    yield from _typed(reading, pool, "blocks", list, label)
    yield from _typed(reading, pool, "free_block_queue.num_free_blocks", int, label)
    for name in ("free_blocks", "get_new_blocks", "touch"):
        if not callable(getattr(pool, name, None)):
            yield f"{label}{name}: missing or not callable"
    blocks = reading.attr(pool, "blocks")
    if isinstance(blocks, list) and blocks:
        if len(blocks) != reading.attr(pool, "num_gpu_blocks"):
            yield f"{label}blocks: {len(blocks)} of them, not num_gpu_blocks"
        yield from _block(blocks[0], label + "blocks[0]")
        yield from _block(blocks[-1], label + "blocks[-1]")
        null = reading.attr(pool, "null_block")
        if null is not blocks[0] or getattr(null, "is_null", False) is not True:
            yield f"{label}null_block: not blocks[0] marked is_null"
    head = reading.attr(pool, "free_block_queue.fake_free_list_head")
    if head is MISSING or getattr(head, "block_id", None) != -1 or not hasattr(head, "next_free_block"):
        yield f"{label}free_block_queue.fake_free_list_head: not a sentinel (block id -1, next_free_block)"


def _managers(sched: Any, reading: Reading) -> Iterator[str]:
    mgrs = reading.attr(sched, "kv_cache_manager.coordinator.single_type_managers")
    if mgrs is MISSING:
        yield "kv_cache_manager.coordinator.single_type_managers: missing"
        return
    for i, mgr in enumerate(mgrs):
        label = f"single_type_managers[{i}]."
        lists = reading.attr(mgr, "req_to_blocks")
        if not isinstance(lists, Mapping):
            yield f"{label}req_to_blocks: missing or not a mapping"
        if reading.attr(mgr, "block_pool") is MISSING:
            yield f"{label}block_pool: missing"


def _scheduler(sched: Any, shape: VllmShape, reading: Reading) -> Iterator[str]:
    if not isinstance(reading.attr(sched, "requests"), Mapping):
        yield "requests: missing or not a mapping"
    for name in shape.queues:
        if not isinstance(reading.attr(sched, name), Sized):
            yield f"{name}: missing or not a queue"
    if shape.deferred_frees and not isinstance(reading.attr(sched, "deferred_frees"), Sized):
        yield "deferred_frees: missing or not a queue"
    if shape.tail_pins and not isinstance(
        reading.attr(sched, "kv_cache_manager._partial_tail_pins"), Mapping
    ):
        yield "kv_cache_manager._partial_tail_pins: missing or not a mapping"


def check_shape(sched: Any, shape: VllmShape) -> tuple[str, ...]:
    """Every problem with the fields the probe reads in ``shape``'s family (empty: none)."""
    reading = Reading()
    try:
        problems = [*_scheduler(sched, shape, reading), *_managers(sched, reading)]
        pool = reading.attr(sched, "kv_cache_manager.block_pool")
        problems += (
            ["kv_cache_manager.block_pool: missing"] if pool is MISSING else list(_pool(pool, reading))
        )
    except Exception as exc:  # a field whose reading raised in a way the checks did not expect
        problems = [f"the shape check failed: {type(exc).__name__}: {exc}"[:200]]
    return tuple(dict.fromkeys(problems))
