"""vLLM's sources spec: its ``/metrics`` page and its log's dialect, read when no probe is installed."""

from __future__ import annotations

from collections.abc import Callable

from poolwatch.model.rank import SourceKind
from poolwatch.sources.base import Source, Target
from poolwatch.sources.engine import EngineSources, SourceOptions
from poolwatch.sources.vllm.log.dialect import DIALECT
from poolwatch.sources.vllm.metrics import VllmMetricsSource

__all__ = ["SOURCES"]


def _metrics(target: Target, clock: Callable[[], float], options: SourceOptions) -> Source:
    return VllmMetricsSource(target, clock, max_bytes=options.max_bytes, limits=options.limits)


SOURCES = EngineSources(
    engine="vllm",
    metrics=SourceKind.VLLM_METRICS,
    metrics_source=_metrics,
    log_dialect=DIALECT,
    idle_confirm_s=None,  # vLLM's /metrics never proves an engine idle (metrics.py)
)
