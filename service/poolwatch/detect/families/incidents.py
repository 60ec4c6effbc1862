"""The incident family: what a worker logged, as PoolwatchIdleCheckFailed and
PoolwatchSchedulerCrashed events.  Pure.

An engine's own leak message (SGLang's idle check) -> PoolwatchIdleCheckFailed (critical where the
strict idle check kills the server, :func:`~poolwatch.detect.outcome.crash_imminent`, else
warning); a scheduler process that raised (SGLang's ``Scheduler hit an exception``,
vLLM's ``EngineCore encountered a fatal error``) or a failed busy / tree self-check ->
PoolwatchSchedulerCrashed (critical).  An event fires at once and holds ``incident_hold`` seconds
(a restart of the rank ends it sooner, :mod:`poolwatch.detect.detector`); a line older than that
is old news.
"""

from __future__ import annotations

import re

from poolwatch.conservation import Balance, assess, describe
from poolwatch.detect import promql as q
from poolwatch.detect.alert import Signal, rank_labels
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family, Judge, first_line, uses, where
from poolwatch.detect.outcome import crash_imminent, facts
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Scope, Severity
from poolwatch.model.rank import IncidentKind, Phase
from poolwatch.model.snapshot import Incident, Snapshot

__all__ = ["FAMILY", "IDLE_CHECK_FAILED", "SCHEDULER_CRASHED", "LoggedIncidents", "raised"]

IDLE_CHECK_FAILED = "PoolwatchIdleCheckFailed"
SCHEDULER_CRASHED = "PoolwatchSchedulerCrashed"


_CRASH = {
    IncidentKind.SCHEDULER_EXCEPTION: "the scheduler process raised",
    IncidentKind.BUSY_CHECK_FAILED: "the busy-time memory check failed",
    IncidentKind.TREE_SANITY_FAILED: "the prefix-tree sanity check failed",
}


class LoggedIncidents(Judge):
    """The family's judge: a rank's log lines, as each snapshot carries them."""

    def signals(self, snap: Snapshot, now: float) -> list[Signal]:
        """The alerts the log lines in ``snap`` raise (one per alert; old lines are skipped)."""
        out: dict[str, Signal] = {}
        for incident in snap.incidents:
            if now - incident.at >= self.config.incident_hold:
                continue
            if incident.kind is IncidentKind.LEAK_DETECTED:
                out[IDLE_CHECK_FAILED] = _leak_signal(snap, incident)
            else:
                text, labels = _crash_text(snap, incident), rank_labels(snap.worker)
                crashed = Signal(SCHEDULER_CRASHED, snap.worker.key, Severity.CRITICAL, labels, text, 1.0)
                out[SCHEDULER_CRASHED] = crashed
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
    title = facts(snap.worker.engine).title
    text = f"{title} on {where(snap)} logged a pool imbalance: {said}.{figures} ({outcome})"
    severity = Severity.CRITICAL if strict else Severity.WARNING
    slots = max((f.slots for f in shown), default=0)
    labels = rank_labels(snap.worker)
    return Signal(IDLE_CHECK_FAILED, snap.worker.key, severity, labels, text, float(slots))


def alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    d = config.detector
    not_strict, leak_logged = q.not_strict(config.cluster_label), q.incidents_logged("leak_detected", d)
    window = q.duration(d.incident_hold)
    return (
        AlertDef(
            IDLE_CHECK_FAILED,
            Scope.RANK,
            Mode.EVENT,
            "SGLang's own idle memory check reported a pool imbalance.",
            "The worker logged SGLang's leak message (its idle check). With the strict check (the default) "
            "the server dies with it.",
            (
                PromRule(
                    Severity.CRITICAL,
                    f"({leak_logged})\nunless {not_strict}",
                    "0s",
                    f"SGLang on {q.WHERE} logged a memory leak check failure in the last {window}; "
                    "with the strict idle check the server has crashed.",
                ),
                PromRule(
                    Severity.WARNING,
                    f"({leak_logged})\nand {not_strict}",
                    "0s",
                    f"SGLang on {q.WHERE} logged a memory leak warning in the last {window} "
                    "(its idle check only warns here).",
                ),
            ),
        ),
        AlertDef(
            SCHEDULER_CRASHED,
            Scope.RANK,
            Mode.EVENT,
            "An engine's scheduler process died; the server went down with it.",
            "The worker's log shows its scheduler died: SGLang's 'Scheduler hit an exception', vLLM's "
            "'EngineCore encountered a fatal error', or a failed self-check assertion.",
            (
                PromRule(
                    Severity.CRITICAL,
                    q.incidents_logged(q.CRASH_KINDS, d),
                    "0s",
                    f"A scheduler of {q.WHERE} died in the last {window} (an exception in the scheduler "
                    "process, or a failed memory/tree self-check).",
                ),
            ),
        ),
    )


FAMILY = Family(
    name="incidents",
    title="Logged incidents",
    about="What a worker's log says: the engine's own leak check failed, or its scheduler died.",
    metrics=uses(
        "poolwatch_incidents_total",
        "poolwatch_incident_last_timestamp_seconds",
        "poolwatch_rank_restart_timestamp_seconds",
        "poolwatch_idle_check_strict",
    ),
    alerts=alerts,
    event=LoggedIncidents,
)
