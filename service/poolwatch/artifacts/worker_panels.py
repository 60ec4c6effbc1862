"""The worker dashboard's label selectors, and its panels over every rank of the worker: gap, leak
rate, exhaustion forecast, snapshot age, queues and tripwires per rank, the detector families'
charts, then incidents and probe health.  :mod:`poolwatch.artifacts.worker_dashboard` puts them
below the selected rank's panels."""

from __future__ import annotations

from poolwatch.artifacts.grafana import PanelSpec, Query
from poolwatch.artifacts.panels import SLOTS, SLOTS_PER_SECOND, firing, runbook_link, series, table
from poolwatch.detect.charts import Chart, Line
from poolwatch.detect.rules import FAMILIES

__all__ = ["ALERTS", "POOLS", "RANK", "RANKS", "W", "health_panels", "rank_panels", "waiting_panels"]

W = 'namespace=~"$namespace", worker="$worker"'
ALERTS = 'namespace=~"$namespace", worker="$worker"'  # the worker's alerts, pod- and rank-wide
RANK = f'{W}, dp_rank="$dp_rank", tp_rank="$tp_rank", pp_rank="$pp_rank"'
RANKS = "dp{{dp_rank}} tp{{tp_rank}} pp{{pp_rank}}"
POOLS = f'{W}, pool=~"$pool"'


def rank_panels() -> list[PanelSpec]:
    """Every rank of the worker, one series each."""
    return [
        PanelSpec("row", "Every rank of $worker"),
        series(
            "Conservation gap per rank",
            (Query(f"poolwatch_pool_conservation_gap_slots{{{POOLS}}}", f"{RANKS} {{{{pool}}}}"),),
            SLOTS,
            "> 0: slots lost (leak); < 0: slots counted twice (double free).",
        ),
        series(
            "Leak rate per rank",
            (Query(f"poolwatch_pool_leak_rate_slots_per_second{{{POOLS}}}", f"{RANKS} {{{{pool}}}}"),),
            SLOTS_PER_SECOND,
            "Fitted trend of the gap over the detector's window.",
        ),
        series(
            "Time to exhaustion",
            (Query(f"poolwatch_pool_exhaustion_eta_seconds{{{POOLS}}}", f"{RANKS} {{{{pool}}}}"),),
            "s",
            "When the pool runs out at the fitted leak rate (absent when not leaking).",
        ),
        series(
            "Snapshot age per rank",
            (Query(f"poolwatch_snapshot_age_seconds{{{W}}}", RANKS),),
            "s",
            "Seconds since each rank's latest snapshot; stale ranks' pool figures are withheld.",
        ),
        series(
            "Queue depths per rank",
            (Query(f"poolwatch_queue_requests{{{W}}}", f"{RANKS} {{{{queue}}}}"),),
            "suffix: requests",
            "Requests in each scheduler queue; SGLang checks a pool only when all are empty. vLLM's: "
            "requests (all it holds), running, waiting, kv_holding_waiting, async_kv_waiting, "
            "skipped_waiting (those its release has) and deferred_frees (block lists waiting for a "
            "step to end); without the probe, running and waiting only.",
        ),
        series(
            "Tripwires per rank",
            (Query(f"poolwatch_pool_tripwire_slots{{{W}}}", f"{RANKS} {{{{pool}}}} {{{{kind}}}}"),),
            SLOTS,
            "Slot ids proven misplaced, by kind (free_duplicate, free_and_live, ...; vLLM's also "
            "negative_ref, ref_below_owners, ref_above_owners, missing, null_block, freed_in_flight: "
            "docs/engines).",
        ),
    ]


def waiting_panels() -> list[PanelSpec]:
    """What the gap cannot see on every rank of the worker: each detector family's charts
    (:attr:`poolwatch.detect.family.Family.charts`: holds, counters, admission), in family order."""
    charts = [c for family in FAMILIES for c in family.charts]
    return [PanelSpec("row", "Holds, counters and admission on $worker"), *(_chart(c) for c in charts)]


_UNITS = {"slots": SLOTS, "seconds": "s"}


def _query(line: Line) -> Query:
    expr = f"{line.metric}{{{POOLS if line.per_pool else W}}}"
    if line.over:
        expr = f"{line.over}({expr}[$__rate_interval])"
    return Query(expr, line.legend.replace("$ranks", RANKS))


def _chart(chart: Chart) -> PanelSpec:
    custom = {"drawStyle": "bars", "fillOpacity": 80} if chart.bars else None
    unit = _UNITS.get(chart.unit, chart.unit)
    return series(
        chart.title, tuple(_query(line) for line in chart.lines), unit, chart.description, custom=custom
    )


def health_panels() -> list[PanelSpec]:
    """Incidents, the probe's cost and errors, and the worker's firing alerts."""
    incidents = f"sum by (kind) (increase(poolwatch_incidents_total{{{W}}}[$__rate_interval]))"
    errors = f"increase(poolwatch_probe_errors_total{{{W}}}[$__rate_interval])"
    costs = (
        Query(f"poolwatch_probe_sample_duration_seconds{{{W}}}", f"sample {RANKS}"),
        Query(f"poolwatch_probe_census_duration_seconds{{{W}}}", f"census {RANKS}"),
    )
    return [
        PanelSpec("row", "Incidents and probe health"),
        series(
            "Incidents logged",
            (Query(incidents, "{{kind}}"),),
            "suffix: incidents",
            "Accounting incidents the worker logged (leak detected, scheduler exception, ...). vLLM logs "
            "no leak check of its own: its incidents are EngineCore's fatal errors, read from its log.",
            custom={"drawStyle": "bars", "fillOpacity": 80},
        ),
        series(
            "Probe cost in the scheduler thread",
            costs,
            "s",
            "Scheduler-thread time of the probe's last cheap sample and last identity census (vLLM: "
            "EngineCore's thread, the census being the walk of the block pool).",
        ),
        series(
            "Probe errors contained",
            (Query(errors, RANKS), Query(f"poolwatch_probe_disabled{{{W}}} > 0", f"kill switch {RANKS}")),
            "suffix: errors",
            "Exceptions the probe caught instead of raising into the scheduler, and ranks whose probe's "
            "kill switch is engaged (watched only coarsely).",
        ),
        table(
            "Firing alerts for this worker",
            firing(ALERTS),
            "none",
            "From the sidecar and from Prometheus' rules, each once; click an alert name for its runbook.",
            "alertname",
            runbook_link(),
            hide=("Value",),
        ),
    ]
