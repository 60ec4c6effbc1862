"""What every setting of ``poolwatch serve`` means, in one line each: the help of its ``--flag``
(which adds the default and the ``POOLWATCH_*`` variable) and of the deploy docs.

A test fails when a setting has no line here or a line names no setting, so a new setting cannot
reach ``--help`` undescribed.  A detector family's own thresholds are described where they are
declared (:func:`poolwatch.detect.thresholds.threshold`), not here.
"""

from __future__ import annotations

from poolwatch.engines import read_engines

__all__ = ["HELP", "SHOWN_DEFAULTS", "show_default"]

HELP: dict[str, str] = {
    # server
    "host": "address to listen on (a pod's sidecar must be reachable by Prometheus; 127.0.0.1 for local use)",
    "port": "port of /metrics, the API and the status page (docs/deploy.md: why 9464)",
    "log_level": "debug, info, warning or error",
    "log_format": "text (time level logger message) or json (one object per line: time, level, logger, "
    "message, event)",
    "ready_requires_data": "opt-in: /readyz fails while no rank has fresh data (a native sidecar's "
    "readiness is the pod's, so this takes SGLang out of its Service)",
    # scrape
    "scrape_interval": "seconds between two reads of one target (the probe is also long-polled)",
    "scrape_timeout": "seconds one read of a target may take",
    "scrape_concurrency": "targets read at the same time",
    "max_body_bytes": "largest answer accepted from a target, in bytes",
    "history": "snapshots kept per rank for /api/v1/workers/{key}/history",
    "history_budget": "snapshots kept in all ranks' histories together: with many ranks each keeps"
    " this divided by their number (bounds memory at fleet scale)",
    "history_bytes": "bytes all ranks' snapshots may weigh together: each rank and source holds its"
    " share (at least 64 KiB), the oldest shed first, a heavier latest one named more briefly"
    " (bounds memory at any snapshot size and rate)",
    # targets
    "probe_dir": "discovery directory where each scheduler rank's probe announces itself (the probe's "
    "POOLWATCH_PROBE_DIR)",
    "probe_urls": "probe endpoints to read, comma-separated",
    "metrics_urls": "engine servers whose own /metrics (SGLang: and /get_server_info) give coarse "
    "figures, comma-separated",
    "log_paths": "engine log files to follow, comma-separated",
    "engine": "the engine whose /metrics and log formats --metrics-urls and --log-paths are: "
    + " or ".join(read_engines()),
    "snapshot_files": "JSON snapshot files to read (fixtures, other tools), comma-separated",
    "targets_file": "YAML list of targets with their workers (central mode)",
    "probe_workers": "follow only the discovered probes of these workers, comma-separated (empty: all)",
    # identity
    "worker": "the watched worker's name (empty: POD_NAME, then the host name)",
    "role": "prefill, decode or unified",
    "model": "the served model, for the worker's info metric",
    "namespace": "namespace label of the sidecar's own alerts, as Prometheus labels the rules' (empty: "
    "POD_NAMESPACE)",
    "pod": "pod label of the sidecar's own alerts, as Prometheus labels the rules' (empty: POD_NAME, "
    "or the host name inside Kubernetes)",
    "forget_after": "seconds after which a rank no source reports any more is forgotten: its state goes "
    "and its alerts resolve, saying why",
    # alerting
    "alertmanager_urls": "Alertmanager base URLs the sidecar posts its alerts to (the fast page path), "
    "comma-separated; every replica of an HA Alertmanager",
    "webhook_urls": "URLs that receive the alerts as JSON, comma-separated",
    "bearer_token_file": "file holding a bearer token for the Alertmanagers (never sent to a webhook)",
    "basic_auth_user": "basic-auth user for the Alertmanagers (never sent to a webhook)",
    "basic_auth_password_file": "file holding the Alertmanagers' basic-auth password",
    "tls_verify": "verify the receivers' TLS certificates (true or false)",
    "ca_file": "CA bundle to verify the receivers with (empty: the system's)",
    "runbook_base_url": "absolute URL under which <AlertName>.md runbooks live (alerts' runbook_url)",
    "dashboard_url": "absolute base URL of your Grafana, prefixed to alerts' dashboard links",
    "alert_labels": "name=value labels added to the sidecar's own alerts, comma-separated: your Prometheus' "
    "external labels (kube-prometheus: prometheus=monitoring/k8s), so both paths' copies merge",
    "fleet_dashboard_uid": "uid of the fleet dashboard, as `poolwatch generate` named it",
    "worker_dashboard_uid": "uid of the worker dashboard, as `poolwatch generate` named it",
    "resend_interval": "seconds between two sends of a firing alert to a receiver",
    "state_file": "file where firing alerts survive a sidecar restart (empty: memory only)",
    "evaluate_interval": "seconds between two timer evaluations (staleness, targets, hold times)",
    "notify_queue": "resolved alerts a receiver may have waiting before the oldest are dropped",
    "notify_timeout": "seconds one delivery to a receiver may take in all (connect, send, its answer)",
    # detection (poolwatch.detect.config.DetectorConfig)
    "deficit_samples": "snapshots at distinct scheduler iterations a deficit must persist before it fires",
    "resolve_samples": "clean snapshots (distinct iterations) before a sampled alert resolves",
    "resolve_hold": "seconds since the condition was last seen before a sampled alert resolves",
    "coarse_hold": "seconds a deficit seen only in coarse figures must last before it fires",
    "incident_hold": "seconds an alert raised by a log line stays firing",
    "stale_after": "seconds after which a rank's snapshot is stale (its pool figures withheld)",
    "stale_for": "seconds a rank stays stale before PoolwatchSnapshotStale fires",
    "target_down_for": "seconds a target keeps failing before PoolwatchTargetDown fires",
    "large_leak_fraction": "a deficit of at least this share of the pool is critical anyway",
    "trend_window": "seconds of gap history the leak rate is fitted over",
    "exhaustion_horizon": "PoolwatchPoolExhaustionForecast fires when a pool runs out sooner (seconds)",
    "forecast_for": "seconds the forecast must hold before it fires",
    "probe_error_window": "seconds over which new probe errors count as degraded",
    "probe_disabled_for": "seconds the probe's kill switch stays engaged before it fires",
    "restore_grace": "seconds a restored alert waits for its rank to report before it resolves",
    "retention": "seconds a resolved alert stays listed (and is re-sent as resolved)",
    # each detector family's own thresholds carry their help (poolwatch.detect.thresholds.threshold)
    # limits (poolwatch.limits.Limits): per-target caps; a target past one is refused with a reason
    "max_queues": "queues one snapshot may name (more: the snapshot is refused, reason schema)",
    "max_listed": "tripwires, repairs or incidents one snapshot may list (more: reason schema)",
    "max_page_samples": "wanted samples read from one engine's /metrics page (more: reason too_large)",
    "max_page_ranks": "scheduler ranks one engine's /metrics page may show (more: reason too_large)",
    "max_discovery_file_bytes": "size of one discovery file in bytes (a larger one is skipped)",
    "max_discovery_files": "discovery files read per scan (the rest are skipped)",
    "max_log_ranks": "scheduler ranks one engine's log may name (a new one past it is dropped, logged once)",
}


# A default that is not the field's own value but a rule (the field stays "" until the sources decide):
# the sidecar reads the probes' default directory when no other target is configured
# (``poolwatch.sources.targets.TargetSet``, ``poolwatch.discovery.safety.default_directory``).
SHOWN_DEFAULTS: dict[str, str] = {
    "probe_dir": "/run/poolwatch if this user may write there, else $XDG_RUNTIME_DIR/poolwatch, else "
    "/tmp/poolwatch, as the probe; none when another target is set",
}


def show_default(value: object) -> str:
    """A default as ``--help`` shows it: lists comma-separated, nothing as ``none``."""
    if isinstance(value, tuple):
        value = ",".join(str(v) for v in value)
    if isinstance(value, bool):
        value = str(value).lower()
    if hasattr(value, "value"):  # an enum
        value = value.value
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text or "none"
