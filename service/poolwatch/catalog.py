"""Every metric poolwatch exports, as data.

This catalogue is the single source for the collectors (which refuse to emit a name that is not
here), the README's metric table, the dashboards and the Prometheus rules (whose tests fail when
they name a metric that is not here).  Names follow Prometheus conventions: ``poolwatch_`` prefix,
base units (``_slots``, ``_seconds``), ``_total`` for counters, no colons.

The entries' shape and label sets are in :mod:`poolwatch.catalog_spec`, the ranks' metrics in
:mod:`poolwatch.catalog_ranks`; this module joins them with the sidecar's own into :data:`CATALOG`.
"""

from __future__ import annotations

from poolwatch.catalog_ranks import RANK_METRICS
from poolwatch.catalog_spec import (
    ALERT_LABELS,
    POOL_LABELS,
    RANK_LABELS,
    TARGET_LABELS,
    Kind,
    MetricSpec,
    rank_label_values,
)
from poolwatch.catalog_spec import counter as _c
from poolwatch.catalog_spec import gauge as _g

__all__ = [
    "CATALOG",
    "RANK_LABELS",
    "Kind",
    "MetricSpec",
    "TARGET_LABELS",
    "by_name",
    "markdown_table",
    "rank_label_values",
]

CATALOG: tuple[MetricSpec, ...] = (
    *RANK_METRICS,
    # --- targets (the sidecar's own scraping) ---
    _g(
        "poolwatch_target_up",
        "1 when the last scrape of the target succeeded.",
        TARGET_LABELS,
        group="targets",
    ),
    _g(
        "poolwatch_target_scrape_duration_seconds",
        "Duration of the last scrape of the target.",
        TARGET_LABELS,
        "seconds",
        "targets",
    ),
    _g(
        "poolwatch_target_last_success_timestamp_seconds",
        "Unix time of the last successful scrape of the target.",
        TARGET_LABELS,
        "seconds",
        "targets",
    ),
    _c("poolwatch_target_scrapes_total", "Scrapes attempted.", TARGET_LABELS, "targets"),
    _g(
        "poolwatch_discovery_skipped_files",
        "Files of the probe discovery directory its last scan skipped, by reason (not_regular, too_large, "
        "unreadable, not_json, schema, not_loopback, too_many_files, directory: the directory itself "
        "could not be listed).",
        ("reason",),
        group="targets",
    ),
    _c(
        "poolwatch_target_scrape_errors_total",
        "Failed scrapes by reason (timeout, connect, http_status, too_large, decode, schema, version, "
        "parse, io, internal).",
        (*TARGET_LABELS, "reason"),
        "targets",
    ),
    # --- detection and delivery ---
    _g(
        "poolwatch_alert_active",
        "1 for each alert the sidecar's detector holds pending or firing.",
        (*ALERT_LABELS, "state"),
        group="alerts",
    ),
    _g(
        "poolwatch_pool_leak_rate_slots_per_second",
        "Fitted trend of the conservation gap over the detector's window (> 0: slots being lost).",
        POOL_LABELS,
        group="alerts",
    ),
    _g(
        "poolwatch_pool_exhaustion_eta_seconds",
        "Seconds until the pool runs out at the fitted leak rate (absent when not leaking).",
        POOL_LABELS,
        "seconds",
        "alerts",
    ),
    _c(
        "poolwatch_notifications_total",
        "Alert notifications sent, by receiver and outcome (sent, failed, dropped).",
        ("receiver", "outcome"),
        "alerts",
    ),
    _g(
        "poolwatch_notification_queue_length",
        "Notifications waiting for delivery.",
        ("receiver",),
        group="alerts",
    ),
    _g("poolwatch_build_info", "poolwatch's version; value is always 1.", ("version",), group="process"),
    _c(
        "poolwatch_task_crashes_total",
        "Crashes of a sidecar background task (scrape loop, evaluation timer, a deliverer); each is "
        "logged and the task restarted with backoff.",
        ("task",),
        "process",
    ),
    _g(
        "poolwatch_task_crash_looping",
        "1 while a background task crashed 3 times within 5 minutes (/readyz lists it meanwhile).",
        ("task",),
        group="process",
    ),
    _c(
        "poolwatch_internal_errors_total",
        "Contained failures that stop nothing, by kind: state_file_write (the alert state could not be "
        "saved), state_file_corrupt (a corrupt state file was set aside at start).",
        ("what",),
        "process",
    ),
)


def by_name(name: str) -> MetricSpec:
    """The spec of ``name`` (a counter may be named with or without ``_total``)."""
    for spec in CATALOG:
        if name in (spec.name, spec.name.removesuffix("_total")):
            return spec
    raise KeyError(f"metric {name!r} is not in poolwatch's catalogue")


def markdown_table() -> str:
    """The README's metric table."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for s in CATALOG:
        labels = ", ".join(f"`{lbl}`" for lbl in s.labels)
        rows.append(f"| `{s.name}` | {s.kind.value} | {labels} | {s.help} |")
    return "\n".join(rows)
