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
from poolwatch.detect.config import MixinConfig

__all__ = [
    "ALERTS",
    "ALERT_NAME_PATTERN",
    "AlertDef",
    "AlertName",
    "Mode",
    "PromRule",
    "Scope",
    "Severity",
    "alert_definitions",
    "by_name",
    "dashboard_link",
    "dashboard_path",
]


ALERT_NAME_PATTERN = "Poolwatch.*"  # matches every AlertName (dashboards select ALERTS with it)


class AlertName(enum.StrEnum):
    """The name of every alert: the detector, the rules, the runbooks and the tests say these."""

    DOUBLE_FREE = "PoolwatchDoubleFree"
    SLOT_LEAK = "PoolwatchSlotLeak"
    POOL_EXHAUSTION_FORECAST = "PoolwatchPoolExhaustionForecast"
    IDLE_CHECK_FAILED = "PoolwatchIdleCheckFailed"
    SCHEDULER_CRASHED = "PoolwatchSchedulerCrashed"
    SNAPSHOT_STALE = "PoolwatchSnapshotStale"
    TARGET_DOWN = "PoolwatchTargetDown"
    PROBE_DEGRADED = "PoolwatchProbeDegraded"
    SIDECAR_DOWN = "PoolwatchSidecarDown"
    NOTIFICATIONS_FAILING = "PoolwatchNotificationsFailing"
    TASK_CRASH_LOOPING = "PoolwatchTaskCrashLooping"
    PROBE_REPAIRED = "PoolwatchProbeRepaired"


class Severity(enum.StrEnum):
    CRITICAL = "critical"  # pages someone now
    WARNING = "warning"  # a ticket: look at it today
    INFO = "info"  # context for the other alerts


class Scope(enum.StrEnum):
    """What one alert instance is about (and so which labels identify it)."""

    POOL = "pool"  # worker, role, dp_rank, tp_rank, pp_rank, pool
    RANK = "rank"  # worker, role, dp_rank, tp_rank, pp_rank
    TARGET = "target"  # target, source, worker
    SIDECAR = "sidecar"  # namespace, pod (and receiver): poolwatch itself


class Mode(enum.StrEnum):
    """How the detector decides that the alert fires and that it is over."""

    SAMPLED = "sampled"  # judged on every snapshot: fires after N samples, resolves after M clean ones
    EVENT = "event"  # a log line: fires at once, resolves after a hold time
    TIMED = "timed"  # judged on the evaluation timer (staleness, target health)
    PROMETHEUS = "prometheus"  # only Prometheus can judge it (the sidecar down, its deliveries failing)


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
    name: AlertName
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


