"""With ``$engine`` = vLLM every panel of both dashboards makes sense: each rank-level selector of
each query (outside the engine filter) finds a series in what a vLLM pod's sidecar exports
(:mod:`tests.artifacts.vllm_pod`: the probe's ranks and a coarse one, rendered through the
sidecar's own ``/metrics``), or its metric is one no vLLM rank has (``IDLE_CHECK_ONLY``) and the panel
says so; a panel counted in slots says what a slot is in vLLM.

Sidecar-wide metrics (targets, notifications, tasks, versions: no rank labels) and Prometheus' own
``ALERTS`` and ``up`` are the same whatever engine the pod runs; they are held to the catalogue by
``test_dashboard_queries.py``, not to a vLLM series here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
from tests.artifacts.dashboard_docs import DASHBOARDS, children, is_engine_filtered, parse
from tests.artifacts.vllm_pod import Sample, vllm_pod_metrics, vllm_pod_samples

from poolwatch.artifacts.engine_filter import IDLE_CHECK_ONLY, idle_check_only, unit_note
from poolwatch.artifacts.fleet_health import NOT_CHARTED
from poolwatch.artifacts.panels import SLOTS, SLOTS_PER_SECOND
from poolwatch.catalog.metrics import CATALOG, by_name

Panel = dict[str, Any]
PROMETHEUS_OWN = {"ALERTS", "up"}
TARGET_LABELS = {"namespace", "pod", "container"}  # Prometheus adds them at the scrape


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> list[Sample]:
    return vllm_pod_samples(vllm_pod_metrics(tmp_path_factory.mktemp("vllm-pod")))


def rank_level(metric: str) -> bool:
    return metric not in PROMETHEUS_OWN and "dp_rank" in by_name(metric).labels


def filtered_selectors(node: object) -> list[promql_parser.VectorSelector]:
    """The selectors of ``node``, the engine filter's own info selector left out."""
    if isinstance(node, promql_parser.MatrixSelector):
        node = node.vector_selector
    if isinstance(node, promql_parser.VectorSelector):
        return [node]
    if is_engine_filtered(node):
        return filtered_selectors(node.lhs)
    return [s for child in children(node) for s in filtered_selectors(child)]


def _matches(matcher: Any, labels: dict[str, str], variables: set[str]) -> bool:
    if matcher.name in TARGET_LABELS or matcher.value in variables:
        return True  # a dashboard variable (All) or a label only Prometheus' scrape adds
    if matcher.name == "alertname":
        return True  # which alerts fire is a moment's state, not what the engine exports
    value, op = labels.get(matcher.name, ""), matcher.op
    if op in (promql_parser.MatchOp.Re, promql_parser.MatchOp.NotRe):
        found = re.fullmatch(matcher.value, value) is not None
        return found if op == promql_parser.MatchOp.Re else not found
    return (value == matcher.value) == (op == promql_parser.MatchOp.Equal)


def finds_a_series(
    selector: promql_parser.VectorSelector, exported: list[Sample], variables: set[str]
) -> bool:
    return any(
        name == selector.name and all(_matches(m, labels, variables) for m in selector.matchers.matchers)
        for name, labels in exported
    )


def problems(panel: Panel, exported: list[Sample], variables: set[str]) -> list[str]:
    """What in ``panel`` does not make sense for a vLLM rank (empty: all of it does)."""
    out = []
    for target in panel.get("targets", []):
        for selector in filtered_selectors(parse(target["expr"])):
            metric = selector.name or ""
            if not rank_level(metric) or finds_a_series(selector, exported, variables):
                continue
            if metric not in IDLE_CHECK_ONLY:
                out.append(f"{target['refId']}: {selector} finds no vLLM series")
            elif idle_check_only(metric) not in panel["description"]:
                out.append(f"{target['refId']}: reads {metric} and does not say it is SGLang's only")
    return out


def variable_names(doc: dict[str, Any]) -> set[str]:
    return {v["name"] for v in doc["templating"]["list"]}


PANELS = [(f"{name}: {p['title']}", name, p) for name, doc in DASHBOARDS.items() for p in doc["panels"]]


