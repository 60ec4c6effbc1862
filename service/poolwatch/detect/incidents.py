"""The incident family: what a worker logged, as PoolwatchIdleCheckFailed and
PoolwatchSchedulerCrashed events.  Pure.

SGLang's leak message -> PoolwatchIdleCheckFailed (critical where the strict idle check kills the
server, else warning); ``Scheduler hit an exception`` or a failed busy / tree self-check ->
PoolwatchSchedulerCrashed (critical).  An event fires at once and holds ``incident_hold`` seconds
(a restart of the rank ends it sooner, :mod:`poolwatch.detect.detector`); a line older than that
is old news.
"""

from __future__ import annotations

from dataclasses import dataclass

from poolwatch.conservation import Balance, assess, describe
from poolwatch.detect.alert import Signal, rank_labels
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.family import crash_imminent, first_line, where
from poolwatch.detect.schema import AlertName, Mode, Severity
from poolwatch.model import Incident, IncidentKind, Phase, Snapshot

__all__ = ["LoggedIncidents"]


_CRASH = {
    IncidentKind.SCHEDULER_EXCEPTION: "Scheduler hit an exception",
    IncidentKind.BUSY_CHECK_FAILED: "the busy-time memory check failed",
    IncidentKind.TREE_SANITY_FAILED: "the prefix-tree sanity check failed",
}


@dataclass(frozen=True, slots=True)
class LoggedIncidents:
    """PoolwatchIdleCheckFailed and PoolwatchSchedulerCrashed, per rank, from its log lines."""

    config: DetectorConfig
    alerts = (AlertName.IDLE_CHECK_FAILED, AlertName.SCHEDULER_CRASHED)
    mode = Mode.EVENT

    def signals(self, snap: Snapshot, now: float) -> list[Signal]:
        """The alerts the log lines in ``snap`` raise (one per alert; old lines are skipped)."""
        out: dict[str, Signal] = {}
        for incident in snap.incidents:
            if now - incident.at >= self.config.incident_hold:
                continue
            if incident.kind is IncidentKind.LEAK_DETECTED:
                out[AlertName.IDLE_CHECK_FAILED] = _leak_signal(snap, incident)
            else:
                text = (
                    f"A scheduler of {where(snap)} died: {_CRASH[incident.kind]} "
                    f"({first_line(incident.message)})."
                )
                crashed, labels = AlertName.SCHEDULER_CRASHED, rank_labels(snap.worker)
                out[crashed] = Signal(crashed, snap.worker.key, Severity.CRITICAL, labels, text, 1.0)
        return [out[k] for k in sorted(out)]


def _leak_signal(snap: Snapshot, incident: Incident) -> Signal:
    findings = tuple(assess(a, Phase.IDLE) for a in incident.pools)
    shown = [f for f in findings if f.balance in (Balance.SURPLUS, Balance.DEFICIT)] or list(findings)
    figures = f" Figures: {describe(tuple(shown))}." if shown else ""
    strict = crash_imminent(snap)
    outcome = "the strict idle check crashes the server" if strict else "the idle check only warns here"
    said = first_line(incident.message)
    text = f"SGLang on {where(snap)} logged a pool imbalance: {said}.{figures} ({outcome})"
    severity = Severity.CRITICAL if strict else Severity.WARNING
    slots = max((f.slots for f in shown), default=0)
    labels = rank_labels(snap.worker)
    return Signal(AlertName.IDLE_CHECK_FAILED, snap.worker.key, severity, labels, text, float(slots))
