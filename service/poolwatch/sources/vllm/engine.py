"""vLLM's sources spec: its ``/metrics`` page and its log, read when no probe is installed."""

from __future__ import annotations

from poolwatch.sources.engine import EngineSources
from poolwatch.sources.vllm.log.dialect import DIALECT
from poolwatch.sources.vllm.metrics import VllmMetricsSource

__all__ = ["SOURCES"]

SOURCES = EngineSources(
    engine="vllm",
    log_dialect=DIALECT,
    metrics_source=VllmMetricsSource,
    idle_confirm_s=None,  # vLLM's /metrics never proves an engine idle (metrics.py)
)
