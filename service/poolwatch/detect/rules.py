"""Every alert poolwatch raises, as data: the one source for the detector, the Prometheus rules,
the runbooks and the docs (monitoring-mixins style).

Names are CamelCase with the ``Poolwatch`` prefix.  ``severity`` is ``critical`` (pages),
``warning`` (a ticket) or ``info``.  Each alert has a static ``summary``, a ``description`` with
the figures, a ``runbook_url`` derived from its name (``docs/runbooks/<Name>.md``) and a
``dashboard_url``.  The sidecar's detector (:mod:`poolwatch.detect.detector`) and the generated
Prometheus rules (:mod:`poolwatch.artifacts.rules`) raise the same names with the same labels.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from poolwatch.detect import promql as q

__all__ = [
    "ALERTS",
    "FLEET_DASHBOARD",
    "WORKER_DASHBOARD",
    "AlertDef",
    "Mode",
    "PromRule",
    "Scope",
    "Severity",
    "by_name",
    "dashboard_link",
]

WORKER_DASHBOARD = "/d/poolwatch-worker/poolwatch-worker"  # Grafana paths of the generated dashboards
FLEET_DASHBOARD = "/d/poolwatch-fleet/poolwatch-fleet"


class Severity(enum.StrEnum):
    CRITICAL = "critical"  # pages someone now
    WARNING = "warning"  # a ticket: look at it today
    INFO = "info"  # context for the other alerts


class Scope(enum.StrEnum):
    """What one alert instance is about (and so which labels identify it)."""

    POOL = "pool"  # worker, role, dp_rank, tp_rank, pp_rank, pool
    RANK = "rank"  # worker, role, dp_rank, tp_rank, pp_rank
    TARGET = "target"  # target, source


class Mode(enum.StrEnum):
    """How the detector decides that the alert fires and that it is over."""

    SAMPLED = "sampled"  # judged on every snapshot: fires after N samples, resolves after M clean ones
    EVENT = "event"  # a log line: fires at once, resolves after a hold time
    TIMED = "timed"  # judged on the evaluation timer (staleness, target health)


@dataclass(frozen=True, slots=True)
class PromRule:
    """One Prometheus alerting rule of an alert (an alert may have one rule per severity)."""

    severity: Severity
    expr: str
    for_: str
    description: str  # a Go template over $labels and $value
    keep_firing_for: str = ""  # hysteresis: a flickering condition does not resolve and re-fire


@dataclass(frozen=True, slots=True)
class AlertDef:
    name: str
    scope: Scope
    mode: Mode
    summary: str
    meaning: str  # one sentence for the alert index
    prometheus: tuple[PromRule, ...]

    @property
    def runbook_path(self) -> str:
        return f"docs/runbooks/{self.name}.md"

    def runbook_url(self, base: str) -> str:
        return f"{base.rstrip('/')}/{self.name}.md"

    @property
    def severities(self) -> tuple[Severity, ...]:
        return tuple(r.severity for r in self.prometheus)


ALERTS: tuple[AlertDef, ...] = (
    AlertDef(
        "PoolwatchDoubleFree",
        Scope.POOL,
        Mode.SAMPLED,
        "A memory-pool slot was freed twice; two requests can share it and corrupt each other's output.",
        "Surplus: more slots are accounted free/cached than the pool has, or the probe saw a slot in a "
        "free list twice or while still owned. Fires at once.",
        (
            PromRule(
                Severity.CRITICAL,
                q.DOUBLE_FREE,
                "0s",
                f"{{{{ $value }}}} slot(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} are counted twice "
                "(a double free). Drain and restart the worker.",
                keep_firing_for=q.KEEP_FIRING,
            ),
        ),
    ),
    AlertDef(
        "PoolwatchSlotLeak",
        Scope.POOL,
        Mode.SAMPLED,
        "Memory-pool slots are lost: nobody owns them any more.",
        "Deficit: the pool has fewer slots accounted than its size, for several samples in a row. "
        "Critical when SGLang's strict idle check will crash the server, or the leak is large.",
        (
            PromRule(
                Severity.CRITICAL,
                f"({q.DEFICIT}\n  unless {q.NOT_STRICT})\nor ({q.DEFICIT} >= {q.LARGE})",
                "1m",
                f"{{{{ $value }}}} slot(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} are lost. "
                "Unless SGLang's idle check is relaxed, the server crashes at its next idle moment.",
                keep_firing_for=q.KEEP_FIRING,
            ),
            PromRule(
                Severity.WARNING,
                f"({q.DEFICIT}\n  and {q.NOT_STRICT})\nunless ({q.DEFICIT} >= {q.LARGE})",
                "1m",
                f"{{{{ $value }}}} slot(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} are lost; "
                "SGLang's idle check only warns here, so capacity shrinks until a restart.",
                keep_firing_for=q.KEEP_FIRING,
            ),
        ),
    ),
    AlertDef(
        "PoolwatchPoolExhaustionForecast",
        Scope.POOL,
        Mode.SAMPLED,
        "A leaking memory pool will run out of free slots within hours.",
        f"The fitted leak rate exhausts the pool's free and evictable slots within "
        f"{q.DEFAULTS.exhaustion_horizon / 3600:g} h.",
        (
            PromRule(
                Severity.WARNING,
                f"poolwatch_pool_exhaustion_eta_seconds < {q.DEFAULTS.exhaustion_horizon:g}",
                f"{q.minutes(q.DEFAULTS.forecast_for)}",
                f"At the current leak rate the {{{{ $labels.pool }}}} pool on {q.WHERE} runs out of free "
                "slots in {{ $value | humanizeDuration }}.",
                keep_firing_for=q.KEEP_FIRING,
            ),
        ),
    ),
    AlertDef(
        "PoolwatchIdleCheckFailed",
        Scope.RANK,
        Mode.EVENT,
        "SGLang's own idle memory check reported a pool imbalance.",
        "The worker logged SGLang's leak message (its idle check). With the strict check (the default) "
        "the server dies with it.",
        (
            PromRule(
                Severity.CRITICAL,
                f"({q.LEAK_LOGGED})\nunless {q.NOT_STRICT}",
                "0s",
                f"SGLang on {q.WHERE} logged a memory leak check failure in the last {q.WINDOW}; "
                "with the strict idle check the server has crashed.",
            ),
            PromRule(
                Severity.WARNING,
                f"({q.LEAK_LOGGED})\nand {q.NOT_STRICT}",
                "0s",
                f"SGLang on {q.WHERE} logged a memory leak warning in the last {q.WINDOW} "
                "(its idle check only warns here).",
            ),
        ),
    ),
    AlertDef(
        "PoolwatchSchedulerCrashed",
        Scope.RANK,
        Mode.EVENT,
        "An SGLang scheduler process died; the server went down with it.",
        "The worker logged 'Scheduler hit an exception' or a failed self-check assertion.",
        (
            PromRule(
                Severity.CRITICAL,
                q.CRASH_LOGGED,
                "0s",
                f"A scheduler of {q.WHERE} died in the last {q.WINDOW} (Scheduler hit an exception "
                "or a failed memory/tree self-check).",
            ),
        ),
    ),
    AlertDef(
        "PoolwatchSnapshotStale",
        Scope.RANK,
        Mode.TIMED,
        "poolwatch has no current figures for a scheduler rank.",
        "The rank's latest snapshot is older than the staleness limit; its pools are not being watched.",
        (
            PromRule(
                Severity.WARNING,
                "poolwatch_snapshot_stale == 1",
                f"{q.minutes(q.DEFAULTS.stale_for)}",
                f"The latest snapshot of {q.WHERE} is stale; its memory pools are not being watched.",
                keep_firing_for=q.KEEP_FIRING,
            ),
        ),
    ),
    AlertDef(
        "PoolwatchTargetDown",
        Scope.TARGET,
        Mode.TIMED,
        "poolwatch cannot scrape one of its targets.",
        "Every scrape of the target (probe endpoint, SGLang /metrics, log) has failed for a while.",
        (
            PromRule(
                Severity.WARNING,
                "poolwatch_target_up == 0",
                f"{q.minutes(q.DEFAULTS.target_down_for)}",
                "poolwatch cannot scrape {{ $labels.source }} target {{ $labels.target }}.",
                keep_firing_for=q.KEEP_FIRING,
            ),
        ),
    ),
    AlertDef(
        "PoolwatchProbeDegraded",
        Scope.RANK,
        Mode.SAMPLED,
        "The in-process probe is disabled or containing errors.",
        "The probe's kill switch is engaged (warning), or it contained exceptions recently (info).",
        (
            PromRule(
                Severity.WARNING,
                "poolwatch_probe_disabled == 1",
                "1m",
                f"The poolwatch probe in {q.WHERE} is disabled: its pools are watched only coarsely.",
                keep_firing_for=q.KEEP_FIRING,
            ),
            PromRule(
                Severity.INFO,
                f"increase(poolwatch_probe_errors_total[{q.minutes(q.DEFAULTS.probe_error_window)}]) > 0",
                "0s",
                f"The poolwatch probe in {q.WHERE} contained {{{{ $value | humanize }}}} error(s) recently.",
            ),
        ),
    ),
)


_SCOPE_VARS = {
    Scope.POOL: ("namespace", "worker", "dp_rank", "tp_rank", "pp_rank", "pool"),
    Scope.RANK: ("namespace", "worker", "dp_rank", "tp_rank", "pp_rank"),
    Scope.TARGET: ("namespace",),
}


def dashboard_link(scope: Scope, value: Callable[[str], str | None]) -> str:
    """The Grafana path of the dashboard for an alert of ``scope``, its variables set from
    ``value(label)`` (already encoded; ``None`` leaves the variable out)."""
    path = FLEET_DASHBOARD if scope is Scope.TARGET else WORKER_DASHBOARD
    pairs = [(n, value(n)) for n in _SCOPE_VARS[scope]]
    query = "&".join(f"var-{n}={v}" for n, v in pairs if v is not None)
    return f"{path}?{query}" if query else path


def by_name(name: str) -> AlertDef:
    for alert in ALERTS:
        if alert.name == name:
            return alert
    raise KeyError(f"no alert named {name!r}")
