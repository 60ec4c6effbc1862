"""The dashboards as the artifact tests read them, every PromQL expression one carries, and the
walk of a parsed expression that tells the ``$engine`` filter (:mod:`poolwatch.artifacts.engine_filter`)
from the selectors it filters."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import promql_parser

from poolwatch.artifacts.dashboards import fleet_dashboard
from poolwatch.artifacts.worker_dashboard import worker_dashboard

DASHBOARDS = {"fleet": fleet_dashboard(), "worker": worker_dashboard()}
_LABEL_VALUES = re.compile(r"^label_values\((?P<expr>.*),\s*(?P<label>\w+)\)$")


def expressions(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, expr) for every panel target, annotation and query variable of a dashboard."""
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for note in doc["annotations"]["list"]:
        if "expr" in note:
            yield f"annotation {note['name']!r}", note["expr"]
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            match = _LABEL_VALUES.match(var["definition"])
            assert match, f"variable {var['name']}: not label_values(expr, label): {var['definition']}"
            yield f"variable {var['name']}", match["expr"]


INFO = "poolwatch_worker_info"


def parse(expr: str) -> object:
    """``expr`` as Grafana sends it, parsed: ranges become 5m, ``$name`` becomes ``name``."""
    expr = re.sub(r"\$(__rate_interval|__interval|__range)\b", "5m", expr)
    return promql_parser.parse(re.sub(r"\$(\w+)", r"\1", expr))


def _is_filter(node: object) -> bool:
    """``poolwatch_worker_info{engine!~"$engine"}`` (``$engine`` substituted by its name)."""
    if not isinstance(node, promql_parser.VectorSelector) or node.name != INFO:
        return False
    return any(
        m.name == "engine" and m.op == promql_parser.MatchOp.NotRe and m.value == "engine"
        for m in node.matchers.matchers
    )


def is_engine_filtered(node: object) -> bool:
    """``s unless on (...) poolwatch_worker_info{engine!~"$engine"}``: ``s`` (its ``lhs``) filtered."""
    return isinstance(node, promql_parser.BinaryExpr) and str(node.op) == "unless" and _is_filter(node.rhs)


def children(node: object) -> list[object]:
    if isinstance(node, promql_parser.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, promql_parser.AggregateExpr):
        return [c for c in (node.expr, node.param) if c is not None]
    if isinstance(node, promql_parser.Call):
        return list(node.args)
    if isinstance(node, (promql_parser.ParenExpr, promql_parser.UnaryExpr, promql_parser.SubqueryExpr)):
        return [node.expr]
    return []
