"""The worker drill-down dashboard: one rank's pools stacked by state against capacity (one panel
per pool, repeated), and every rank of the worker's gap, leak rate, exhaustion forecast, snapshot
age, queues, incidents and probe health (those in :mod:`poolwatch.artifacts.worker_panels`)."""

from __future__ import annotations

from dataclasses import replace

from poolwatch.artifacts.engine_filter import ENGINE, idle_check_only
from poolwatch.artifacts.family_panels import family_panels
from poolwatch.artifacts.grafana import Json, PanelSpec, Query, alert_annotation, dashboard, query_variable
from poolwatch.artifacts.panels import (
    SLOTS,
    common_variables,
    configure,
    dashboard_links,
    firing,
    series,
    stat,
    thresholds,
)
from poolwatch.artifacts.worker_panels import ALERTS as _ALERTS
from poolwatch.artifacts.worker_panels import RANK as _RANK
from poolwatch.artifacts.worker_panels import W as _W
from poolwatch.artifacts.worker_panels import health_panels, rank_panels, waiting_panels
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.schema import ALERT_NAME_PATTERN

__all__ = ["STATE_COLORS", "worker_dashboard"]

STATE_COLORS = {
    "available": "green",
    "evictable": "blue",
    "protected": "purple",
    "held": "orange",
    "session_held": "yellow",
}


def _mapping(values: dict[str, tuple[str, str]]) -> Json:
    """``fieldConfig.defaults`` mapping each value to a text and a colour."""
    options = {
        v: {"text": text, "color": color, "index": i} for i, (v, (text, color)) in enumerate(values.items())
    }
    return {
        "mappings": [{"type": "value", "options": options}],
        "color": {"mode": "fixed", "fixedColor": "text"},
    }


def _color(name: str, color: str, *extra: Json) -> Json:
    props = [{"id": "color", "value": {"mode": "fixed", "fixedColor": color}}, *extra]
    return {"matcher": {"id": "byName", "options": name}, "properties": props}


