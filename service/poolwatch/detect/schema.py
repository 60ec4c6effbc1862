"""What an alert definition is made of: the alert vocabulary and the links an alert carries.

Names are CamelCase with the ``Poolwatch`` prefix (:class:`AlertName`).  ``severity`` is
``critical`` (pages), ``warning`` (a ticket) or ``info``.  Each alert has a static ``summary``, a
``description`` with the figures, a ``runbook_url`` derived from its name
(``docs/runbooks/<Name>.md``) and a ``dashboard_url`` (:func:`dashboard_link`, the dashboard for
its :class:`Scope` with that scope's variables set).  The alerts themselves are the data in
:mod:`poolwatch.detect.rules`; the detector judges each one in a family
(:mod:`poolwatch.detect.families`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from poolwatch.detect.config import MixinConfig

__all__ = [
    "ALERT_NAME_PATTERN",
    "AlertDef",
    "AlertName",
    "Mode",
    "PromRule",
    "Scope",
    "Severity",
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
    NOT_SCRAPED = "PoolwatchNotScraped"
    NOTIFICATIONS_FAILING = "PoolwatchNotificationsFailing"
    TASK_CRASH_LOOPING = "PoolwatchTaskCrashLooping"
    PROBE_REPAIRED = "PoolwatchProbeRepaired"
    HOST_POOL_GAP = "PoolwatchHostPoolGap"
    PROBE_DIRECTORY_LOST = "PoolwatchProbeDirectoryLost"
    PROBE_REFUSED = "PoolwatchProbeRefused"
    SIDECAR_IDENTITY_CROSSED = "PoolwatchSidecarIdentityCrossed"


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
