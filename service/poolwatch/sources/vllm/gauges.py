"""vLLM's own ``/metrics``, turned into one coarse block-pool account per engine.  Pure.

What every V1 release from 0.10.2 to 0.34.0 exports (``PrometheusStatLogger`` in
``vllm/v1/metrics/loggers.py``), labelled ``model_name`` and ``engine`` (the EngineCore's
data-parallel index, which is the rank here)::

    vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0123       every release
    vllm:gpu_cache_usage_perc{...}                                  0.10.2 (0.11.x only when shown
                                                                      by --show-hidden-metrics-for-version)
    vllm:num_requests_running / vllm:num_requests_waiting           every release
    vllm:num_preemptions_total                                      every release (a counter)
    vllm:prefix_cache_queries_total / vllm:prefix_cache_hits_total  every release (tokens)
    vllm:cache_config_info{block_size="16",num_gpu_blocks="8192",engine="0",...} 1.0
                                                                    every release (an info gauge)

The usage gauge is vLLM's ``BlockPool.get_usage()``: ``1 - free / (num_gpu_blocks - 1)`` (block 0 is
the null block, never free, never counted).  Free includes the *cached* free blocks (a finished
request's prefix blocks kept for reuse at ``ref_cnt`` 0), so usage is the share of blocks some
request holds, not the share the prefix cache fills.  With ``num_gpu_blocks`` from the info gauge,
``usage x (num_gpu_blocks - 1)`` is the count of non-free blocks whenever it comes out whole (the
gauge is a float, not rounded); otherwise only its sign is kept.  Everything is coarse: held,
protected and what the prefix cache keeps are not exported, so no account here has a gap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from poolwatch.model.rank import Phase, Pool, PoolAccount
from poolwatch.sources.prom_text import Sample

__all__ = ["EngineGauges", "group_by_engine", "phase", "pool_account", "queues", "wanted"]

_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # the newer name first
_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:num_preemptions": "preemptions",  # a counter exposed without the suffix (OpenMetrics)
    "vllm:prefix_cache_queries_total": "prefix_queries",
    "vllm:prefix_cache_queries": "prefix_queries",
    "vllm:prefix_cache_hits_total": "prefix_hits",
    "vllm:prefix_cache_hits": "prefix_hits",
}
_INFO = "vllm:cache_config_info"
_WANTED = frozenset({*_USAGE, *_GAUGES, _INFO})
_WHOLE = 1e-6
_MAX_DIGITS = 6  # an engine index or a block count of more digits is text, not a figure
_MAX_BLOCK_DIGITS = 12


def wanted(name: str) -> bool:
    """The vLLM metric names this module reads."""
    return name in _WANTED


@dataclass(slots=True)
class EngineGauges:
    """What one engine's samples say (``None``: not on the page)."""

    engine: int
    model: str = ""
    usage: float | None = None  # vllm:kv_cache_usage_perc (else the older gpu_ name), 1 = 100 %
    running: float | None = None
    waiting: float | None = None
    preemptions: float | None = None  # since the engine started
    prefix_queries: float | None = None  # tokens looked up in the prefix cache
    prefix_hits: float | None = None  # tokens found there
    num_gpu_blocks: int | None = None  # from vllm:cache_config_info
    block_size: int | None = None  # tokens per block, from vllm:cache_config_info


def group_by_engine(samples: Iterable[Sample]) -> dict[int, EngineGauges]:
    """The samples of each engine (its ``engine`` label; a page without one is engine 0)."""
    engines: dict[int, EngineGauges] = {}
    for s in samples:
        index = _count(s.labels.get("engine", "0"), _MAX_DIGITS)
        gauges = engines.setdefault(
            0 if index is None else index, EngineGauges(0 if index is None else index)
        )
        gauges.model = gauges.model or s.labels.get("model_name", "")
        if s.name == _INFO:
            gauges.num_gpu_blocks = _count(s.labels.get("num_gpu_blocks", ""), _MAX_BLOCK_DIGITS)
            gauges.block_size = _count(s.labels.get("block_size", ""), _MAX_DIGITS)
        elif s.name in _USAGE:
            if gauges.usage is None or s.name == _USAGE[0]:
                gauges.usage = s.value
        else:
            setattr(gauges, _GAUGES[s.name], s.value)
    return engines


def _count(raw: str, digits: int) -> int | None:
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= digits else None


def queues(g: EngineGauges) -> dict[str, int]:
    """The scheduler's ``running`` and ``waiting`` request counts (those on the page)."""
    out: dict[str, int] = {}
    for queue, value in (("running", g.running), ("waiting", g.waiting)):
        if value is not None and math.isfinite(value):
            out[queue] = int(min(max(value, 0.0), 2.0**53))
    return out


def phase(g: EngineGauges) -> Phase:
    """Busy while a request runs or waits; never *idle*: vLLM's usage may stay above 0 on a healthy
    idle engine (sink blocks, a KV connector's delayed frees), so an idle engine proves nothing."""
    depths = queues(g)
    return Phase.BUSY if any(depths.values()) else Phase.UNKNOWN


def pool_account(g: EngineGauges) -> PoolAccount | None:
    """The block pool as the usage gauge and the pool size show it (``None``: no usage gauge)."""
    if g.usage is None or not math.isfinite(g.usage):
        return None
    size = g.num_gpu_blocks - 1 if g.num_gpu_blocks is not None and g.num_gpu_blocks > 1 else None
    return PoolAccount(Pool.FULL, size, used=_used(g.usage, size))


def _used(usage: float, size: int | None) -> int | None:
    if size is not None:
        product = usage * size
        nearest = round(product)
        if abs(product - nearest) <= _WHOLE * max(1.0, abs(product)):
            return int(nearest)
    return -1 if usage < 0 else None  # below 0: more blocks free than exist, by at least one
