"""The dashboards as the artifact tests read them, and every PromQL expression one carries."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

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
