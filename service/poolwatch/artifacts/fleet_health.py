"""The fleet dashboard's "poolwatch itself" row, and the catalogue metrics no panel charts.

The row answers "can I trust what the other rows show?": how many pools are judged on exact
figures (the in-process probe) against coarse ones (the engines' own /metrics and logs), whether the
sidecars' alerts reach their receivers, whether the sidecars' own tasks crash, how long their
scrapes take, which version runs where, and what the probes' guard repaired or could not record.
:data:`NOT_CHARTED` names, with the reason, every catalogue metric left out of both dashboards; a
test fails on a metric in neither.
"""

from __future__ import annotations

from poolwatch.artifacts.grafana import PanelSpec, Query
from poolwatch.artifacts.panels import series, stat, thresholds

__all__ = ["NOT_CHARTED", "health_panels"]

NOT_CHARTED: dict[str, str] = {
    "poolwatch_pool_used_slots": "The engine's own 'used' figure; the stacked slots and the gap show more "
    "(the double-free rule reads it when it goes negative)",
    "poolwatch_scheduler_iteration": "identifies a snapshot; its progress shows as the snapshot age",
    "poolwatch_snapshot_timestamp_seconds": "charted as the snapshot age",
    "poolwatch_incident_last_timestamp_seconds": "a time, read by the incident rules against the restart",
    "poolwatch_rank_restart_timestamp_seconds": "a time, read by the incident rules",
    "poolwatch_probe_samples_total": "a count with no meaning on its own; the probe's cost is charted",
    "poolwatch_target_scrapes_total": "attempts; failures by reason and target health are charted",
    "poolwatch_sidecar_info": "a fact, not a figure: read by PoolwatchSidecarIdentityCrossed against "
    "Prometheus' own pod label",
    **dict.fromkeys(
        (
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ),
        "a standard family every exporter in the pod exports under the same name (SGLang's own "
        "/metrics too); a generic exporter dashboard reads it per scrape job",
    ),
}


def health_panels(ns: str, sel: str) -> list[PanelSpec]:
    """``ns`` selects namespaces and pods, ``sel`` ranks (namespace, pod, role, worker)."""
    exact = f"poolwatch_pool_figures_exact{{{sel}}}"
    info = "poolwatch_worker_info"
    return [
        PanelSpec("row", "poolwatch itself"),
        stat(
            "Pools on coarse figures",
            f"count({exact} == 0) or vector(0)",
            "none",
            "Pools judged only from the engine's own /metrics or log (no probe): a deficit there is "
            "seen late and a double free not at all.",
            thresholds((None, "green"), (1, "orange")),
        ),
        stat(
            "Ranks on unverified releases",
            f'count({info}{{{sel}, release_verified="false"}}) or vector(0)',
            "none",
            "Ranks whose engine release the probe never read field by field and reads as the nearest "
            "known one (a vLLM newer than its release table, say): findings stand, but check the "
            "release table (docs/engines) and upgrade poolwatch.",
            thresholds((None, "green"), (1, "orange")),
        ),
        series(
            "Exact against coarse figures",
            (Query(f"count({exact} == 1)", "exact (probe)"), Query(f"count({exact} == 0)", "coarse")),
            "none",
            "Pools whose every conservation term is known exactly, against pools seen only coarsely.",
            width=8,
        ),
        *_delivery_panels(ns),
        *_sidecar_panels(ns),
        _probe_panel(sel),
    ]


def _probe_panel(sel: str) -> PanelSpec:
    repairs = (
        f"sum by (worker, dp_rank, tp_rank, pp_rank, pool, kind) (poolwatch_probe_repairs_total{{{sel}}})"
    )
    dropped = f"increase(poolwatch_probe_tripwires_dropped_total{{{sel}}}[$__rate_interval]) > 0"
    return series(
        "Probe guard repairs and dropped tripwires",
        (
            Query(repairs, "repaired {{worker}} dp{{dp_rank}} tp{{tp_rank}} pp{{pp_rank}} {{pool}} {{kind}}"),
            Query(dropped, "dropped {{worker}} dp{{dp_rank}} tp{{tp_rank}} pp{{pp_rank}}"),
        ),
        "suffix: slots",
        "Slots the opt-in guard repaired or refused to free since the rank started "
        "(PoolwatchProbeRepaired; SGLang: quarantine, deduplicate, return, refuse, per pool; vLLM: "
        "refuse only, in free_blocks, pool full, counted in blocks), and tripwire findings the probe "
        "could not keep because its bounded log was full (the census saw more; every engine).",
        width=8,
    )


def _delivery_panels(ns: str) -> list[PanelSpec]:
    sent = (
        f"sum by (pod, receiver, outcome) (increase(poolwatch_notifications_total{{{ns}}}[$__rate_interval]))"
    )
    return [
        series(
            "Notifications by receiver and outcome",
            (Query(sent, "{{pod}} {{receiver}} {{outcome}}"),),
            "suffix: alerts",
            "Alerts each sidecar sent to each receiver, and those that failed or were dropped: failures "
            "mean its direct pages do not arrive (PoolwatchNotificationsFailing).",
            width=8,
        ),
        series(
            "Notifications waiting",
            (Query(f"poolwatch_notification_queue_length{{{ns}}}", "{{pod}} {{receiver}}"),),
            "suffix: alerts",
            "Alerts waiting for delivery to each receiver (grows while it fails).",
            width=8,
        ),
    ]


def _sidecar_panels(ns: str) -> list[PanelSpec]:
    crashes = f"sum by (pod, task) (increase(poolwatch_task_crashes_total{{{ns}}}[$__rate_interval]))"
    errors = f"sum by (pod, what) (increase(poolwatch_internal_errors_total{{{ns}}}[$__rate_interval]))"
    age = f"time() - poolwatch_target_last_success_timestamp_seconds{{{ns}}}"
    skipped = f"poolwatch_discovery_skipped_files{{{ns}}} > 0"
    return [
        series(
            "Sidecar task crashes and internal errors",
            (
                Query(crashes, "crash {{pod}} {{task}}"),
                Query(f"poolwatch_task_crash_looping{{{ns}}} > 0", "crash-looping {{pod}} {{task}}"),
                Query(errors, "error {{pod}} {{what}}"),
                Query(skipped, "skipped discovery files {{pod}} {{reason}}"),
                Query(
                    f"poolwatch_discovery_directory_lost{{{ns}}} > 0",
                    "probe directory lost {{pod}} {{reason}}",
                ),
            ),
            "none",
            "A sidecar task that crashed and was restarted, one that keeps crashing, errors the "
            "sidecar caught, discovery files it skips (a FIFO, too large, not loopback...) and a probe "
            "directory lost (replaced, or gone); all zero when it is healthy.",
            width=8,
        ),
        series(
            "Scrape duration and time since last success",
            (
                Query(f"poolwatch_target_scrape_duration_seconds{{{ns}}}", "took {{pod}} {{target}}"),
                Query(age, "since success {{pod}} {{target}}"),
            ),
            "s",
            "How long each target's last read took, and how long ago one last worked.",
            width=8,
        ),
        series(
            "Sidecar versions",
            (Query(f"count by (version) (poolwatch_build_info{{{ns}}})", "{{version}}"),),
            "suffix: sidecars",
            "Sidecars running each poolwatch version (a rollout shows as two lines).",
            width=8,
        ),
    ]
