"""The incident family: what a worker logged, as PoolwatchIdleCheckFailed and
PoolwatchSchedulerCrashed events.  Pure.

SGLang's leak message -> PoolwatchIdleCheckFailed (critical where the strict idle check kills the
server, else warning); a scheduler process that raised (SGLang's ``Scheduler hit an exception``,
vLLM's ``EngineCore encountered a fatal error``) or a failed busy / tree self-check ->
PoolwatchSchedulerCrashed (critical).  An event fires at once and holds ``incident_hold`` seconds
(a restart of the rank ends it sooner, :mod:`poolwatch.detect.detector`); a line older than that
is old news.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from poolwatch.conservation import Balance, assess, describe
from poolwatch.detect.alert import Signal, rank_labels
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.family import crash_imminent, first_line, where
from poolwatch.detect.schema import AlertName, Mode, Severity
from poolwatch.model.rank import IncidentKind, Phase
from poolwatch.model.snapshot import Incident, Snapshot

__all__ = ["LoggedIncidents", "raised"]


_CRASH = {
    IncidentKind.SCHEDULER_EXCEPTION: "the scheduler process raised",
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
                text = _crash_text(snap, incident)
                crashed, labels = AlertName.SCHEDULER_CRASHED, rank_labels(snap.worker)
                out[crashed] = Signal(crashed, snap.worker.key, Severity.CRITICAL, labels, text, 1.0)
        return [out[k] for k in sorted(out)]


_RAISED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?::[ \t]?(.*))?$")


def raised(message: str, limit: int = 200) -> str:
    """The exception a traceback ends with (``ValueError: token_to_kv_pool ...``), or "" when the
    message names none: the last unindented ``<Name>Error: ...`` line (the one that was raised)."""
    found = ""
    for line in message.splitlines():
        m = _RAISED.match(line.rstrip())
        if m:
            found = f"{m[1]}: {m[2]}" if m[2] else m[1]
    return found if len(found) <= limit else found[: limit - 3] + "..."


def _crash_text(snap: Snapshot, incident: Incident) -> str:
    exception = raised(incident.message)
    cause = f"{exception}; " if exception else ""
    return (
        f"A scheduler of {where(snap)} died: {cause}{_CRASH[incident.kind]} ({first_line(incident.message)})."
    )


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