def alert_definitions(config: MixinConfig | None = None) -> tuple[AlertDef, ...]:
    """Every alert, its rules' thresholds and waits taken from ``config`` (default: the defaults)."""
    config = config or MixinConfig()
    d = config.detector
    not_strict, large = q.not_strict(config.cluster_label), q.large(d)
    leak_logged, window = q.incidents_logged("leak_detected", d), q.duration(d.incident_hold)
    keep = q.duration(d.resolve_hold)  # the detector's resolve hold: both paths resolve together
    return (
        AlertDef(
            AlertName.DOUBLE_FREE,
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
                    f"{{{{ $value }}}} slot(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} are "
                    "counted twice (a double free). Drain and restart the worker.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.SLOT_LEAK,
            Scope.POOL,
            Mode.SAMPLED,
            "Memory-pool slots are lost: nobody owns them any more.",
            "Deficit: the pool has fewer slots accounted than its size, for several samples in a row. "
            "Critical when SGLang's strict idle check will crash the server, or the leak is large.",
            (
                PromRule(
                    Severity.CRITICAL,
                    f"({q.DEFICIT}\n  unless {not_strict})\nor ({q.DEFICIT} >= {large})",
                    q.duration(d.coarse_hold),
                    f"{{{{ $value }}}} slot(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} are lost. "
                    "Unless SGLang's idle check is relaxed, the server crashes at its next idle moment.",
                    keep_firing_for=keep,
                ),
                PromRule(
                    Severity.WARNING,
                    f"({q.DEFICIT}\n  and {not_strict})\nunless ({q.DEFICIT} >= {large})",
                    q.duration(d.coarse_hold),
                    f"{{{{ $value }}}} slot(s) of the {{{{ $labels.pool }}}} pool on {q.WHERE} are lost; "
                    "SGLang's idle check only warns here, so capacity shrinks until a restart.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.POOL_EXHAUSTION_FORECAST,
            Scope.POOL,
            Mode.SAMPLED,
            "A leaking memory pool will run out of free slots within hours.",
            f"The fitted leak rate exhausts the pool's free and evictable slots within "
            f"{d.exhaustion_horizon / 3600:g} h.",
            (
                PromRule(
                    Severity.WARNING,
                    f"poolwatch_pool_exhaustion_eta_seconds < {d.exhaustion_horizon:g}",
                    f"{q.duration(d.forecast_for)}",
                    f"At the current leak rate the {{{{ $labels.pool }}}} pool on {q.WHERE} runs out of free "
                    "slots in {{ $value | humanizeDuration }}.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.IDLE_CHECK_FAILED,
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
            AlertName.SCHEDULER_CRASHED,
            Scope.RANK,
            Mode.EVENT,
            "An SGLang scheduler process died; the server went down with it.",
            "The worker logged 'Scheduler hit an exception' or a failed self-check assertion.",
            (
                PromRule(
                    Severity.CRITICAL,
                    q.incidents_logged(q.CRASH_KINDS, d),
                    "0s",
                    f"A scheduler of {q.WHERE} died in the last {window} (Scheduler hit an exception "
                    "or a failed memory/tree self-check).",
                ),
            ),
        ),
        AlertDef(
            AlertName.SNAPSHOT_STALE,
            Scope.RANK,
            Mode.TIMED,
            "poolwatch has no current figures for a scheduler rank.",
            "The rank's latest snapshot is older than the staleness limit; its pools are not being watched.",
            (
                PromRule(
                    Severity.WARNING,
                    "poolwatch_snapshot_stale == 1",
                    f"{q.duration(d.stale_for)}",
                    f"The latest snapshot of {q.WHERE} is stale; its memory pools are not being watched.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.TARGET_DOWN,
            Scope.TARGET,
            Mode.TIMED,
            "poolwatch cannot scrape one of its targets.",
            "Every scrape of the target (probe endpoint, SGLang /metrics, log) has failed for a while.",
            (
                PromRule(
                    Severity.WARNING,
                    "poolwatch_target_up == 0",
                    f"{q.duration(d.target_down_for)}",
                    "poolwatch cannot scrape {{ $labels.source }} target {{ $labels.target }}.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        AlertDef(
            AlertName.PROBE_DEGRADED,
            Scope.RANK,
            Mode.SAMPLED,
            "The in-process probe is disabled or containing errors.",
            "The probe's kill switch is engaged (warning), or it contained exceptions recently (info).",
            (
                PromRule(
                    Severity.WARNING,
                    "poolwatch_probe_disabled == 1",
                    q.duration(d.probe_disabled_for),
                    f"The poolwatch probe in {q.WHERE} is disabled: its pools are watched only coarsely.",
                    keep_firing_for=keep,
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
        AlertDef(
            AlertName.PROBE_REPAIRED,
            Scope.POOL,
            Mode.SAMPLED,
            "The probe's guard repaired a memory-pool free list; SGLang kept serving.",
            "Guard mode (opt-in) quarantined a free-listed slot that was in use, removed a duplicate "
            "free-list entry, or gave back a slot lost at idle. Fires at once, until the worker restarts.",
            (
                PromRule(
                    Severity.WARNING,
                    "sum without (kind) (poolwatch_probe_repairs_total) > 0",
                    "0s",
                    f"The poolwatch guard on {q.WHERE} repaired {{{{ $value }}}} slot(s) of the "
                    "{{ $labels.pool }} pool. SGLang kept serving; restart the worker at a quiet moment.",
                    keep_firing_for=keep,
                ),
            ),
        ),
        *_meta_alerts(),
    )


def _meta_alerts() -> tuple[AlertDef, ...]:
    """Prometheus watching poolwatch: what the sidecar cannot say about itself."""
    where = "{{ $labels.namespace }}/{{ $labels.pod }}"
    delivery = 'increase(poolwatch_notifications_total{outcome=~"failed|dropped"}[5m])'
    sent = 'increase(poolwatch_notifications_total{outcome="sent"}[5m])'
    return (
        AlertDef(
            AlertName.SIDECAR_DOWN,
            Scope.SIDECAR,
            Mode.PROMETHEUS,
            "Prometheus cannot scrape a poolwatch sidecar: its SGLang server's memory pools are not watched.",
            "Prometheus' scrape of a sidecar (`up`) has failed for 5 minutes (the sidecar cannot say so).",
            (
                PromRule(
                    Severity.WARNING,
                    'up{container="poolwatch"} == 0',
                    "5m",
                    f"Prometheus cannot scrape the poolwatch sidecar of {where}: the memory pools of its "
                    "SGLang server are not watched, and its own pages may not be sent.",
                ),
            ),
        ),
        AlertDef(
            AlertName.NOTIFICATIONS_FAILING,
            Scope.SIDECAR,
            Mode.PROMETHEUS,
            "A poolwatch sidecar cannot deliver its alerts: its fast pages do not arrive.",
            "Deliveries to a receiver (Alertmanager, a webhook) failed or were dropped for 5 minutes "
            "with none getting through; only the slower Prometheus path pages meanwhile.",
            (
                PromRule(
                    Severity.WARNING,
                    f"(sum without (outcome) ({delivery}) > 0)\n"
                    f"unless on (namespace, pod, receiver) (sum without (outcome) ({sent}) > 0)",
                    "5m",
                    f"The poolwatch sidecar of {where} failed or dropped {{{{ $value | humanize }}}} "
                    "deliveries to {{ $labels.receiver }} in the last 5m and delivered none: its direct "
                    "pages do not arrive, only the slower Prometheus path's.",
                ),
            ),
        ),
        AlertDef(
            AlertName.TASK_CRASH_LOOPING,
            Scope.SIDECAR,
            Mode.PROMETHEUS,
            "A poolwatch sidecar task keeps crashing: part of its watching or paging has stopped.",
            "A background task of a sidecar (scrape loop, evaluation timer, a deliverer) crashed 3 times "
            "within 5 minutes; it is restarted with backoff, and its first error is in the log.",
            (
                PromRule(
                    Severity.WARNING,
                    "poolwatch_task_crash_looping == 1",
                    "2m",
                    f"The {{{{ $labels.task }}}} task of the poolwatch sidecar of {where} keeps crashing "
                    "(3 times within 5 minutes); it is restarted with backoff, but what it does is not "
                    "being done meanwhile.",
                ),
            ),
        ),
    )


ALERTS: tuple[AlertDef, ...] = alert_definitions()


_SCOPE_VARS = {
    Scope.POOL: ("namespace", "worker", "dp_rank", "tp_rank", "pp_rank", "pool"),
    Scope.RANK: ("namespace", "worker", "dp_rank", "tp_rank", "pp_rank"),
    Scope.TARGET: ("namespace",),
    Scope.SIDECAR: ("namespace",),
}


def dashboard_path(uid: str) -> str:
    """The Grafana path of a generated dashboard (its slug is its uid)."""
    return f"/d/{uid}/{uid}"


def dashboard_link(
    scope: Scope, value: Callable[[str], str | None], config: MixinConfig | None = None
) -> str:
    """The Grafana path of the dashboard for an alert of ``scope``, its variables set from
    ``value(label)`` (already encoded; ``None`` leaves the variable out)."""
    config = config or MixinConfig()
    fleet = scope in (Scope.TARGET, Scope.SIDECAR)
    uid = config.fleet_dashboard_uid if fleet else config.worker_dashboard_uid
    path = dashboard_path(uid)
    pairs = [(n, value(n)) for n in _SCOPE_VARS[scope]]
    query = "&".join(f"var-{n}={v}" for n, v in pairs if v is not None)
    return f"{path}?{query}" if query else path


def by_name(name: str) -> AlertDef:
    for alert in ALERTS:
        if alert.name == name:
            return alert
    raise KeyError(f"no alert named {name!r}")
