"""What Grafana would ask Prometheus for the generated dashboards: each query variable resolved
with ``label_values`` against the live Prometheus (a chosen value must be one it offers), then
every panel expression with the variables and Grafana's range globals substituted."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rigs.stack.prometheus import Prometheus

_LABEL_VALUES = re.compile(r"^label_values\((?P<expr>.*),\s*(?P<label>\w+)\)$")
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
# Grafana's range globals for a 1 s scrape interval over a short time range
RANGES = {"__rate_interval": "15s", "__interval": "5s", "__range": "5m"}


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    title: str
    ref_id: str
    expr: str


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def panel_queries(name: str, doc: Mapping[str, Any]) -> Iterator[PanelQuery]:
    """Every target of every panel (rows' nested panels included)."""
    stack = list(doc["panels"])
    while stack:
        panel = stack.pop(0)
        stack.extend(panel.get("panels", []))
        for target in panel.get("targets", []):
            yield PanelQuery(name, panel["title"], target["refId"], target["expr"])


def substitute(text: str, values: Mapping[str, str]) -> str:
    """Replace ``$var`` / ``${var}``; a variable with no value is a ``KeyError`` naming it."""

    def one(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        if name in RANGES:
            return RANGES[name]
        if name not in values:
            raise KeyError(f"no value for ${name} in {text!r}")
        return values[name]

    return _VARIABLE.sub(one, text)


def resolve_variables(
    doc: Mapping[str, Any], prom: Prometheus, chosen: Mapping[str, str], start: float, end: float
) -> dict[str, str]:
    """Each query variable in dashboard order: the ``chosen`` value (which Prometheus must offer
    for it), else the first value offered."""
    values: dict[str, str] = {}
    for var in doc["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = _LABEL_VALUES.match(var["definition"])
        if match is None:
            raise AssertionError(f"variable {var['name']}: not label_values(expr, label)")
        offered = prom.label_values(match["label"], substitute(match["expr"], values), start, end)
        want = chosen.get(var["name"], offered[0] if offered else None)
        if want is None or want not in offered:
            raise AssertionError(f"variable {var['name']}: Prometheus offers {offered}, wanted {want!r}")
        values[var["name"]] = want
    return values
