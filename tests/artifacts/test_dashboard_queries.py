"""Every PromQL expression of the dashboards parses and names only metrics poolwatch exports."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import promql_parser
import pytest
import yaml
from tests.artifacts.dashboard_docs import DASHBOARDS, expressions
from tests.helpers import require_tool

from poolwatch.catalog.metrics import CATALOG, by_name

PROMETHEUS_OWN = {"ALERTS", "up"}
GRAFANA_GLOBALS = {"__rate_interval", "__interval", "__range"}


def all_expressions() -> list[tuple[str, str]]:
    return [
        (f"{name}: {where}", expr) for name, doc in DASHBOARDS.items() for where, expr in expressions(doc)
    ]


def substitute(expr: str) -> str:
    """What Grafana sends: ranges become durations, other variables become label values."""
    expr = re.sub(r"\$(__rate_interval|__interval|__range)\b", "5m", expr)
    return re.sub(r"\$(\w+)", r"\1", expr)


def metric_names(expr: str) -> set[str]:
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            names.update(m.value for m in node.matchers.matchers if m.name == "__name__")

    promql_parser.walk(promql_parser.parse(substitute(expr)), visit)
    return names


EXPRESSIONS = all_expressions()


@pytest.mark.parametrize(("where", "expr"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_every_expression_parses_and_names_only_catalogued_metrics(where: str, expr: str) -> None:
    names = metric_names(expr)
    assert names, f"{where}: names no metric"
    for name in names - PROMETHEUS_OWN:
        by_name(name)  # raises KeyError naming the metric


def test_a_broken_expression_is_caught() -> None:
    with pytest.raises(ValueError, match="end of input"):
        metric_names("sum(poolwatch_pool_slots{state=")


def test_an_uncatalogued_metric_is_caught() -> None:
    (name,) = metric_names('rate(sglang_num_used_tokens{pool="$pool"}[$__rate_interval])')
    with pytest.raises(KeyError, match="not in poolwatch's catalogue"):
        by_name(name)


def test_every_variable_used_in_a_query_is_defined() -> None:
    for name, doc in DASHBOARDS.items():
        defined = {v["name"] for v in doc["templating"]["list"]} | GRAFANA_GLOBALS
        for where, expr in expressions(doc):
            used = set(re.findall(r"\$(\w+)", expr))
            assert used <= defined, f"{name} {where}: undefined {sorted(used - defined)}"


def test_the_dashboards_cover_the_pool_metrics_users_need() -> None:
    used = set().union(*(metric_names(e) for _, e in EXPRESSIONS))
    needed = {
        "poolwatch_pool_conservation_gap_slots",
        "poolwatch_pool_slots",
        "poolwatch_pool_capacity_slots",
        "poolwatch_pool_leak_rate_slots_per_second",
        "poolwatch_snapshot_age_seconds",
        "poolwatch_queue_requests",
        "poolwatch_target_up",
        "ALERTS",
    }
    assert needed <= used
    assert used - PROMETHEUS_OWN <= {s.name for s in CATALOG}


def test_prometheus_itself_accepts_every_expression(tmp_path: Path) -> None:
    """promtool parses each expression as a recording rule: Prometheus' own parser, not a port."""
    promtool = require_tool("promtool")
    rules = [
        {"record": f"poolwatch:dashboard_expr_{i}", "expr": substitute(e)}
        for i, (_, e) in enumerate(EXPRESSIONS)
    ]
    path = tmp_path / "dashboard-exprs.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}), encoding="utf-8")
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout
