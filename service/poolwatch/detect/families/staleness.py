"""The staleness family: a rank whose latest snapshot is old, as PoolwatchSnapshotStale.  Pure.

Judged on the evaluation timer from every rank's latest snapshot: older than ``stale_after`` for
``stale_for`` seconds -> a warning; the timer's verdict is every instance of the alert, so one it no
longer signals is clean.
"""

from __future__ import annotations

from poolwatch.detect import promql as q
from poolwatch.detect.alert import Signal, rank_labels
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family, Judge, Tick, held, uses, where
from poolwatch.detect.schema import AlertDef, Mode, Scope, Severity

__all__ = ["FAMILY", "SNAPSHOT_STALE", "Staleness"]

SNAPSHOT_STALE = "PoolwatchSnapshotStale"


class Staleness(Judge):
    """The family's judge: every rank's latest snapshot, on the timer."""

    def signals(self, tick: Tick) -> list[Signal] | None:
        if tick.latest is None:
            return None
        cfg, out = self.config, []
        for snap in tick.latest:
            age = tick.now - snap.taken_at
            if age > cfg.stale_after:
                text = (
                    f"The latest snapshot of {where(snap)} (source {snap.source}) is {age:.0f} s old; "
                    f"its memory pools are not being watched."
                )
                labels, wait = rank_labels(snap.worker), cfg.stale_for
                key = snap.worker.key
                out.append(Signal(SNAPSHOT_STALE, key, Severity.WARNING, labels, text, age, for_seconds=wait))
        return out


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    d = config.detector
    return (
        AlertDef(
            SNAPSHOT_STALE,
            Scope.RANK,
            Mode.TIMED,
            "poolwatch has no current figures for a scheduler rank.",
            "The rank's latest snapshot is older than the staleness limit; its pools are not being watched.",
            (
                held(
                    Severity.WARNING,
                    "poolwatch_snapshot_stale == 1",
                    f"The latest snapshot of {q.WHERE} is stale; its memory pools are not being watched.",
                    d,
                    d.stale_for,
                ),
            ),
        ),
    )


FAMILY = Family(
    name="staleness",
    title="Stale ranks",
    about="Whether poolwatch has current figures for every rank it watches.",
    metrics=uses("poolwatch_snapshot_stale"),
    alerts=alerts,
    timed=Staleness,
)
