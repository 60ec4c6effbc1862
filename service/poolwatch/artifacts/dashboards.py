"""The Grafana dashboards, generated from code and committed under ``dashboards/``.

Two dashboards that link to each other: a fleet overview (every worker and pool, firing alerts,
targets, prefill against decode) and a worker drill-down (:mod:`.worker_dashboard`).  Queries
name only metrics of :data:`poolwatch.catalog.metrics.CATALOG` and Prometheus' own ``ALERTS`` and ``up``
(tests check), and firing alerts are drawn as annotations on every time panel.
"""

from __future__ import annotations

from pathlib import Path

from poolwatch.artifacts.engine_filter import ENGINE
from poolwatch.artifacts.family_panels import family_panels
from poolwatch.artifacts.fleet_health import health_panels
from poolwatch.artifacts.grafana import (
    Json,
    PanelSpec,
    Query,
    alert_annotation,
    dashboard,
    query_variable,
    render,
)
from poolwatch.artifacts.panels import (
    POOL_IDENTITY,
    SLOTS,
    SLOTS_PER_SECOND,
    common_variables,
    configure,
    dashboard_links,
    drilldown_link,
    firing,
    imbalanced,
    runbook_link,
    series,
    stat,
    table,
    thresholds,
)
from poolwatch.artifacts.worker_dashboard import worker_dashboard
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.schema import ALERT_NAME_PATTERN

__all__ = ["artifacts", "fleet_dashboard"]

_NS = 'namespace=~"$namespace", pod=~"$pod"'
_SEL = f'{_NS}, role=~"$role", worker=~"$worker"'
_POOL_SEL = f'{_SEL}, pool=~"$pool"'
_GAP = f"poolwatch_pool_conservation_gap_slots{{{_POOL_SEL}}}"
_RANK = "{{worker}} dp{{dp_rank}} tp{{tp_rank}} pp{{pp_rank}}"
_BY_ROLE = "{{role}} {{pool}}"


def _now_panels() -> list[PanelSpec]:
    bad, good = thresholds((None, "green"), (1, "red")), thresholds((None, "red"), (0.99, "green"))
    return [
        PanelSpec("row", "Fleet now"),
        stat(
            "Imbalanced pools",
            f"count({imbalanced(_GAP, _POOL_SEL)}) or vector(0)",
            "none",
            "Pools whose conservation gap is not zero, or that a double-free or leak alert fires for "
            "(either path): a crashed worker's pool stays counted until its alert resolves.",
            bad,
        ),
        stat(
            "Largest surplus (double free)",
            f"-min({_GAP} < 0) or vector(0)",
            SLOTS,
            "Slots counted twice in the worst pool (gap < 0).",
            bad,
        ),
        stat(
            "Largest deficit (leak)",
            f"max({_GAP} > 0) or vector(0)",
            SLOTS,
            "Slots lost in the worst pool (gap > 0).",
            thresholds((None, "green"), (1, "orange")),
        ),
        stat(
            "Firing alerts",
            f"count({firing(_SEL)}) or vector(0)",
            "none",
            "poolwatch alerts firing now, from the sidecars and from Prometheus' rules, each once.",
            bad,
        ),
        stat(
            "Targets up",
            f"sum(poolwatch_target_up{{{_NS}}}) / count(poolwatch_target_up{{{_NS}}})",
            "percentunit",
            "Share of the sidecars' scrape targets (probes, the engines' own /metrics, logs) that answer.",
            good,
        ),
        stat(
            "Stale ranks",
            f"sum(poolwatch_snapshot_stale{{{_SEL}}}) or vector(0)",
            "none",
            "Ranks whose latest snapshot is too old; their pool figures are withheld.",
            thresholds((None, "green"), (1, "orange")),
        ),
    ]


def _conservation_panels(config: MixinConfig) -> list[PanelSpec]:
    return [
        PanelSpec("row", "Conservation"),
        series(
            "Conservation gap by worker and pool",
            (Query(_GAP, f"{_RANK} {{{{pool}}}}"),),
            SLOTS,
            "size - available - evictable - protected - held - session_held. > 0: slots lost (leak); "
            "< 0: slots counted twice (double free). Absent while it cannot be known (vLLM without "
            "its probe: always, its /metrics and log give no gap).",
            width=24,
        ),
        table(
            "Imbalanced pools now",
            f"max by ({POOL_IDENTITY}, role) ({_GAP} != 0)",
            SLOTS,
            "Every pool with a non-zero gap, by rank; click a worker to open that rank and pool.",
            "worker",
            drilldown_link(config),
        ),
        table(
            "Firing alerts",
            firing(_SEL),
            "none",
            "poolwatch alerts firing, from the sidecars and from Prometheus' rules, each once; click an "
            "alert name for its runbook.",
            "alertname",
            runbook_link(),
            hide=("Value",),
        ),
    ]


