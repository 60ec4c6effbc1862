"""SGLang's sources spec: its ``/metrics`` page and its log's dialect, read when no probe is installed."""

from __future__ import annotations

from collections.abc import Callable

from poolwatch.model.rank import SourceKind
from poolwatch.sources.base import Source, Target
from poolwatch.sources.engine import EngineSources, SourceOptions
from poolwatch.sources.sglang.log.dialect import DIALECT
from poolwatch.sources.sglang.metrics import IDLE_CONFIRM_SECONDS, SglangMetricsSource

__all__ = ["SOURCES"]


def _metrics(target: Target, clock: Callable[[], float], options: SourceOptions) -> Source:
    return SglangMetricsSource(target, clock, max_bytes=options.max_bytes, limits=options.limits)


SOURCES = EngineSources(
    engine="sglang",
    metrics=SourceKind.SGLANG_METRICS,
    metrics_source=_metrics,
    log_dialect=DIALECT,
    idle_confirm_s=IDLE_CONFIRM_SECONDS,
)
