"""The forecast family: each pool's fitted leak rate as PoolwatchPoolExhaustionForecast.  Pure.

The detector keeps one :class:`~poolwatch.detect.trend.GapSeries` per pool of each rank as one
source sees it (fed from the pool's exact or idle-residual gap) and hands each snapshot the fitted
ones (:func:`fitted`); :class:`ExhaustionForecast` makes each fitted trend a verdict on the forecast
alert of its pool (a fitted trend judges it; none yet leaves it be) and, when the pool would run out
of free slots within ``exhaustion_horizon``, a warning signal.
:func:`best_trends` lists every pool's trend for the API, the probe's where a rank has two sources.
Pools are taken in :class:`~poolwatch.model.rank.Pool` order, looked up in a table built once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.family import Seen, where
from poolwatch.detect.schema import AlertName, Mode, Severity
from poolwatch.detect.trend import GapSeries, Trend
from poolwatch.model.rank import Pool, SourceKind, WorkerId

__all__ = ["ExhaustionForecast", "PoolTrend", "best_trends", "fitted"]

_ORDER = {pool: index for index, pool in enumerate(Pool)}


@dataclass(frozen=True, slots=True)
class PoolTrend:
    worker: WorkerId
    pool: Pool
    trend: Trend


def fitted(series: Mapping[Pool, GapSeries]) -> tuple[tuple[Pool, Trend], ...]:
    """The pools of one rank-source with a fitted trend, in pool order, with their trends."""
    out = []
    for pool in sorted(series, key=_ORDER.__getitem__):
        trend = series[pool].trend()
        if trend is not None:
            out.append((pool, trend))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ExhaustionForecast:
    """PoolwatchPoolExhaustionForecast, per pool, judged on every snapshot from its fitted trends."""

    config: DetectorConfig
    alerts = (AlertName.POOL_EXHAUSTION_FORECAST,)
    mode = Mode.SAMPLED

    def signals(self, seen: Seen) -> list[Signal]:
        """A warning for every fitted pool that runs out within the horizon."""
        cfg, snap = self.config, seen.snap
        out: list[Signal] = []
        for pool, trend in seen.fits:
            if trend.eta is None or trend.eta >= cfg.exhaustion_horizon:
                continue
            text = (
                f"The {pool.value} pool of {where(snap)} loses {trend.rate * 3600:.1f} slots per hour; "
                f"at that rate it has no free slot left in {trend.eta / 3600:.1f} h."
            )
            wait = (cfg.deficit_samples, cfg.forecast_for)
            labels = rank_labels(snap.worker, pool.value)
            forecast = AlertName.POOL_EXHAUSTION_FORECAST
            out.append(
                Signal(forecast, sampled_subject(snap), Severity.WARNING, labels, text, trend.eta, *wait)
            )
        return out

    def signature(self, seen: Seen) -> tuple[Pool, ...]:
        """The pools with a fitted trend."""
        return tuple([pool for pool, _ in seen.fits])

    def judged(self, seen: Seen) -> set[Verdict]:
        worker = seen.snap.worker
        return {
            (AlertName.POOL_EXHAUSTION_FORECAST, rank_labels(worker, pool.value)) for pool, _ in seen.fits
        }


def best_trends(ranks: Iterable[tuple[WorkerId, str, Mapping[Pool, GapSeries]]]) -> list[PoolTrend]:
    """Every pool's fitted trend (``(worker, source, series)`` per rank-source), one per rank and
    pool: of two sources of one rank, the probe's (exact) wins; ordered by rank, then pool."""
    best: dict[tuple[str, Pool], tuple[bool, PoolTrend]] = {}
    for worker, source, series in ranks:
        probe = source == SourceKind.PROBE
        for pool, gaps in series.items():
            trend = gaps.trend()
            key = (worker.key, pool)
            if trend is not None and (key not in best or (probe and not best[key][0])):
                best[key] = (probe, PoolTrend(worker, pool, trend))
    return [best[k][1] for k in sorted(best, key=lambda k: (k[0], _ORDER[k[1]]))]