def _stacked_pool() -> PanelSpec:
    """One pool of the selected rank: slots by state stacked, capacity as a dashed line on top."""
    capacity = _color(
        "capacity",
        "red",
        {"id": "custom.stacking", "value": {"mode": "none", "group": "A"}},
        {"id": "custom.fillOpacity", "value": 0},
        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
        {"id": "custom.lineWidth", "value": 2},
    )
    queries = (
        Query(f'sum by (state) (poolwatch_pool_slots{{{_RANK}, pool="$pool"}})', "{{state}}"),
        Query(f'max(poolwatch_pool_capacity_slots{{{_RANK}, pool="$pool"}})', "capacity"),
    )
    panel = series(
        "$pool pool: slots by state against capacity",
        queries,
        SLOTS,
        "Stacked: available, evictable, protected, held and session-held slots of the selected rank. "
        "The dashed line is the pool's size: a stack above it is a surplus (double free), "
        "a stack below it a deficit (leak). vLLM: available and evictable are its free queue "
        "(evictable: free blocks that keep a cached prefix), protected is always 0, session-held are "
        "finished requests' blocks kept for a KV-connector transfer; without the probe only the "
        "capacity line and no stack.",
        custom={"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 60, "lineWidth": 1},
    )
    overrides = (*(_color(s, c) for s, c in STATE_COLORS.items()), capacity)
    extra = {"repeat": "pool", "repeatDirection": "h", "maxPerRow": 2}
    return replace(panel, overrides=overrides, extra=extra, height=9)


_IDENTITY = "namespace, pod, worker, dp_rank, tp_rank, pp_rank"


def _idle_check() -> PanelSpec:
    """SGLang's idle check, or -1 for a rank whose probe reports none (vLLM's)."""
    strict = f"poolwatch_idle_check_strict{{{_RANK}}}"
    none = f'-1 * group by ({_IDENTITY}) (poolwatch_worker_info{{{_RANK}, source="probe"}})'
    mapping = _mapping(
        {
            "1": ("crashes on imbalance", "red"),
            "0": ("warns only", "green"),
            "-1": ("none of its own", "blue"),
        }
    )
    return stat(
        "Engine idle check",
        f"{strict} or on ({_IDENTITY}) {none}",
        "none",
        "Whether the engine's own idle check kills the server on an imbalance (SGLang's may, or only "
        "warns). " + idle_check_only("poolwatch_idle_check_strict") + " Its probe reports it has none "
        "(so poolwatch's page is the only warning); without a probe the setting is unknown.",
        mapping,
        no_value="unknown (no probe)",
    )


def _release() -> PanelSpec:
    """The engine and release the rank runs; orange when the probe reads it unverified."""
    unverified = {  # the legend below names it
        "matcher": {"id": "byRegexp", "options": ".*verified: false.*"},
        "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "orange"}}],
    }
    panel = stat(
        "Release",
        f"count by (engine, release, release_verified) (poolwatch_worker_info{{{_RANK}}})",
        "none",
        "The engine and release the rank runs. Orange: a release the probe never read field by field "
        "(release_verified false), read as the nearest known one in unverified mode (a newer vLLM, "
        "say): its findings stand, but check the release table (docs/engines).",
        {"color": {"mode": "fixed", "fixedColor": "green"}},
        legend="{{engine}} {{release}} (verified: {{release_verified}})",
    )
    return replace(panel, overrides=(unverified,), options={**panel.options, "textMode": "name"})


def _now_panels() -> list[PanelSpec]:
    gap = f"poolwatch_pool_conservation_gap_slots{{{_RANK}}}"
    phase = _mapping({"1": ("idle", "green"), "0": ("busy", "blue")})
    return [
        PanelSpec("row", "Selected rank now"),
        stat(
            "Conservation gap",
            gap,
            SLOTS,
            "Signed gap of each pool: < 0 double free, > 0 leak.",
            thresholds((None, "red"), (0, "green"), (1, "orange")),
            legend="{{pool}}",
        ),
        stat(
            "Snapshot age",
            f"poolwatch_snapshot_age_seconds{{{_RANK}}}",
            "s",
            "Seconds since the latest snapshot.",
            thresholds((None, "green"), (10, "orange")),
        ),
        stat(
            "Phase",
            f"poolwatch_worker_idle{{{_RANK}}}",
            "none",
            "Idle in the engine's fully-idle sense (no request queued, running or transferring), or busy. "
            "vLLM: idle when its scheduler holds no request and no deferred free; without the probe "
            "only busy is known.",
            phase,
            no_value="unknown",
        ),
        _idle_check(),
        _release(),
        stat(
            "Firing alerts",
            f"count({firing(_ALERTS)}) or vector(0)",
            "none",
            "poolwatch alerts firing for this worker, from its sidecar and Prometheus' rules, each once.",
            thresholds((None, "green"), (1, "red")),
        ),
        stat(
            "Figures",
            f"poolwatch_pool_figures_exact{{{_RANK}}}",
            "none",
            "Exact: the in-process probe reads every term of each pool's equation. Coarse: only the "
            "engine's own /metrics or log (a deficit is seen late, a double free not at all).",
            _mapping({"1": ("exact", "green"), "0": ("coarse", "orange")}),
            legend="{{pool}}",
        ),
        stat(
            "Tripwire slots",
            f"sum(poolwatch_pool_tripwire_slots{{{_RANK}}}) or vector(0)",
            SLOTS,
            "Slot ids the probe's census proved misplaced.",
            thresholds((None, "green"), (1, "red")),
        ),
        PanelSpec("row", "Pools of dp$dp_rank tp$tp_rank pp$pp_rank"),
        _stacked_pool(),
    ]


def worker_dashboard(config: MixinConfig | None = None) -> Json:
    config = config or MixinConfig()
    ranks = f"poolwatch_worker_info{{{_W}}}"
    variables = [
        *common_variables(config),
        query_variable(
            "worker",
            "Worker",
            f'label_values(poolwatch_worker_info{{namespace=~"$namespace", {ENGINE}}}, worker)',
            multi=False,
        ),
        query_variable("dp_rank", "DP rank", f"label_values({ranks}, dp_rank)", multi=False),
        query_variable("tp_rank", "TP rank", f"label_values({ranks}, tp_rank)", multi=False),
        query_variable("pp_rank", "PP rank", f"label_values({ranks}, pp_rank)", multi=False),
        query_variable("pool", "Pool", f"label_values(poolwatch_pool_capacity_slots{{{_W}}}, pool)"),
    ]
    doc = dashboard(
        uid=config.worker_dashboard_uid,
        title="poolwatch / worker",
        description="One worker's memory pools (SGLang's pools or vLLM's block pools), rank by rank: "
        "where every slot is and whether they add up.",
        panels=[
            *_now_panels(),
            *rank_panels(),
            *waiting_panels(),
            *health_panels(),
            *family_panels(_ALERTS, sidecar_wide=False),
        ],
        variables=variables,
        annotations=[alert_annotation(ALERT_NAME_PATTERN, 'worker="$worker"')],
        links=dashboard_links(),
    )
    return configure(doc, config)
