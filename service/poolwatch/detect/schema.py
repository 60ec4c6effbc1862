"""What an alert definition is made of: the alert vocabulary and the links an alert carries.

Names are CamelCase with the ``Poolwatch`` prefix (:data:`ALERT_NAME`, checked when an
:class:`AlertDef` is made); each is written once, in the family module that raises it.  ``severity`` is
``critical`` (pages), ``warning`` (a ticket) or ``info``.  Each alert has a static ``summary``, a
``description`` with the figures, a ``runbook_url`` derived from its name
(``docs/runbooks/<Name>.md``) and a ``dashboard_url`` (:func:`dashboard_link`, the dashboard for
its :class:`Scope` with that scope's variables set).  The alerts themselves are the data of the detector
families (:mod:`poolwatch.detect.families`, listed by :data:`poolwatch.detect.rules.FAMILIES`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

from poolwatch.detect.config import MixinConfig

__all__ = [
    "ALERT_NAME",
    "ALERT_NAME_PATTERN",
    "AlertDef",
    "Mode",
    "PromRule",
    "Scope",
    "Severity",
    "dashboard_link",
    "dashboard_path",
]


ALERT_NAME_PATTERN = "Poolwatch.*"  # matches every alert name (dashboards select ALERTS with it)
ALERT_NAME = re.compile(r"Poolwatch(?:[A-Z][a-z0-9]+)+")  # what an alert name must look like


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
    # the one engine this rule is written for, also its alerts' ``engine`` label (two rules of one
    # alert and severity must differ in a label); "" = any other engine, or one not known yet
    engine: str = ""


@dataclass(frozen=True, slots=True)
class AlertDef:
    """One alert: its name, what one instance is about, how the detector judges it, its static
    summary, one sentence for the alert index, and its Prometheus rules (one or more per severity;
    two rules of one severity must never match the same series)."""

    name: str
    scope: Scope
    mode: Mode
    summary: str
    meaning: str  # one sentence for the alert index
    prometheus: tuple[PromRule, ...]

    def __post_init__(self) -> None:
        if not ALERT_NAME.fullmatch(self.name):
            raise ValueError(f"alert name {self.name!r} is not CamelCase with the Poolwatch prefix")
        if not self.prometheus:
            raise ValueError(f"{self.name} has no Prometheus rule")

    @property
    def runbook_path(self) -> str:
        return f"docs/runbooks/{self.name}.md"

    def runbook_url(self, base: str) -> str:
        return f"{base.rstrip('/')}/{self.name}.md"

    @property
    def severities(self) -> tuple[Severity, ...]:
        """Its rules' severities, each once, in rule order."""
        return tuple(dict.fromkeys(r.severity for r in self.prometheus))


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
