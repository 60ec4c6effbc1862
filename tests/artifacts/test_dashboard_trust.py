"""Dashboards an on-call engineer can trust: every catalogue metric is charted or said not to be,
drill-downs open the very rank, signed gaps are never summed across ranks, firing alerts come from
both paths, and a namespace, pod (and, when configured, cluster) can be picked."""

from __future__ import annotations

import re
from typing import Any

import pytest
from tests.artifacts.dashboard_docs import DASHBOARDS, expressions

from poolwatch.artifacts.dashboards import fleet_dashboard
from poolwatch.artifacts.fleet_health import NOT_CHARTED
from poolwatch.artifacts.panels import DRILLDOWN_LABELS, drilldown_link
from poolwatch.artifacts.worker_dashboard import worker_dashboard
from poolwatch.catalog.metrics import CATALOG
from poolwatch.detect.config import MixinConfig

GAP = "poolwatch_pool_conservation_gap_slots"


def panel_exprs(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]


def charted() -> set[str]:
    text = " ".join(expr for doc in DASHBOARDS.values() for _, expr in expressions(doc))
    return {s.name for s in CATALOG if re.search(rf"\b{s.name}\b", text)}


def test_every_catalogue_metric_is_charted_or_listed_as_not_charted_with_a_reason() -> None:
    names = {s.name for s in CATALOG}
    assert set(NOT_CHARTED) <= names, "NOT_CHARTED names a metric that is not in the catalogue"
    assert not set(NOT_CHARTED) & charted(), "a metric is both charted and listed as not charted"
    assert names - charted() - set(NOT_CHARTED) == set(), "charted nowhere and not listed"
    assert all(len(reason) > 20 for reason in NOT_CHARTED.values())


def test_the_drilldown_opens_the_rows_rank_and_pool_with_every_label_the_worker_dashboard_takes() -> None:
    url = drilldown_link(MixinConfig())["url"]
    passed = dict(re.findall(r"var-(\w+)=\$\{__data\.fields\.(\w+)\}", url))
    assert passed == {label: label for label in DRILLDOWN_LABELS}
    worker_vars = {v["name"] for v in worker_dashboard()["templating"]["list"] if v["type"] == "query"}
    assert {"namespace", "worker", "dp_rank", "tp_rank", "pp_rank", "pool"} <= set(passed) <= worker_vars
    table = next(p for p in fleet_dashboard()["panels"] if p["title"] == "Imbalanced pools now")
    (query,) = table["targets"]
    assert all(label in query["expr"] for label in DRILLDOWN_LABELS), "the table must keep every rank label"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_no_panel_sums_signed_gaps_across_ranks(name: str) -> None:
    for title, expr in panel_exprs(DASHBOARDS[name]):
        for aggregation in re.finditer(r"\b(sum|avg)\b[^(]*\((.*)", expr):
            if GAP in aggregation[2]:
                # the gap, filtered by engine per series (engines.py), compared with 0 before any sum
                engine = r"(\s*unless on \([^)]*\) poolwatch_worker_info\{[^}]*\}\))?"
                signed = re.search(rf"{GAP}\{{[^}}]*\}}{engine}\s*[<>]\s*0", aggregation[2])
                assert signed, f"{name} / {title}: sums signed gaps: {expr}"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_firing_alert_panels_read_both_paths(name: str) -> None:
    for title, expr in panel_exprs(DASHBOARDS[name]):
        if "ALERTS{" in expr:
            assert "poolwatch_alert_active{" in expr, f"{name} / {title} ignores the sidecars' own alerts"


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_namespace_and_pod_can_be_picked_and_a_configured_cluster_too(name: str) -> None:
    make = {"fleet": fleet_dashboard, "worker": worker_dashboard}[name]
    variables = {v["name"] for v in make()["templating"]["list"]}
    assert {"namespace", "pod"} <= variables
    clustered = make(MixinConfig(cluster_label="cluster"))
    assert "cluster" in {v["name"] for v in clustered["templating"]["list"]}
    assert all('cluster=~"$cluster"' in e for _, e in panel_exprs(clustered) if "poolwatch_pool_" in e)


def test_the_fleet_shows_exact_against_coarse_figures_and_notifications() -> None:
    exprs = " ".join(e for _, e in panel_exprs(fleet_dashboard()))
    for metric in (
        "poolwatch_pool_figures_exact",
        "poolwatch_notifications_total",
        "poolwatch_notification_queue_length",
    ):
        assert metric in exprs, metric
