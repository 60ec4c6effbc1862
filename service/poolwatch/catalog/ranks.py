"""The watched ranks' metrics: one series per rank and pool (available, evictable, protected and
held slots, the conservation gap, ...), the ranks' state and the probe's health.  Part of
:data:`poolwatch.catalog.metrics.CATALOG`."""

from __future__ import annotations

from poolwatch.catalog.spec import (
    POOL_LABELS,
    RANK_LABELS,
    MetricSpec,
)
from poolwatch.catalog.spec import counter as _c
from poolwatch.catalog.spec import gauge as _g
from poolwatch.catalog.waiting import HOLDS, PROGRESS

RANKS: tuple[MetricSpec, ...] = (
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
        "a host lock, held the slots in flight in the cache controller's operations. Where the probe's "
        "census disagrees with an engine counter, the census's count (poolwatch_pool_counter_drift_slots).",
        (*POOL_LABELS, "state"),
        "slots",
    ),
    _g(
        "poolwatch_pool_used_slots",
        "Slots neither available nor evictable (size - available - evictable), as the engine counts them "
        "(as the probe's census counts them where it disagrees with an engine counter).",
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
        "pools also negative_ref, ref_below_owners, ref_above_owners, null_block, and freed_in_flight: "
        "freed while an in-flight step lists them, a KV transfer able to refill them first).",
        (*POOL_LABELS, "kind"),
        "slots",
    ),
    *HOLDS,
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
    *PROGRESS,
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
