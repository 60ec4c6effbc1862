"""poolwatch's dashboard building blocks: units, panel shapes, variables and links shared by both
dashboards (the generic JSON lives in :mod:`poolwatch.artifacts.grafana`)."""

from __future__ import annotations

from typing import Any

from poolwatch.artifacts.engine_filter import ENGINE, engine_filtered, engine_variable, unit_note
from poolwatch.artifacts.grafana import (
    Json,
    PanelSpec,
    Query,
    datasource_variable,
    query_variable,
    textbox_variable,
)
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.families import balance, host_pool
from poolwatch.detect.promql import with_selector
from poolwatch.detect.schema import ALERT_NAME_PATTERN, dashboard_path

__all__ = [
    "ALERT_IDENTITY",
    "CONSERVATION_ALERTS",
    "DRILLDOWN_LABELS",
    "FIRING",
    "POOL_IDENTITY",
    "SLOTS",
    "SLOTS_PER_SECOND",
    "common_variables",
    "configure",
    "dashboard_links",
    "drilldown_link",
    "firing",
    "imbalanced",
    "runbook_link",
    "series",
    "stat",
    "table",
    "thresholds",
]

SLOTS = "suffix: slots"  # Grafana's custom-unit syntax; slots have no built-in unit
# the labels that make one alert (and one pool) on both paths: the rank's and where it runs
POOL_IDENTITY = "namespace, pod, worker, dp_rank, tp_rank, pp_rank, pool"
ALERT_IDENTITY = f"alertname, severity, role, {POOL_IDENTITY}, source, target, receiver"
# the alerts of the families that judge a pool's balance: a pool they fire for is imbalanced
CONSERVATION_ALERTS = "|".join((*balance.FAMILY.names, *host_pool.FAMILY.names))
DRILLDOWN_LABELS = ("namespace", "worker", "dp_rank", "tp_rank", "pp_rank", "pool")
SLOTS_PER_SECOND = "suffix: slots/s"
FIRING = f'alertname=~"{ALERT_NAME_PATTERN}", alertstate="firing"'


def runbook_link() -> Json:
    """A data link from a table row holding ``alertname`` to that alert's runbook."""
    return {
        "title": "Runbook for ${__data.fields.alertname}",
        "url": "${runbooks}/${__data.fields.alertname}.md",
        "targetBlank": True,
    }


def drilldown_link(config: MixinConfig) -> Json:
    """A data link from a table row of one pool to the worker drill-down on that very rank and
    pool (every rank label passed, so a TP-1 imbalance opens TP 1)."""
    fields = "&".join(f"var-{label}=${{__data.fields.{label}}}" for label in DRILLDOWN_LABELS)
    return {
        "title": "Open ${__data.fields.worker} dp${__data.fields.dp_rank} tp${__data.fields.tp_rank} "
        "pp${__data.fields.pp_rank} in the worker drill-down",
        "url": f"{dashboard_path(config.worker_dashboard_uid)}?{fields}&${{datasource:queryparam}}"
        "&${__url_time_range}",
    }


def firing(matchers: str = "", names: str = ALERT_NAME_PATTERN) -> str:
    """Firing poolwatch alerts from both paths, each alert once: Prometheus' ``ALERTS`` and the
    sidecars' ``poolwatch_alert_active`` (an alert carries the same labels on both paths)."""
    extra = f", {matchers}" if matchers else ""
    rules = f'ALERTS{{alertname=~"{names}", alertstate="firing"{extra}}}'
    sidecars = f'poolwatch_alert_active{{alertname=~"{names}", state="firing"{extra}}}'
    return f"count by ({ALERT_IDENTITY}) ({rules} or {sidecars})"


def imbalanced(gap: str, matchers: str) -> str:
    """Pools with a non-zero gap now or a firing conservation alert (either path), each once: a
    dead worker's double free stays counted while its alert fires."""
    alerts = firing(matchers, CONSERVATION_ALERTS)
    return f"count by ({POOL_IDENTITY}) (({gap} != 0) or {alerts})"


def dashboard_links() -> list[Json]:
    return [
        {
            "title": "poolwatch",
            "type": "dashboards",
            "tags": ["poolwatch"],
            "asDropdown": True,
            "includeVars": True,
            "keepTime": True,
        },
        {"title": "Runbooks", "type": "link", "url": "${runbooks}", "icon": "doc", "targetBlank": True},
    ]


