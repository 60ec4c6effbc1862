"""Every metric poolwatch exports, as data.

This catalogue is the single source for the collectors (which refuse to emit a name that is not
here), the README's metric table, the dashboards and the Prometheus rules (whose tests fail when
they name a metric that is not here).  Names follow Prometheus conventions: ``poolwatch_`` prefix,
base units (``_slots``, ``_seconds``), ``_total`` for counters, no colons.

The entries' shape and label sets are in :mod:`poolwatch.catalog.spec`.  :data:`CATALOG` lists
the watched ranks' metrics first (one series per rank and pool), then the sidecar's own (targets,
alerts, process), then the standard ``process_*`` families of client_python's process collector.
"""

from __future__ import annotations

from poolwatch.catalog.spec import (
    ALERT_LABELS,
    POOL_LABELS,
    RANK_LABELS,
    TARGET_LABELS,
    Kind,
    MetricSpec,
)
from poolwatch.catalog.spec import counter as _c
from poolwatch.catalog.spec import gauge as _g

__all__ = ["CATALOG", "by_name", "markdown_table"]

_RANKS: tuple[MetricSpec, ...] = (
    # the watched ranks: their pools, their state and the probe's health
    # --- pools (one series per rank and pool) ---
    _g(
        "poolwatch_pool_capacity_slots",
        "Slots in the pool (the engine's size; for vLLM, blocks less the null block).",
        POOL_LABELS,
        "slots",
    ),
    _g(
        "poolwatch_pool_slots",
        "Slots of the pool by state: available (free lists), evictable (prefix tree, unlocked), "
        "protected (prefix tree, locked), held (live requests), session_held (streaming sessions). "
        "pool=host (HiCache host memory): evictable/protected are the tree's host copies without/with "
        "a host lock, held the slots in flight in the cache controller's operations.",
        (*POOL_LABELS, "state"),
        "slots",
    ),
    _g(
        "poolwatch_pool_used_slots",
        "Slots neither available nor evictable (size - available - evictable), as the engine counts them.",
        POOL_LABELS,
        "slots",
    ),
    _g(
        "poolwatch_pool_conservation_gap_slots",
        "Signed conservation gap size - available - evictable - protected - held - session_held: "
        "> 0 slots lost (leak), < 0 slots counted twice (double free). Absent when it cannot be known.",
        POOL_LABELS,
        "slots",
    ),
    _g(
        "poolwatch_pool_figures_exact",
        "1 when every term of the pool's conservation equation is known exactly (in-process probe), "
        "0 when only coarse figures are (the engine's own /metrics or log).",
        POOL_LABELS,
    ),
    _g(
        "poolwatch_pool_tripwire_slots",
        "Slot ids the probe's identity census proved misplaced, by kind "
        "(free_duplicate, free_and_live, free_and_tree, over_size, out_of_range, missing; vLLM's block "
        "pools also negative_ref, ref_below_owners, ref_above_owners, null_block).",
        (*POOL_LABELS, "kind"),
        "slots",
    ),
    # --- ranks ---
    _g(
        "poolwatch_worker_info",
        "Static facts about a scheduler rank; value is always 1. engine: which engine the rank runs, "
        "release: its release (sglang_version: the same, its former name, kept for existing queries); "
        "release_verified: false when the probe never read that release and reads it as the nearest one.",
        (*RANK_LABELS, "model", "sglang_version", "source", "engine", "release", "release_verified"),
        group="ranks",
    ),
    _g(
        "poolwatch_worker_idle",
        "1 when the rank is fully idle in its engine's sense (no request held or queued).",
        RANK_LABELS,
        group="ranks",
    ),
    _g(
        "poolwatch_scheduler_iteration",
        "The scheduler loop iteration of the latest snapshot.",
        RANK_LABELS,
        group="ranks",
    ),
    _g(
        "poolwatch_snapshot_timestamp_seconds",
        "Unix time at which the latest snapshot was taken.",
        RANK_LABELS,
        "seconds",
        "ranks",
    ),
    _g(
        "poolwatch_snapshot_age_seconds",
        "Seconds since the latest snapshot was taken.",
        RANK_LABELS,
        "seconds",
        "ranks",
    ),
    _g(
        "poolwatch_snapshot_stale",
        "1 when the latest snapshot is older than the staleness limit: its slot figures are then withheld, "
        "its last findings (conservation gap, tripwires) stay until the rank restarts or is forgotten.",
        RANK_LABELS,
        group="ranks",
    ),
    _g(
        "poolwatch_queue_requests",
        "Requests in each scheduler queue (waiting, running, bootstrap, inflight, prealloc, transfer, ...).",
        (*RANK_LABELS, "queue"),
        group="ranks",
    ),
    _g(
        "poolwatch_idle_check_strict",
        "1 when the engine's own idle check crashes the server on an imbalance (SGLang's default), "
        "0 when it only warns (absent: the engine has none).",
        RANK_LABELS,
        group="ranks",
    ),
    _c(
        "poolwatch_incidents_total",
        "Accounting incidents a worker logged (leak_detected, scheduler_exception, ...).",
        (*RANK_LABELS, "kind"),
        "ranks",
    ),
    _g(
        "poolwatch_incident_last_timestamp_seconds",
        "Unix time poolwatch last read an incident of each kind in the worker's log (the sidecar's clock).",
        (*RANK_LABELS, "kind"),
        "seconds",
        "ranks",
    ),
    _g(
        "poolwatch_rank_restart_timestamp_seconds",
        "Unix time poolwatch first saw the rank's latest new boot (absent until it is seen to restart); an "
        "incident read before it is over.",
        RANK_LABELS,
        "seconds",
        "ranks",
    ),
    # --- probe self-health ---
    _c("poolwatch_probe_samples_total", "Snapshots the in-process probe has taken.", RANK_LABELS, "probe"),
    _c(
        "poolwatch_probe_errors_total",
        "Exceptions the in-process probe contained (never raised into the scheduler).",
        RANK_LABELS,
        "probe",
    ),
    _g(
        "poolwatch_probe_sample_duration_seconds",
        "Scheduler-thread time of the probe's last cheap sample.",
        RANK_LABELS,
        "seconds",
        "probe",
    ),
    _g(
        "poolwatch_probe_census_duration_seconds",
        "Scheduler-thread time of the probe's last identity census.",
        RANK_LABELS,
        "seconds",
        "probe",
    ),
    _g("poolwatch_probe_disabled", "1 when the probe's kill switch is engaged.", RANK_LABELS, group="probe"),
    _c(
        "poolwatch_probe_tripwires_dropped_total",
        "Tripwire findings the probe could not keep (its bounded log was full); counted, never silent.",
        RANK_LABELS,
        "probe",
    ),
    _c(
        "poolwatch_probe_repairs_total",
        "Slots the probe's opt-in guard repaired (POOLWATCH_PROBE_GUARD=1), by pool and kind "
        "(quarantine, deduplicate, return, refuse: a wrong free refused before it ran; vLLM counts blocks).",
        (*RANK_LABELS, "pool", "kind"),
        "probe",
    ),
)


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

CATALOG: tuple[MetricSpec, ...] = (
    *_RANKS,
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
