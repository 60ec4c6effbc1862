"""Signals about what a worker logged and about poolwatch's own view of it.  Pure functions.

* log incidents: SGLang's leak message -> PoolwatchIdleCheckFailed (critical where the strict
  idle check kills the server, else warning); ``Scheduler hit an exception`` or a failed busy /
  tree self-check -> PoolwatchSchedulerCrashed (critical);
* the probe: kill switch engaged -> PoolwatchProbeDegraded warning; errors contained within the
  window -> info;
* on the timer: a rank whose latest snapshot is stale -> PoolwatchSnapshotStale; a target whose
  scrapes fail -> PoolwatchTargetDown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from poolwatch.conservation import Balance, assess, describe
from poolwatch.detect.alert import Signal, Verdict, rank_labels, sampled_subject
from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.schema import AlertName, Severity
from poolwatch.detect.signals import crash_imminent, where
from poolwatch.model import Incident, IncidentKind, Phase, Snapshot
from poolwatch.target_health import TargetState

__all__ = [
    "incident_signals",
    "raised",
    "probe_judged",
    "probe_signals",
    "stale_signals",
    "target_signals",
]


_CRASH = {
    IncidentKind.SCHEDULER_EXCEPTION: "Scheduler hit an exception",
    IncidentKind.BUSY_CHECK_FAILED: "the busy-time memory check failed",
    IncidentKind.TREE_SANITY_FAILED: "the prefix-tree sanity check failed",
}


def _first_line(message: str, limit: int = 300) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


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
    said = _first_line(incident.message)
    return f"A scheduler of {where(snap)} died: {cause}{_CRASH[incident.kind]} ({said})."


def _leak_signal(snap: Snapshot, incident: Incident) -> Signal:
    findings = tuple(assess(a, Phase.IDLE) for a in incident.pools)
    shown = [f for f in findings if f.balance in (Balance.SURPLUS, Balance.DEFICIT)] or list(findings)
    figures = f" Figures: {describe(tuple(shown))}." if shown else ""
    strict = crash_imminent(snap)
    outcome = "the strict idle check crashes the server" if strict else "the idle check only warns here"
    said = _first_line(incident.message)
    text = f"SGLang on {where(snap)} logged a pool imbalance: {said}.{figures} ({outcome})"
    severity = Severity.CRITICAL if strict else Severity.WARNING
    slots = max((f.slots for f in shown), default=0)
    labels = rank_labels(snap.worker)
    return Signal(AlertName.IDLE_CHECK_FAILED, snap.worker.key, severity, labels, text, float(slots))


def incident_signals(snap: Snapshot, cfg: DetectorConfig, now: float) -> list[Signal]:
    """Alerts raised by the log lines in ``snap`` (lines older than the hold time are old news)."""
    out: dict[str, Signal] = {}
    for incident in snap.incidents:
        if now - incident.at >= cfg.incident_hold:
            continue
        if incident.kind is IncidentKind.LEAK_DETECTED:
            out[AlertName.IDLE_CHECK_FAILED] = _leak_signal(snap, incident)
        else:
            text = _crash_text(snap, incident)
            crashed, labels = AlertName.SCHEDULER_CRASHED, rank_labels(snap.worker)
            out[crashed] = Signal(crashed, snap.worker.key, Severity.CRITICAL, labels, text, 1.0)
    return [out[k] for k in sorted(out)]


def probe_judged(snap: Snapshot) -> set[Verdict]:
    """A snapshot with the probe's health is a verdict on PoolwatchProbeDegraded."""
    return set() if snap.probe is None else {(AlertName.PROBE_DEGRADED, rank_labels(snap.worker))}


def probe_signals(snap: Snapshot, errors_before: int | None, cfg: DetectorConfig) -> list[Signal]:
    """``errors_before``: the probe's error count at the start of the window (same boot)."""
    p = snap.probe
    if p is None:
        return []
    labels = rank_labels(snap.worker)
    if p.disabled:
        text = f"The poolwatch probe in {where(snap)} is disabled ({p.last_error or 'kill switch engaged'})."
        return [
            Signal(
                AlertName.PROBE_DEGRADED,
                snap.worker.key,
                Severity.WARNING,
                labels,
                text,
                1.0,
                for_seconds=cfg.probe_disabled_for,
            )
        ]
    new = p.errors_total - errors_before if errors_before is not None else 0
    if new > 0:
        last = f"; last: {_first_line(p.last_error)}" if p.last_error else ""
        text = f"The poolwatch probe in {where(snap)} contained {new} error(s) recently{last}."
        subject = sampled_subject(snap)
        return [Signal(AlertName.PROBE_DEGRADED, subject, Severity.INFO, labels, text, float(new))]
    return []


def stale_signals(latest: Iterable[Snapshot], cfg: DetectorConfig, now: float) -> list[Signal]:
    out = []
    for snap in latest:
        age = now - snap.taken_at
        if age > cfg.stale_after:
            text = (
                f"The latest snapshot of {where(snap)} (source {snap.source}) is {age:.0f} s old; "
                f"its memory pools are not being watched."
            )
            out.append(
                Signal(
                    AlertName.SNAPSHOT_STALE,
                    snap.worker.key,
                    Severity.WARNING,
                    rank_labels(snap.worker),
                    text,
                    age,
                    for_seconds=cfg.stale_for,
                )
            )
    return out


def target_signals(targets: Sequence[TargetState], cfg: DetectorConfig, now: float) -> list[Signal]:
    out = []
    for t in targets:
        if t.up:
            continue
        ago = (
            "never succeeded"
            if t.last_success_at is None
            else f"last success {now - t.last_success_at:.0f} s ago"
        )
        error = _first_line(t.last_error) or "no answer"
        text = f"poolwatch cannot scrape {t.source} target {t.name} ({ago}): {error}."
        named = (("source", t.source), ("target", t.name), ("worker", t.worker))
        labels = tuple((k, v) for k, v in named if v)  # worker: a crash of it inhibits this alert
        down, wait = AlertName.TARGET_DOWN, cfg.target_down_for
        out.append(Signal(down, t.name, Severity.WARNING, labels, text, 0.0, for_seconds=wait))
    return out