def common_variables(config: MixinConfig) -> list[Json]:
    """Data source, namespace, engine, pod and the runbook base URL (the config's
    ``runbook_base_url``); a cluster variable comes with the config's ``cluster_label``
    (:func:`configure`)."""
    return [
        datasource_variable(),
        query_variable("namespace", "Namespace", "label_values(poolwatch_worker_info, namespace)"),
        engine_variable(),
        query_variable(
            "pod", "Pod", f'label_values(poolwatch_worker_info{{namespace=~"$namespace", {ENGINE}}}, pod)'
        ),
        textbox_variable("runbooks", "Runbooks", config.runbook_base_url),
    ]


_QUERY_KEYS = ("expr", "query", "definition")


def _select(node: Any, matchers: str) -> Any:
    if isinstance(node, dict):
        return {
            k: with_selector(v, matchers) if k in _QUERY_KEYS and isinstance(v, str) else _select(v, matchers)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_select(v, matchers) for v in node]
    return node


def configure(doc: Json, config: MixinConfig) -> Json:
    """``doc`` with every panel query filtered by ``$engine`` (:mod:`poolwatch.artifacts.engine_filter`),
    the config's selector on every ``poolwatch_*`` query and, when the config names a cluster
    label, a variable for it that every such query matches."""
    doc = engine_filtered(doc, config.cluster_label)
    matchers = ", ".join(m for m in (config.selector, _cluster_matcher(config)) if m)
    out: Json = _select(doc, matchers) if matchers else doc
    if config.cluster_label:
        label = config.cluster_label
        variable = query_variable(label, "Cluster", f"label_values(poolwatch_worker_info, {label})")
        variables = out["templating"]["list"]
        out["templating"]["list"] = [variables[0], variable, *variables[1:]]  # after the data source
    return out


def _cluster_matcher(config: MixinConfig) -> str:
    return f'{config.cluster_label}=~"${config.cluster_label}"' if config.cluster_label else ""


def _described(description: str, unit: str) -> str:
    """``description``, and for a panel counted in slots what a slot is in each engine counting
    other units (:func:`~poolwatch.artifacts.engine_filter.unit_note`)."""
    return f"{description} {unit_note()}" if unit in (SLOTS, SLOTS_PER_SECOND) else description


def thresholds(*steps: tuple[float | None, str]) -> Json:
    """``fieldConfig.defaults`` colouring values from each step's value upwards."""
    return {"thresholds": {"mode": "absolute", "steps": [{"value": v, "color": c} for v, c in steps]}}


def stat(
    title: str,
    expr: str,
    unit: str,
    description: str,
    defaults: Json | None = None,
    legend: str = "",
    no_value: str = "",
) -> PanelSpec:
    """A 4x4 stat of one instant query, its background coloured by ``defaults``' thresholds;
    ``no_value``: the text shown instead of "No data" (a figure one engine never has)."""
    options = {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "background",
        "graphMode": "none",
        "textMode": "auto",
    }
    query = (Query(expr, legend, instant=True),)
    extra = {"noValue": no_value} if no_value else {}
    return PanelSpec(
        "stat",
        title,
        query,
        unit,
        width=4,
        height=4,
        description=_described(description, unit),
        options=options,
        defaults={**(defaults or {}), **extra},
    )


def series(
    title: str,
    queries: tuple[Query, ...],
    unit: str,
    description: str,
    width: int = 12,
    custom: Json | None = None,
) -> PanelSpec:
    """A time series with a table legend (last and max), lines unless ``custom`` says otherwise."""
    options = {
        "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    style = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "spanNulls": False, **(custom or {})}
    return PanelSpec(
        "timeseries",
        title,
        queries,
        unit,
        width=width,
        description=_described(description, unit),
        options=options,
        custom=style,
    )


def table(
    title: str,
    expr: str,
    unit: str,
    description: str,
    link_field: str,
    link: Json,
    hide: tuple[str, ...] = (),
) -> PanelSpec:
    """An instant table of ``expr``'s series (``hide``: columns left out); the ``link_field``
    column carries ``link``."""
    hidden = dict.fromkeys(("Time", "__name__", *hide), True)
    override = {
        "matcher": {"id": "byName", "options": link_field},
        "properties": [{"id": "links", "value": [link]}],
    }
    return PanelSpec(
        "table",
        title,
        (Query(expr, instant=True, table=True),),
        unit,
        description=_described(description, unit),
        overrides=(override,),
        extra={"transformations": [{"id": "organize", "options": {"excludeByName": hidden}}]},
    )
