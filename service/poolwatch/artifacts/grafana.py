"""Small, pure builders of Grafana dashboard JSON (schema 39, Grafana 10.4 and later).

Plain dicts rather than an SDK: the dashboards are data, their JSON is committed, and the tests
read it back.  Every panel names its unit and reads the ``$datasource`` variable; ids and grid
positions are assigned by :func:`layout` in declaration order, so the output is stable.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from poolwatch.engines import engine_names

__all__ = [
    "DATASOURCE",
    "Json",
    "PanelSpec",
    "Query",
    "alert_annotation",
    "dashboard",
    "datasource_variable",
    "layout",
    "query_variable",
    "render",
    "textbox_variable",
]

Json = dict[str, Any]

DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
SCHEMA_VERSION = 39


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL target of a panel."""

    expr: str
    legend: str = ""
    instant: bool = False  # tables and stats of "now" use instant queries
    table: bool = False  # one row per series (labels as columns) instead of time series


@dataclass(frozen=True, slots=True)
class PanelSpec:
    """A panel before layout: ``kind`` is timeseries, stat, table or row."""

    kind: str
    title: str
    queries: tuple[Query, ...] = ()
    unit: str = ""
    width: int = 12
    height: int = 8
    description: str = ""
    options: Json = field(default_factory=dict)
    custom: Json = field(default_factory=dict)  # fieldConfig.defaults.custom
    defaults: Json = field(default_factory=dict)  # other fieldConfig.defaults (thresholds, mappings)
    overrides: tuple[Json, ...] = ()
    links: tuple[Json, ...] = ()
    extra: Json = field(default_factory=dict)  # top-level keys (repeat, transformations)


def _target(query: Query, ref_id: str) -> Json:
    target: Json = {"datasource": DATASOURCE, "expr": query.expr, "refId": ref_id}
    if query.legend:
        target["legendFormat"] = query.legend
    target.update(instant=query.instant, range=not query.instant)
    if query.table:
        target["format"] = "table"
    return target


def _panel(spec: PanelSpec, panel_id: int, x: int, y: int, width: int) -> Json:
    grid = {"h": 1 if spec.kind == "row" else spec.height, "w": width, "x": x, "y": y}
    if spec.kind == "row":
        return {
            "id": panel_id,
            "type": "row",
            "title": spec.title,
            "collapsed": False,
            "gridPos": grid,
            "panels": [],
        }
    if not spec.unit:
        raise ValueError(f"panel {spec.title!r} has no unit")
    defaults: Json = {"unit": spec.unit, **spec.defaults}
    if spec.custom:
        defaults["custom"] = spec.custom
    panel: Json = {
        "id": panel_id,
        "type": spec.kind,
        "title": spec.title,
        "description": spec.description,
        "datasource": DATASOURCE,
        "gridPos": grid,
        "fieldConfig": {"defaults": defaults, "overrides": list(spec.overrides)},
        "options": spec.options,
        "targets": [_target(q, chr(ord("A") + i)) for i, q in enumerate(spec.queries)],
    }
    if spec.links:
        panel["links"] = list(spec.links)
    panel.update(spec.extra)
    return panel


def layout(specs: Sequence[PanelSpec]) -> list[Json]:
    """Panels with ids (1, 2, ...) and grid positions, flowing left to right in rows of 24."""
    panels: list[Json] = []
    x = y = row_height = 0
    for panel_id, spec in enumerate(specs, start=1):
        if spec.kind == "row":
            y += row_height
            panels.append(_panel(spec, panel_id, 0, y, GRID_WIDTH))
            x, y, row_height = 0, y + 1, 0
            continue
        if x + spec.width > GRID_WIDTH:
            x, y, row_height = 0, y + row_height, 0
        panels.append(_panel(spec, panel_id, x, y, spec.width))
        x, row_height = x + spec.width, max(row_height, spec.height)
    return panels


def datasource_variable() -> Json:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }


def query_variable(name: str, label: str, query: str, *, multi: bool = True) -> Json:
    """A ``label_values(...)`` variable; a multi variable offers All, matching any value (even none)."""
    variable: Json = {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": query,
        "current": {},
        "hide": 0,
        "includeAll": multi,
        "multi": multi,
        "options": [],
        "refresh": 2,  # on time-range change: ranks come and go
        "regex": "",
        "sort": 3,  # numerical ascending, so tp_rank 10 follows 9
    }
    if multi:
        variable["allValue"] = ".*"
    return variable


def textbox_variable(name: str, label: str, value: str) -> Json:
    """A hidden text variable (settable from the URL as ``var-<name>=``)."""
    current = {"selected": False, "text": value, "value": value}
    return {
        "name": name,
        "label": label,
        "type": "textbox",
        "query": value,
        "current": current,
        "options": [current],
        "hide": 2,
    }


def alert_annotation(name_pattern: str, matchers: str = "") -> Json:
    """Firing alerts named like ``name_pattern`` from Prometheus' ``ALERTS`` series, drawn on
    every time panel."""
    extra = f", {matchers}" if matchers else ""
    return {
        "name": "Poolwatch alerts",
        "datasource": DATASOURCE,
        "enable": True,
        "hide": False,
        "iconColor": "red",
        "expr": f'ALERTS{{alertname=~"{name_pattern}", alertstate="firing"{extra}}}',
        "step": "30s",
        "titleFormat": "{{alertname}}",
        "textFormat": "{{severity}} {{worker}} {{pool}}",
        "tagKeys": "alertname,severity,worker,pool",
        "useValueForTime": False,
    }


def _builtin_annotation() -> Json:
    return {
        "name": "Annotations & Alerts",
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "type": "dashboard",
    }


def dashboard(
    *,
    uid: str,
    title: str,
    description: str,
    panels: Sequence[PanelSpec],
    variables: Sequence[Json],
    annotations: Sequence[Json],
    links: Sequence[Json],
) -> Json:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["poolwatch", *engine_names()],
        "editable": True,
        "graphTooltip": 1,  # shared crosshair
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "browser",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "annotations": {"list": [_builtin_annotation(), *annotations]},
        "templating": {"list": list(variables)},
        "links": list(links),
        "panels": layout(panels),
    }


def render(doc: Json) -> str:
    """The committed form: sorted keys, two-space indent, trailing newline."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
