"""The forecast family: each pool's fitted leak rate as PoolwatchPoolExhaustionForecast.  Pure.

The detector fits each pool's gap over time (:mod:`poolwatch.detect.trend`) and hands every snapshot
its rank-source's fitted trends (:attr:`~poolwatch.detect.family.Seen.fits`); each fitted trend is a
verdict on the forecast alert of its pool (none yet leaves it be) and, when the pool would run out of
free slots within ``exhaustion_horizon``, a warning signal.  The exporter publishes the same fit as
``poolwatch_pool_exhaustion_eta_seconds``, which the rule reads.

What is fitted is the capacity that will not come back: the gap, plus the slots of hold owners waiting
past their bound (:mod:`.holds`; the detector adds them).  The books count those (vLLM's
``session_held``, a tree lock's ``protected``), so the gap stays zero while they pile up -- a decode
whose prefills died strands a request's blocks at a time -- yet the pool runs out all the same.
"""

from __future__ import annotations

from poolwatch.detect import promql as q
from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family, Judge, Seen, held, pool_verdicts, uses, where
from poolwatch.detect.outcome import facts
from poolwatch.detect.schema import AlertDef, Mode, Scope, Severity
from poolwatch.detect.stranded import STRANDED_HOLD, stranded_slots
from poolwatch.model.rank import Pool

__all__ = ["FAMILY", "POOL_EXHAUSTION_FORECAST", "ExhaustionForecast"]

POOL_EXHAUSTION_FORECAST = "PoolwatchPoolExhaustionForecast"


class ExhaustionForecast(Judge):
    """The family's judge: every snapshot, from its rank-source's fitted trends."""

    def signals(self, seen: Seen) -> list[Signal]:
        """A warning for every fitted pool that runs out within the horizon."""
        cfg, snap = self.config, seen.snap
        out: list[Signal] = []
        for pool, trend in seen.fits:
            if trend.eta is None or trend.eta >= cfg.exhaustion_horizon:
                continue
            unit = facts(snap.worker.engine).unit
            stuck = pool in stranded_slots(snap, cfg)
            how = f" (lost, or held by owners waiting past their bound: see {STRANDED_HOLD})" if stuck else ""
            loses = f"loses {trend.rate * 3600:.1f} {unit}s per hour{how}"
            text = (
                f"The {pool.value} pool of {where(snap)} {loses}; "
                f"at that rate it has no free {unit} left in {trend.eta / 3600:.1f} h."
            )
            wait = (cfg.deficit_samples, cfg.forecast_for)
            labels = rank_labels(snap.worker, pool.value)
            subject = sampled_subject(snap)
            out.append(
                Signal(POOL_EXHAUSTION_FORECAST, subject, Severity.WARNING, labels, text, trend.eta, *wait)
            )
        return out

    def signature(self, seen: Seen) -> tuple[Pool, ...]:
        """The pools with a fitted trend."""
        return tuple([pool for pool, _ in seen.fits])

    def judged(self, seen: Seen) -> set[Verdict]:
        return pool_verdicts(seen.snap.worker, self.signature(seen), POOL_EXHAUSTION_FORECAST)


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    d = config.detector
    return (
        AlertDef(
            POOL_EXHAUSTION_FORECAST,
            Scope.POOL,
            Mode.SAMPLED,
            "A leaking memory pool will run out of free slots within hours.",
            f"The fitted leak rate exhausts the pool's free and evictable slots within "
            f"{d.exhaustion_horizon / 3600:g} h.",
            (
                held(
                    Severity.WARNING,
                    f"poolwatch_pool_exhaustion_eta_seconds < {d.exhaustion_horizon:g}",
                    f"At the current leak rate the {{{{ $labels.pool }}}} pool on {q.WHERE} runs out of free "
                    "slots in {{ $value | humanizeDuration }}.",
                    d,
                    d.forecast_for,
                ),
            ),
        ),
    )


FAMILY = Family(
    name="forecast",
    title="Exhaustion forecast",
    about="When a leaking pool runs out of free slots, from the fitted rate at which its gap grows.",
    metrics=uses("poolwatch_pool_exhaustion_eta_seconds"),
    alerts=alerts,
    sampled=ExhaustionForecast,
)
