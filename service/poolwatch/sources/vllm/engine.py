"""vLLM's sources spec: its ``/metrics`` page and its log, read when no probe is installed."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from poolwatch.model.rank import SourceKind
from poolwatch.sources.base import Source, Target
from poolwatch.sources.engine import EngineSources, SourceOptions
from poolwatch.sources.logfile.replay import Row
from poolwatch.sources.vllm.log.events import recognises
from poolwatch.sources.vllm.log.replay import Replayer
from poolwatch.sources.vllm.log.source import VllmLogSource
from poolwatch.sources.vllm.metrics import VllmMetricsSource

__all__ = ["SOURCES"]


def _metrics(target: Target, clock: Callable[[], float], options: SourceOptions) -> Source:
    return VllmMetricsSource(target, clock, max_bytes=options.max_bytes, limits=options.limits)


def _log(target: Target, clock: Callable[[], float], options: SourceOptions) -> Source:
    return VllmLogSource(target, clock, max_ranks=options.limits.max_log_ranks)


def _replayer(worker: str, emit: Callable[[Row], None], every: float, day: dt.date | None) -> Replayer:
    return Replayer(worker, emit, every, day=day)


SOURCES = EngineSources(
    engine="vllm",
    metrics=SourceKind.VLLM_METRICS,
    log=SourceKind.VLLM_LOG,
    metrics_source=_metrics,
    log_source=_log,
    replayer=_replayer,
    recognises=recognises,
    idle_confirm_s=None,  # vLLM's /metrics never proves an engine idle (metrics.py)
)
