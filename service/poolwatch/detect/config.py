"""The one definition of how poolwatch judges and links its alerts.

:class:`DetectorConfig` holds the detection thresholds every family shares, with their defaults and
range checks; it is also the sidecar's ``detection`` settings group (``POOLWATCH_<FIELD>``), so a
threshold is written once.  A family's own thresholds are declared in its module
(:mod:`poolwatch.detect.thresholds`) and carried here by value.  :class:`MixinConfig` wraps it
with what the generated rules and dashboards need besides (the kubernetes-mixin ``_config`` idea):
runbook and Grafana URLs, dashboard uids, an optional label selector and cluster label.  The
detector, :mod:`poolwatch.detect.rules` and :mod:`poolwatch.artifacts` all read the same value,
so ``poolwatch generate --config`` emits rules that match a sidecar run with the same settings,
and the committed artifacts use the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from poolwatch.detect.thresholds import Thresholds, check_ranges
from poolwatch.errors import ConfigError

__all__ = [
    "FLEET_DASHBOARD_UID",
    "GRAFANA_URL",
    "RUNBOOK_BASE_URL",
    "WORKER_DASHBOARD_UID",
    "DetectorConfig",
    "MixinConfig",
]

RUNBOOK_BASE_URL = "https://github.com/poolwatch/poolwatch/blob/main/docs/runbooks"
# Links in a notification must be absolute: kube-prometheus' Grafana Service by default (like the
# sidecar's alertmanager-operated default); set your own at generate time and run time
GRAFANA_URL = "http://grafana.monitoring.svc:3000"
FLEET_DASHBOARD_UID = "poolwatch-fleet"
WORKER_DASHBOARD_UID = "poolwatch-worker"
T = TypeVar("T", bound=Thresholds)


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """How long to wait before paging and before calling an alert resolved.

    ``deficit_samples``       consecutive samples, at distinct scheduler iterations, a deficit must
                              persist before PoolwatchSlotLeak fires (a surplus fires at once);
    ``resolve_samples``       clean samples (distinct iterations) before a sampled alert resolves;
    ``resolve_hold``          ... and seconds since the last bad sample (hysteresis, no flapping);
    ``coarse_hold``           seconds a deficit seen only through coarse figures (an idle residual
                              from SGLang's own gauges, which refresh slowly) must persist;
    ``incident_hold``         seconds an alert raised by a log line stays firing;
    ``stale_after``           a snapshot older than this is stale (the exporter's limit);
    ``stale_for``/``target_down_for``  how long staleness / a failing target lasts before it fires;
    ``large_leak_fraction``   a deficit of at least this fraction of the pool is critical anyway;
    ``trend_window``          seconds of gap history the leak rate is fitted over;
    ``exhaustion_horizon``    PoolwatchPoolExhaustionForecast fires when the pool runs out sooner;
    ``forecast_for``          ... and keeps forecasting that for this long;
    ``probe_error_window``    seconds over which new probe errors count as degraded;
    ``probe_disabled_for``    seconds the probe's kill switch stays engaged before it fires;
    ``restore_grace``         a restored alert whose rank reports nothing for this long resolves;
    ``retention``             seconds a resolved alert stays listed (and is re-sent as resolved);
    ``families``              the thresholds of the families that declare their own
                              (:mod:`poolwatch.detect.thresholds`), one value per class given; a
                              class not given reads its defaults (:meth:`of`).
    """

    deficit_samples: int = 3
    resolve_samples: int = 3
    resolve_hold: float = 30.0
    coarse_hold: float = 60.0
    incident_hold: float = 900.0
    stale_after: float = 10.0
    stale_for: float = 60.0
    target_down_for: float = 120.0
    large_leak_fraction: float = field(default=0.05, metadata={"share": True})
    trend_window: float = 900.0
    exhaustion_horizon: float = 4 * 3600.0
    forecast_for: float = 600.0
    probe_error_window: float = 600.0
    probe_disabled_for: float = 60.0
    restore_grace: float = 300.0
    retention: float = 900.0
    families: tuple[Thresholds, ...] = field(default=(), metadata={"setting": False})

    def __post_init__(self) -> None:
        check_ranges(self)
        kinds = [type(t) for t in self.families]
        if len(set(kinds)) != len(kinds):
            raise ConfigError("detector thresholds: one value per family's class")

    def of(self, kind: type[T]) -> T:
        """The thresholds of class ``kind`` given to this config, or its defaults."""
        for given in self.families:
            if type(given) is kind:
                return given
        default = _DEFAULTS.get(kind)
        if not isinstance(default, kind):  # built (and range-checked) once, not at every snapshot
            default = _DEFAULTS[kind] = kind()
        return default


_DEFAULTS: dict[type[Thresholds], Thresholds] = {}  # each family's default thresholds, a value each


@dataclass(frozen=True, slots=True)
class MixinConfig:
    """What the detector, the Prometheus rules and the dashboards share.

    ``detector``              the thresholds (the rules' ``for:`` and bounds come from them);
    ``runbook_base_url``      where ``<alert name>.md`` runbooks live (alerts' ``runbook_url``);
    ``dashboard_url``         Grafana's base URL, prefixed to alerts' ``dashboard_url``;
    ``fleet_dashboard_uid`` / ``worker_dashboard_uid``  the generated dashboards' uids;
    ``selector``              PromQL label matchers added to every ``poolwatch_*`` selector of the
                              rules and dashboards (e.g. ``job="poolwatch"``; "" = none);
    ``cluster_label``         the label that tells clusters apart ("" = one cluster): rules join on
                              it and the dashboards get a variable for it.
    """

    detector: DetectorConfig = field(default_factory=DetectorConfig)
    runbook_base_url: str = RUNBOOK_BASE_URL
    dashboard_url: str = GRAFANA_URL
    fleet_dashboard_uid: str = FLEET_DASHBOARD_UID
    worker_dashboard_uid: str = WORKER_DASHBOARD_UID
    selector: str = ""
    cluster_label: str = ""

    def __post_init__(self) -> None:
        for name in ("fleet_dashboard_uid", "worker_dashboard_uid"):
            uid = getattr(self, name)
            if not uid or len(uid) > 40 or not uid.replace("-", "").replace("_", "").isalnum():
                raise ConfigError(f"{name}: expected 1-40 letters, digits, - or _, got {uid!r}")
        if self.cluster_label and not self.cluster_label.replace("_", "").isalnum():
            raise ConfigError(f"cluster_label: not a Prometheus label name: {self.cluster_label!r}")
        if "{" in self.selector or "}" in self.selector:
            raise ConfigError(f"selector: give label matchers without braces, got {self.selector!r}")