def test_the_pod_exports_what_vllm_ranks_have(exported: list[Sample]) -> None:
    names = {name for name, _ in exported}
    infos = [labels for name, labels in exported if name == "poolwatch_worker_info"]
    assert {i["engine"] for i in infos} == {"vllm"}
    assert {i["worker"]: i["release_verified"] for i in infos} == {
        "vllm-leaking": "true",
        "vllm-guarded": "true",
        "vllm-unverified": "false",
        "vllm-multimodal": "true",
        "vllm-drifted": "true",
        "vllm-coarse": "true",
    }
    assert {labels["pool"] for name, labels in exported if name == "poolwatch_pool_capacity_slots"} == {
        "full",
        "encoder",
    }
    kinds = {labels["kind"] for name, labels in exported if name == "poolwatch_pool_tripwire_slots"}
    assert {"missing", "negative_ref"} <= kinds
    refused = [labels for name, labels in exported if name == "poolwatch_probe_repairs_total"]
    assert [(r["worker"], r["pool"], r["kind"]) for r in refused] == [("vllm-guarded", "full", "refuse")]
    drifted = [labels for name, labels in exported if name == "poolwatch_pool_counter_drift_slots"]
    assert [(d["worker"], d["pool"], d["counter"]) for d in drifted] == [
        ("vllm-drifted", "full", "available")
    ]
    assert {
        "poolwatch_pool_leak_rate_slots_per_second",
        "poolwatch_pool_exhaustion_eta_seconds",
        "poolwatch_incidents_total",
        "poolwatch_alert_active",
    } <= names


@pytest.mark.parametrize(("where", "dashboard", "panel"), PANELS, ids=[w for w, _, _ in PANELS])
def test_every_panel_finds_vllm_series_or_says_it_is_sglangs_only(
    exported: list[Sample], where: str, dashboard: str, panel: Panel
) -> None:
    assert problems(panel, exported, variable_names(DASHBOARDS[dashboard])) == [], where


def test_a_query_on_a_metric_vllm_lacks_is_caught(exported: list[Sample]) -> None:
    def panel(expr: str, description: str = "") -> Panel:
        return {"description": description, "targets": [{"refId": "A", "expr": expr}]}

    variables = {"worker"}
    strict = 'poolwatch_idle_check_strict{worker="$worker"}'
    assert problems(panel(strict), exported, variables) == [
        "A: reads poolwatch_idle_check_strict and does not say it is SGLang's only"
    ]
    assert problems(panel(strict, idle_check_only("poolwatch_idle_check_strict")), exported, variables) == []
    (found,) = problems(panel('poolwatch_pool_slots{pool="mamba"}'), exported, variables)
    assert "finds no vLLM series" in found


def test_the_sglang_only_metrics_are_exactly_the_charted_rank_metrics_no_vllm_rank_exports(
    exported: list[Sample],
) -> None:
    names = {name for name, _ in exported}
    lacking = {s.name for s in CATALOG if not s.standard and rank_level(s.name)} - names
    assert set(IDLE_CHECK_ONLY) == lacking - set(NOT_CHARTED)


def test_a_stat_on_an_sglang_only_metric_shows_a_text_instead_of_no_data() -> None:
    for where, _, panel in PANELS:
        exprs = " ".join(t["expr"] for t in panel.get("targets", []))
        if panel["type"] == "stat" and any(m in exprs for m in IDLE_CHECK_ONLY):
            assert panel["fieldConfig"]["defaults"]["noValue"], where


def test_every_panel_counted_in_slots_says_what_a_slot_is_in_vllm() -> None:
    for where, _, panel in PANELS:
        if panel["type"] != "row" and panel["fieldConfig"]["defaults"]["unit"] in (SLOTS, SLOTS_PER_SECOND):
            assert unit_note() in panel["description"], where


def test_the_vllm_pod_renders_with_its_log_copied(tmp_path: Path) -> None:
    text = vllm_pod_metrics(tmp_path)
    assert (tmp_path / "vllm.log").is_file()
    assert 'engine="vllm"' in text
