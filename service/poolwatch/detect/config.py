"""The one definition of how poolwatch judges and links its alerts.

:class:`DetectorConfig` holds every detection threshold with its default and range check; it is
also the sidecar's ``detection`` settings group (``POOLWATCH_<FIELD>``), so a threshold is written
once.  :class:`MixinConfig` wraps it with what the generated rules and dashboards need besides
(the kubernetes-mixin ``_config`` idea): runbook and Grafana URLs, dashboard uids, an optional
label selector and cluster label.  The detector, :mod:`poolwatch.detect.rules` and
:mod:`poolwatch.artifacts` all read the same value, so ``poolwatch generate --config`` emits rules
that match a sidecar run with the same settings, and the committed artifacts use the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

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
    ``hold_grace``            seconds past the engine's own bound on a wait (a KV transfer's lease or
                              timeout) after which its owners' capacity counts as stranded;
    ``hold_default``          ... the bound where the engine has none for that wait;
    ``hold_limit``            > 0: this bound for every wait instead, whatever the engine's (0: theirs);
    ``hold_min_slots``        a stranded hold pages only from this many slots (blocks on vLLM);
    ``stall_steps``           step boundaries without progress, admittable requests waiting, before
                              PoolwatchAdmissionStall fires ...
    ``stall_for``             ... lasting at least this many seconds ...
    ``stall_free_fraction``   ... with at least this share of every device pool free or evictable;
    ``stall_fruitless``       preemptions that could give nothing back at once (a fenced victim) ...
    ``stall_window``          ... within this many seconds, which fire it as well.
    """

    deficit_samples: int = 3
    resolve_samples: int = 3
    resolve_hold: float = 30.0
    coarse_hold: float = 60.0
    incident_hold: float = 900.0
    stale_after: float = 10.0
    stale_for: float = 60.0
    target_down_for: float = 120.0
    large_leak_fraction: float = 0.05
    trend_window: float = 900.0
    exhaustion_horizon: float = 4 * 3600.0
    forecast_for: float = 600.0
    probe_error_window: float = 600.0
    probe_disabled_for: float = 60.0
    restore_grace: float = 300.0
    retention: float = 900.0
    hold_grace: float = 60.0
    hold_default: float = 600.0
    hold_limit: float = 0.0
    hold_min_slots: int = 1
    stall_steps: int = 20
    stall_for: float = 30.0
    stall_free_fraction: float = 0.1
    stall_fruitless: int = 3
    stall_window: float = 300.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            least = 1 if f.type == "int" else 0
            if not value >= least:  # also rejects NaN
                raise ConfigError(f"POOLWATCH_{f.name.upper()}: must be at least {least}, got {value}")
        for name in ("large_leak_fraction", "stall_free_fraction"):
            fraction = getattr(self, name)
            if not 0 < fraction <= 1:
                raise ConfigError(f"POOLWATCH_{name.upper()}: must be in (0, 1], got {fraction}")

    def hold_bound(self, timeout: float | None) -> float:
        """Seconds a hold's oldest owner may wait before its capacity counts as stranded: the
        engine's own bound on the wait (``timeout``) and the grace, or :attr:`hold_default` where
        the engine has none; :attr:`hold_limit` instead when set."""
        if self.hold_limit > 0:
            return self.hold_limit
        return self.hold_default if timeout is None else timeout + self.hold_grace


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
