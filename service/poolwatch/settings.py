"""Typed settings, built once at the edge from ``POOLWATCH_*`` environment and command-line flags.

Every field of every group is one environment variable (``POOLWATCH_`` + the field name in upper
case) and one flag (``--`` + the field name with dashes).  Flags win over the environment.  A bad
value raises :class:`~poolwatch.errors.ConfigError` with one line naming the setting; the CLI
prints it and exits 2.  Lists are comma-separated.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_type_hints

from poolwatch.detect.config import (
    FLEET_DASHBOARD_UID,
    GRAFANA_URL,
    RUNBOOK_BASE_URL,
    WORKER_DASHBOARD_UID,
    DetectorConfig,
    MixinConfig,
)
from poolwatch.errors import ConfigError
from poolwatch.identity import namespace_name, pod_name, worker_name
from poolwatch.limits import LimitError, Limits
from poolwatch.model import Role
from poolwatch.settings_help import HELP, show_default

__all__ = [
    "AlertSettings",
    "IdentitySettings",
    "ScrapeSettings",
    "ServerSettings",
    "Settings",
    "TargetSettings",
]

ENV_PREFIX = "POOLWATCH_"


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "0.0.0.0"  # a sidecar must be reachable by Prometheus; tests and the demo use 127.0.0.1
    port: int = 9464
    log_level: str = "info"
    ready_requires_data: bool = False  # opt-in: /readyz fails while no rank has fresh data (gates the pod!)


@dataclass(frozen=True, slots=True)
class ScrapeSettings:
    scrape_interval: float = 1.0  # seconds between scrapes of one target
    scrape_timeout: float = 2.0
    scrape_concurrency: int = 32
    max_body_bytes: int = 4 << 20
    history: int = 256  # snapshots kept per rank for /api/v1/workers/{key}/history
    history_budget: int = 16384  # snapshots kept in all ranks' histories together


@dataclass(frozen=True, slots=True)
class TargetSettings:
    probe_dir: str = ""  # discovery directory of in-process probes ("" = off)
    probe_urls: tuple[str, ...] = ()
    metrics_urls: tuple[str, ...] = ()  # SGLang servers (their /metrics and /get_server_info)
    log_paths: tuple[str, ...] = ()  # SGLang log files
    snapshot_files: tuple[str, ...] = ()  # JSON snapshot files (fixtures, other tools)
    targets_file: str = ""  # YAML list of targets (central mode)
    probe_workers: tuple[str, ...] = ()  # follow only the discovered probes of these workers (() = all)


@dataclass(frozen=True, slots=True)
class IdentitySettings:
    """Who the watched worker is (:mod:`poolwatch.identity` decides every default)."""

    worker: str = ""  # "" = POD_NAME, then the host name
    role: Role = Role.UNIFIED
    model: str = ""
    namespace: str = ""  # "" = POD_NAMESPACE; a label on the sidecar's own alerts, as Prometheus adds it
    pod: str = ""  # "" = POD_NAME, or the host name inside Kubernetes; a label on the sidecar's own alerts
    forget_after: float = 3600.0  # seconds after which a rank that reports nothing any more is forgotten


@dataclass(frozen=True, slots=True)
class AlertSettings:
    alertmanager_urls: tuple[str, ...] = ()
    webhook_urls: tuple[str, ...] = ()
    bearer_token_file: str = ""
    basic_auth_user: str = ""
    basic_auth_password_file: str = ""
    tls_verify: bool = True
    ca_file: str = ""
    runbook_base_url: str = RUNBOOK_BASE_URL
    dashboard_url: str = GRAFANA_URL  # Grafana's absolute base URL, prefixed to alerts' dashboard links
    alert_labels: tuple[str, ...] = ()  # name=value pairs: Prometheus' external labels, for the merge
    fleet_dashboard_uid: str = FLEET_DASHBOARD_UID  # as `poolwatch generate` named the dashboards
    worker_dashboard_uid: str = WORKER_DASHBOARD_UID
    resend_interval: float = 60.0
    state_file: str = ""  # where firing alerts survive a restart ("" = memory only)
    evaluate_interval: float = 5.0  # seconds between timer evaluations of the detector
    notify_queue: int = 1000  # alerts a receiver keeps waiting for delivery before dropping


@dataclass(frozen=True, slots=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    scrape: ScrapeSettings = field(default_factory=ScrapeSettings)
    targets: TargetSettings = field(default_factory=TargetSettings)
    identity: IdentitySettings = field(default_factory=IdentitySettings)
    alerting: AlertSettings = field(default_factory=AlertSettings)
    detection: DetectorConfig = field(default_factory=DetectorConfig)  # thresholds, checked there
    limits: Limits = field(default_factory=Limits)  # per-target caps, ranges checked there

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Settings from ``POOLWATCH_*`` variables (others are ignored)."""
        return cls.from_values(_env_values(environ), environ)

    @classmethod
    def from_values(cls, values: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from raw strings keyed by field name; unknown names are an error."""
        known = {f.name for group in _GROUPS.values() for f in fields(group)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{_env_name(unknown[0])}: unknown setting")
        groups = {name: _build(group, values) for name, group in _GROUPS.items()}
        settings = cls(**groups)
        return settings.with_default_worker(environ or {})

    def mixin(self, *, selector: str = "", cluster_label: str = "") -> MixinConfig:
        """What the detector, the generated rules and the dashboards share, as these settings say."""
        a = self.alerting
        return MixinConfig(
            detector=self.detection,
            runbook_base_url=a.runbook_base_url,
            dashboard_url=a.dashboard_url,
            fleet_dashboard_uid=a.fleet_dashboard_uid,
            worker_dashboard_uid=a.worker_dashboard_uid,
            selector=selector,
            cluster_label=cluster_label,
        )

    def with_default_worker(self, environ: Mapping[str, str]) -> Settings:
        """Fill the identity the flags and ``POOLWATCH_*`` left empty, the one way
        :mod:`poolwatch.identity` names a worker and its pod."""
        ident = self.identity
        filled = dataclasses.replace(
            ident,
            worker=ident.worker or worker_name(environ),
            namespace=ident.namespace or namespace_name(environ),
            pod=ident.pod or pod_name(environ),
        )
        return self if filled == ident else dataclasses.replace(self, identity=filled)


_GROUPS: dict[str, type[Any]] = {
    "server": ServerSettings,
    "scrape": ScrapeSettings,
    "targets": TargetSettings,
    "identity": IdentitySettings,
    "alerting": AlertSettings,
    "detection": DetectorConfig,
    "limits": Limits,
}


def _env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def _env_values(environ: Mapping[str, str]) -> dict[str, str]:
    names = {_env_name(f.name): f.name for group in _GROUPS.values() for f in fields(group)}
    return {names[k]: v for k, v in environ.items() if k in names}


def _build(group: type[Any], values: Mapping[str, str]) -> Any:
    hints = get_type_hints(group)
    kwargs = {
        f.name: _convert(f.name, hints[f.name], values[f.name]) for f in fields(group) if f.name in values
    }
    try:
        return group(**kwargs)
    except LimitError as exc:
        raise ConfigError(str(exc)) from None


def _convert(name: str, kind: Any, raw: str) -> Any:
    try:
        value = _CONVERTERS[kind](raw.strip())
    except (ValueError, KeyError):
        expected = _EXPECTED.get(kind, str(kind))
        raise ConfigError(f"{_env_name(name)}: expected {expected}, got {raw!r}") from None
    _check_range(name, value)
    return value


def _bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _positive_number(raw: str) -> float:
    value = float(raw)
    if not value > 0 or value == float("inf"):
        raise ValueError(raw)
    return value


def _list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


_CONVERTERS: dict[Any, Any] = {
    str: str,
    int: int,
    float: _positive_number,
    bool: _bool,
    tuple[str, ...]: _list,
    Role: Role,
}
_EXPECTED = {
    int: "an integer",
    float: "a number > 0",
    bool: "true or false",
    Role: "one of prefill, decode, unified",
}
_MINIMUM = {
    "port": 0,
    "scrape_concurrency": 1,
    "max_body_bytes": 1024,  # and at most 1 GiB
    "history": 1,
    "history_budget": 1,
    "notify_queue": 1,
}

_MAXIMUM = {"port": 65535, "max_body_bytes": 1 << 30}


def _check_range(name: str, value: Any) -> None:
    if name in _MINIMUM and value < _MINIMUM[name]:
        raise ConfigError(f"{_env_name(name)}: must be at least {_MINIMUM[name]}, got {value}")
    if name in _MAXIMUM and value > _MAXIMUM[name]:
        raise ConfigError(f"{_env_name(name)}: must be at most {_MAXIMUM[name]}, got {value}")
    if name == "log_level" and value.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"{_env_name(name)}: expected debug, info, warning or error, got {value!r}")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per setting, its help saying what it does, its default and its variable
    (values stay strings until :meth:`Settings.from_values`)."""
    for group_name, group in _GROUPS.items():
        section = parser.add_argument_group(group_name)
        for f in fields(group):
            flag = "--" + f.name.replace("_", "-")
            text = f"{HELP[f.name]} (default: {show_default(f.default)}; env {_env_name(f.name)})"
            section.add_argument(
                flag, dest=f"setting_{f.name}", metavar="VALUE", help=text.replace("%", "%%")
            )


def from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Flags over environment."""
    values = _env_values(environ)
    for key, value in vars(args).items():
        if key.startswith("setting_") and value is not None:
            values[key.removeprefix("setting_")] = value
    return Settings.from_values(values, environ)