def _role_panels() -> list[PanelSpec]:
    free = (
        f'sum by (role, pool) (poolwatch_pool_slots{{{_POOL_SEL}, state="available"}}) '
        f"/ sum by (role, pool) (poolwatch_pool_capacity_slots{{{_POOL_SEL}}})"
    )
    queues = f"sum by (role, queue) (poolwatch_queue_requests{{{_SEL}}})"
    rate = f"sum by (role, pool) (poolwatch_pool_leak_rate_slots_per_second{{{_POOL_SEL}}})"
    return [
        PanelSpec("row", "Prefill vs decode"),
        series(
            "Free share by role and pool",
            (Query(free, _BY_ROLE),),
            "percentunit",
            "Available slots over capacity, summed over the ranks of each role (vLLM: free blocks "
            "without a cached prefix; its probe reports every rank as unified).",
        ),
        series(
            "Slots lost and counted twice by role",
            (
                Query(f"sum by (role, pool) ({_GAP} > 0)", "lost {{role}} {{pool}}"),
                Query(f"-sum by (role, pool) ({_GAP} < 0)", "counted twice {{role}} {{pool}}"),
            ),
            SLOTS,
            "Deficits (leaks) and surpluses (double frees) of each role's pools, summed apart so one "
            "rank's surplus never hides another's deficit: disaggregation bugs usually hit one side.",
        ),
        series(
            "Queued requests by role",
            (Query(queues, "{{role}} {{queue}}"),),
            "suffix: requests",
            "Requests in each scheduler queue (SGLang: waiting, bootstrap, inflight, transfer, ...; vLLM: "
            "requests, running, waiting, kv_holding_waiting, deferred_frees, ...).",
        ),
        series(
            "Leak rate by role",
            (Query(rate, _BY_ROLE),),
            SLOTS_PER_SECOND,
            "Fitted trend of the gap; > 0 means slots are being lost.",
        ),
    ]


def _target_panels() -> list[PanelSpec]:
    errors = (
        f"sum by (pod, target, reason) (rate(poolwatch_target_scrape_errors_total{{{_NS}}}"
        "[$__rate_interval]))"
    )
    up = (
        Query(f"poolwatch_target_up{{{_NS}}}", "{{pod}} {{target}}"),
        Query(f'up{{{_NS}, container="poolwatch"}}', "sidecar {{pod}}"),
    )
    return [
        PanelSpec("row", "Targets"),
        series(
            "Targets up",
            up,
            "bool_yes_no",
            "1 when the last scrape worked: each sidecar's targets, and Prometheus' scrape of each sidecar.",
        ),
        series(
            "Scrape errors by reason",
            (Query(errors, "{{pod}} {{target}} {{reason}}"),),
            "cps",
            "Failed scrapes per second by bounded reason (timeout, connect, schema, ...).",
        ),
        series(
            "Snapshot age",
            (Query(f"poolwatch_snapshot_age_seconds{{{_SEL}}}", _RANK),),
            "s",
            "Seconds since each rank's latest snapshot was taken.",
        ),
    ]


def fleet_dashboard(config: MixinConfig | None = None) -> Json:
    config = config or MixinConfig()
    variables = [
        *common_variables(config),
        query_variable("role", "Role", f"label_values(poolwatch_worker_info{{{_NS}, {ENGINE}}}, role)"),
        query_variable(
            "worker",
            "Worker",
            f'label_values(poolwatch_worker_info{{{_NS}, {ENGINE}, role=~"$role"}}, worker)',
        ),
        query_variable("pool", "Pool", f"label_values(poolwatch_pool_capacity_slots{{{_NS}}}, pool)"),
    ]
    panels = [*_now_panels(), *_conservation_panels(config), *family_panels(_SEL)]
    panels += [*_role_panels(), *_target_panels()]
    panels += health_panels(_NS, _SEL)
    doc = dashboard(
        uid=config.fleet_dashboard_uid,
        title="poolwatch / fleet",
        description="Conservation of the engines' memory pools (SGLang's pools, vLLM's block pools) "
        "across every worker poolwatch watches; $engine picks the engines.",
        panels=panels,
        variables=variables,
        annotations=[alert_annotation(ALERT_NAME_PATTERN)],
        links=dashboard_links(),
    )
    return configure(doc, config)


def artifacts(root: Path, config: MixinConfig) -> dict[str, str]:
    """The committed dashboards (packed into a ConfigMap by ``dashboards/kustomization.yaml``)."""
    del root  # built from code alone
    return {
        f"dashboards/{config.fleet_dashboard_uid}.json": render(fleet_dashboard(config)),
        f"dashboards/{config.worker_dashboard_uid}.json": render(worker_dashboard(config)),
    }
