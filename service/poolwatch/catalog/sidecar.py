"""The sidecar's own metrics: its targets (scrapes, discovery), detection and delivery, the process,
and the standard ``process_*`` families of client_python's process collector.  Part of
:data:`poolwatch.catalog.metrics.CATALOG`."""

from __future__ import annotations

from poolwatch.catalog.spec import (
    ALERT_LABELS,
    POOL_LABELS,
    TARGET_LABELS,
    Kind,
    MetricSpec,
)
from poolwatch.catalog.spec import counter as _c
from poolwatch.catalog.spec import gauge as _g


def _standard(name: str, kind: Kind, help_: str, unit: str = "") -> MetricSpec:
    return MetricSpec(name, kind, help_, (), unit, "process", standard=True)


# client_python's process collector (Linux /proc), on the sidecar's /metrics like any exporter's
_PROCESS: tuple[MetricSpec, ...] = (
    _standard(
        "process_cpu_seconds_total", Kind.COUNTER, "CPU time (user + system) the sidecar process used."
    ),
    _standard(
        "process_resident_memory_bytes", Kind.GAUGE, "Resident memory (RSS) of the sidecar process.", "bytes"
    ),
    _standard(
        "process_virtual_memory_bytes", Kind.GAUGE, "Virtual memory size of the sidecar process.", "bytes"
    ),
    _standard("process_open_fds", Kind.GAUGE, "File descriptors the sidecar process holds open."),
    _standard("process_max_fds", Kind.GAUGE, "The sidecar process's limit of open file descriptors."),
    _standard(
        "process_start_time_seconds",
        Kind.GAUGE,
        "Unix time at which the sidecar process started.",
        "seconds",
    ),
)

SIDECAR: tuple[MetricSpec, ...] = (
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
        "could not be listed; unsafe: the directory, the secret or a file is another user's or writable "
        "by others, so nothing in it is trusted; forged: a final snapshot whose signature does not hold "
        "or that is dated in the future).",
        ("reason",),
        group="targets",
    ),
    _g(
        "poolwatch_discovery_directory_lost",
        "1 while the probe discovery directory, in which probes had announced themselves, is lost, by "
        "reason (unsafe: its path now names another directory, or one someone else could write; "
        "missing: it is gone); 0 otherwise. The sidecar keeps reading the directory it opened.",
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
    _g(
        "poolwatch_sidecar_info",
        "The pod this sidecar serves (POOLWATCH_POD, POD_NAME, or the host name in Kubernetes), as "
        "sidecar_pod; value is always 1. Prometheus' own pod label must be the same "
        "(PoolwatchSidecarIdentityCrossed).",
        ("sidecar_pod",),
        group="process",
    ),
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
        "saved), state_file_corrupt (a corrupt state file was set aside at start), state_file_unsafe "
        "(a state file someone else could have written was refused at start).",
        ("what",),
        "process",
    ),
    *_PROCESS,
)
