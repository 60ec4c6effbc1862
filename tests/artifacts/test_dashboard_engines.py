"""Both dashboards have an engine selector, and every query obeys it: each selector is filtered per
series, joined on its own rank labels, and real Prometheus shows the chosen engine's ranks only."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from tests.artifacts.dashboard_docs import DASHBOARDS, INFO, children, is_engine_filtered, parse
from tests.helpers import require_tool

from poolwatch.artifacts.dashboards import fleet_dashboard
from poolwatch.artifacts.engine_filter import filter_expr
from poolwatch.catalog.metrics import by_name
from poolwatch.detect.config import MixinConfig

RANK = ("worker", "dp_rank", "tp_rank", "pp_rank")


def queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every panel target and annotation (what Grafana evaluates as PromQL)."""
    notes = [(f"annotation {a['name']!r}", a["expr"]) for a in doc["annotations"]["list"] if "expr" in a]
    return [(f"panel {p['title']!r}", t["expr"]) for p in doc["panels"] for t in p.get("targets", [])] + notes


QUERIES = [(f"{name}: {where}", expr) for name, doc in DASHBOARDS.items() for where, expr in queries(doc)]


def selectors(node: object, on: tuple[str, ...] | None = None) -> list[tuple[str, tuple[str, ...] | None]]:
    """(metric, the ``on`` labels of the engine filter it stands under, or None) for each selector."""
    if isinstance(node, promql_parser.MatrixSelector):
        node = node.vector_selector
    if isinstance(node, promql_parser.VectorSelector):
        return [(node.name or "", on)]
    if is_engine_filtered(node):
        return selectors(node.lhs, tuple(node.modifier.matching.labels))
    return [s for child in children(node) for s in selectors(child, on)]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_each_dashboard_offers_every_engine_and_lists_only_the_chosen_engines_ranks(name: str) -> None:
    variables = {v["name"]: v for v in DASHBOARDS[name]["templating"]["list"]}
    engine = variables["engine"]
    assert engine["query"] == 'label_values(poolwatch_worker_info{namespace=~"$namespace"}, engine)'
    assert engine["includeAll"]
    assert engine["multi"]
    assert engine["allValue"] == ".*"
    listing = [
        v["name"]
        for v in variables.values()
        if v["type"] == "query" and v["name"] in {"pod", "role", "worker"}
    ]
    assert "pod" in listing
    assert "worker" in listing
    for var in listing:
        assert 'engine=~"$engine"' in variables[var]["query"], var


def _expected_join(metric: str) -> set[str]:
    labels = RANK if metric == "ALERTS" else () if metric == "up" else by_name(metric).labels
    return {"namespace", "pod", *(lbl for lbl in RANK if lbl in labels)}


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[w for w, _ in QUERIES])
def test_every_selector_of_every_query_is_filtered_by_engine_on_its_ranks(where: str, expr: str) -> None:
    found = selectors(parse(expr))
    assert found, f"{where}: no selector"
    for metric, on in found:
        assert on is not None, f"{where}: {metric} is not filtered by $engine"
        assert set(on) == _expected_join(metric), f"{where}: {metric} on {on}"


def test_a_selector_left_unfiltered_is_caught() -> None:
    expr = "sum(poolwatch_pool_slots) / " + filter_expr("sum(poolwatch_pool_capacity_slots)")
    assert selectors(parse(expr)) == [
        ("poolwatch_pool_slots", None),
        ("poolwatch_pool_capacity_slots", ("namespace", "pod", "worker", "dp_rank", "tp_rank", "pp_rank")),
    ]


def test_a_configured_cluster_label_joins_too() -> None:
    doc = fleet_dashboard(MixinConfig(cluster_label="cluster"))
    for where, expr in queries(doc):
        for metric, on in selectors(parse(expr)):
            assert on is not None, f"{where}: {metric}"
            assert on[0] == "cluster", f"{where}: {metric} on {on}"


def _rank(metric: str, tp_rank: int, **labels: str) -> str:
    pairs = {
        "namespace": "ns",
        "pod": "p",
        "worker": "w",
        "dp_rank": "0",
        "tp_rank": str(tp_rank),
        "pp_rank": "0",
    }
    return metric + "{" + ", ".join(f'{k}="{v}"' for k, v in {**pairs, **labels}.items()) + "}"


# Two ranks of one worker: an SGLang rank (gap -1) and a vLLM rank (gap 2).
_SERIES = {
    _rank(INFO, 0, engine="sglang"): "1",
    _rank(INFO, 1, engine="vllm"): "1",
    _rank("poolwatch_pool_conservation_gap_slots", 0, pool="kv"): "-1",
    _rank("poolwatch_pool_conservation_gap_slots", 1, pool="full"): "2",
}
_VALUES = {"namespace": ".*", "pod": ".*", "role": ".*", "worker": ".*", "pool": ".*"}


def _panel(title: str) -> str:
    return next(t["expr"] for p in fleet_dashboard()["panels"] if p["title"] == title for t in p["targets"])


def _as_grafana_sends(expr: str, engine: str) -> str:
    return re.sub(r"\$(\w+)", lambda m: {**_VALUES, "engine": engine}[m[1]], expr)


@pytest.mark.parametrize(
    ("engine", "largest_deficit", "largest_surplus"), [(".*", 2, 1), ("vllm", 2, 0), ("sglang", 0, 1)]
)
def test_prometheus_shows_only_the_chosen_engines_ranks(
    tmp_path: Path, engine: str, largest_deficit: int, largest_surplus: int
) -> None:
    """promtool evaluates two fleet stats on the two ranks above, as Grafana sends them."""
    promtool = require_tool("promtool")
    tests = {
        "interval": "1m",
        "input_series": [{"series": s, "values": f"{v}x3"} for s, v in _SERIES.items()],
        "promql_expr_test": [
            {
                "expr": _as_grafana_sends(_panel(title), engine),
                "eval_time": "2m",
                "exp_samples": [{"labels": "{}", "value": value}],
            }
            for title, value in (
                ("Largest deficit (leak)", largest_deficit),
                ("Largest surplus (double free)", largest_surplus),
            )
        ],
    }
    (tmp_path / "rules.yaml").write_text("groups: []\n", encoding="utf-8")
    path = tmp_path / "engine-test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "tests": [tests]}), encoding="utf-8")
    result = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
