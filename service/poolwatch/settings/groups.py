"""The settings groups of ``poolwatch serve``, one frozen dataclass per concern, with their defaults.

:class:`poolwatch.settings.sidecar.Settings` holds one of each (and the detector's and the limits'
groups, which live beside their code); :mod:`poolwatch.settings.parse` turns strings into them.
"""

from __future__ import annotations

from dataclasses import dataclass

from poolwatch.detect.config import (
    FLEET_DASHBOARD_UID,
    GRAFANA_URL,
    RUNBOOK_BASE_URL,
    WORKER_DASHBOARD_UID,
)
from poolwatch.engines import DEFAULT_ENGINE
from poolwatch.model.rank import Role

__all__ = [
    "AlertSettings",
    "IdentitySettings",
    "ScrapeSettings",
    "ServerSettings",
    "TargetSettings",
]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "0.0.0.0"  # a sidecar must be reachable by Prometheus; tests and the demo use 127.0.0.1
    port: int = 9464
    log_level: str = "info"
    log_format: str = "text"  # or "json": one JSON object per line (poolwatch.commands.logs)
    ready_requires_data: bool = False  # opt-in: /readyz fails while no rank has fresh data (gates the pod!)


@dataclass(frozen=True, slots=True)
class ScrapeSettings:
    scrape_interval: float = 1.0  # seconds between scrapes of one target
    scrape_timeout: float = 2.0
    scrape_concurrency: int = 32
    max_body_bytes: int = 4 << 20
    history: int = 256  # snapshots kept per rank for /api/v1/workers/{key}/history
    history_budget: int = 16384  # snapshots kept in all ranks' histories together
    history_bytes: int = 48 << 20  # what all ranks' snapshots may weigh together (sidecar.store)


@dataclass(frozen=True, slots=True)
class TargetSettings:
    probe_dir: str = ""  # discovery directory of in-process probes ("" = off)
    probe_urls: tuple[str, ...] = ()
    metrics_urls: tuple[str, ...] = ()  # engine servers (SGLang: their /metrics and /get_server_info)
    log_paths: tuple[str, ...] = ()  # engine log files
    engine: str = DEFAULT_ENGINE  # whose /metrics and log formats metrics_urls and log_paths are
    snapshot_files: tuple[str, ...] = ()  # JSON snapshot files (fixtures, other tools)
    targets_file: str = ""  # YAML list of targets (central mode)
    probe_workers: tuple[str, ...] = ()  # follow only the discovered probes of these workers (() = all)


@dataclass(frozen=True, slots=True)
class IdentitySettings:
    """Who the watched worker is (:mod:`poolwatch.naming` decides every default)."""

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
    notify_timeout: float = 10.0  # seconds one delivery may take in all (connect, send, answer)
