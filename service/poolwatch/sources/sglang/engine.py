"""SGLang's sources spec: its ``/metrics`` page and its log, read when no probe is installed."""

from __future__ import annotations

from poolwatch.sources.engine import EngineSources
from poolwatch.sources.sglang.log.dialect import DIALECT
from poolwatch.sources.sglang.metrics import IDLE_CONFIRM_SECONDS, SglangMetricsSource

__all__ = ["SOURCES"]

SOURCES = EngineSources(
    engine="sglang",
    log_dialect=DIALECT,
    metrics_source=SglangMetricsSource,
    idle_confirm_s=IDLE_CONFIRM_SECONDS,
)
