"""The catalogue's metrics of the watched ranks: their pools, their state, and the probe's health.

One series per rank (and pool); :data:`poolwatch.catalog.CATALOG` lists these first, then the
sidecar's own metrics (targets, alerts, process).
"""

from __future__ import annotations

from poolwatch.catalog_spec import POOL_LABELS, RANK_LABELS, MetricSpec
from poolwatch.catalog_spec import counter as _c
from poolwatch.catalog_spec import gauge as _g

__all__ = ["RANK_METRICS"]

RANK_METRICS: tuple[MetricSpec, ...] = (
    # --- pools (one series per rank and pool) ---
    _g("poolwatch_pool_capacity_slots", "Slots in the pool (SGLang's size).", POOL_LABELS, "slots"),
    _g(
        "poolwatch_pool_slots",
        "Slots of the pool by state: available (free lists), evictable (prefix tree, unlocked), "
        "protected (prefix tree, locked), held (live requests), session_held (streaming sessions).",
        (*POOL_LABELS, "state"),
        "slots",
    ),
    _g(
        "poolwatch_pool_used_slots",
        "Slots neither available nor evictable (size - available - evictable), as SGLang counts them.",
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
        "0 when only coarse figures are (SGLang /metrics or log).",
        POOL_LABELS,
    ),
    _g(
        "poolwatch_pool_tripwire_slots",
        "Slot ids the probe's identity census proved misplaced, by kind "
        "(free_duplicate, free_and_live, free_and_tree, over_size, out_of_range, missing).",
        (*POOL_LABELS, "kind"),
        "slots",
    ),
    # --- ranks ---
    _g(
        "poolwatch_worker_info",
        "Static facts about a scheduler rank; value is always 1.",
        (*RANK_LABELS, "model", "sglang_version", "source"),
        group="ranks",
    ),
    _g(
        "poolwatch_worker_idle",
        "1 when the rank is fully idle in SGLang's sense.",
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
        "1 when SGLang's idle check crashes the server on an imbalance (the default), 0 when it only warns.",
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
        "(quarantine, deduplicate, return).",
        (*RANK_LABELS, "pool", "kind"),
        "probe",
    ),
)
