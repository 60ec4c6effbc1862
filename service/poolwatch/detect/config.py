"""The detector's tunables: one frozen value (the sidecar builds it from its ``alerting`` settings).

The defaults are also the thresholds written into the generated Prometheus rules
(:mod:`poolwatch.detect.rules`), so the sidecar's detector and Prometheus agree out of the box.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from poolwatch.errors import ConfigError

__all__ = ["DetectorConfig"]


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
    ``restore_grace``         a restored alert whose rank reports nothing for this long resolves;
    ``retention``             seconds a resolved alert stays listed (and is re-sent as resolved).
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
    restore_grace: float = 300.0
    retention: float = 900.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            least = 1 if f.type == "int" else 0
            if not value >= least:  # also rejects NaN
                raise ConfigError(f"POOLWATCH_{f.name.upper()}: must be at least {least}, got {value}")
        fraction = self.large_leak_fraction
        if not 0 < fraction <= 1:
            raise ConfigError(f"POOLWATCH_LARGE_LEAK_FRACTION: must be in (0, 1], got {fraction}")
