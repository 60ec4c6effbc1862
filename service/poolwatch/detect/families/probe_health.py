"""The probe-health family: whether the in-process probe watching a rank works, as
PoolwatchProbeDegraded.  Pure.

On every snapshot carrying the probe's health: its kill switch engaged for ``probe_disabled_for``
seconds -> a warning; errors contained within ``probe_error_window`` -> info (the detector hands
each snapshot the probe's error count at the start of that window, ``Seen.errors_before``).  A
snapshot with the probe's health is a verdict on the rank's alert.
"""

from __future__ import annotations

from poolwatch.detect import promql as q
from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family, Judge, Seen, first_line, held, uses, where
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Scope, Severity

__all__ = ["FAMILY", "PROBE_DEGRADED", "ProbeDegradation"]

PROBE_DEGRADED = "PoolwatchProbeDegraded"


class ProbeDegradation(Judge):
    """The family's judge: every snapshot that carries the probe's health."""

    def signals(self, seen: Seen) -> list[Signal]:
        """``seen.errors_before``: the probe's error count at the start of the window."""
        snap, p = seen.snap, seen.snap.probe
        if p is None:
            return []
        labels = rank_labels(snap.worker)
        if p.disabled:
            text = (
                f"The poolwatch probe in {where(snap)} is disabled ({p.last_error or 'kill switch engaged'})."
            )
            wait = self.config.probe_disabled_for
            key = snap.worker.key
            return [Signal(PROBE_DEGRADED, key, Severity.WARNING, labels, text, 1.0, for_seconds=wait)]
        new = p.errors_total - seen.errors_before if seen.errors_before is not None else 0
        if new > 0:
            last = f"; last: {first_line(p.last_error)}" if p.last_error else ""
            text = f"The poolwatch probe in {where(snap)} contained {new} error(s) recently{last}."
            subject = sampled_subject(snap)
            return [Signal(PROBE_DEGRADED, subject, Severity.INFO, labels, text, float(new))]
        return []

    def signature(self, seen: Seen) -> bool:
        """Whether the snapshot carries the probe's health."""
        return seen.snap.probe is not None

    def judged(self, seen: Seen) -> set[Verdict]:
        if seen.snap.probe is None:
            return set()
        return {(PROBE_DEGRADED, rank_labels(seen.snap.worker))}


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    d = config.detector
    return (
        AlertDef(
            PROBE_DEGRADED,
            Scope.RANK,
            Mode.SAMPLED,
            "The in-process probe is disabled or containing errors.",
            "The probe's kill switch is engaged (warning), or it contained exceptions recently (info).",
            (
                held(
                    Severity.WARNING,
                    "poolwatch_probe_disabled == 1",
                    f"The poolwatch probe in {q.WHERE} is disabled: its pools are watched only coarsely.",
                    d,
                    d.probe_disabled_for,
                ),
                PromRule(
                    Severity.INFO,
                    f"increase(poolwatch_probe_errors_total[{q.duration(d.probe_error_window)}]) > 0",
                    "0s",
                    f"The poolwatch probe in {q.WHERE} contained {{{{ $value | humanize }}}} error(s) "
                    "recently.",
                ),
            ),
        ),
    )


FAMILY = Family(
    name="probe_health",
    title="Probe health",
    about="Whether the in-process probe of a rank works: its kill switch, the errors it contained.",
    metrics=uses("poolwatch_probe_disabled", "poolwatch_probe_errors_total"),
    alerts=alerts,
    sampled=ProbeDegradation,
)
