"""The dashboards' alert panels by detector family: one stat per family of
:data:`poolwatch.detect.rules.FAMILIES`, counting its alerts firing now (both paths, each once),
red from one, linked to the family's section of the runbook index.  A new family gets its panel
with ``poolwatch generate``.

The fleet dashboard shows every family; the worker dashboard those whose alerts name a worker (the
sidecar-wide ones, Prometheus watching the sidecar, have none).
"""

from __future__ import annotations

import re
from dataclasses import replace

from poolwatch.artifacts.grafana import Json, PanelSpec
from poolwatch.artifacts.panels import firing, stat, thresholds
from poolwatch.detect.config import MixinConfig
from poolwatch.detect.family import Family
from poolwatch.detect.rules import FAMILIES
from poolwatch.detect.schema import Scope

__all__ = ["ROW", "family_panels", "index_anchor"]

ROW = "Alerts by detector family"


def index_anchor(title: str) -> str:
    """The anchor GitHub gives the runbook index's heading ``## <title>``."""
    return re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")


def _link(family: Family) -> Json:
    return {
        "title": f"{family.title}: the alerts and their runbooks",
        "url": f"${{runbooks}}/README.md#{index_anchor(family.title)}",
        "targetBlank": True,
    }


def _panel(family: Family, matchers: str) -> PanelSpec:
    names = family.names
    described = (
        f"{family.about} Firing now, from the sidecars and Prometheus' rules, each once: {', '.join(names)}."
    )
    expr = f"count({firing(matchers, '|'.join(names))}) or vector(0)"
    spec = stat(family.title, expr, "none", described, thresholds((None, "green"), (1, "red")))
    return replace(spec, links=(_link(family),))


def family_panels(matchers: str, *, sidecar_wide: bool = True) -> list[PanelSpec]:
    """A row with one stat per family (``sidecar_wide=False``: only families whose alerts name a
    worker), each filtered by ``matchers``."""
    shown = [f for f in FAMILIES if sidecar_wide or f.alerts(MixinConfig())[0].scope is not Scope.SIDECAR]
    return [PanelSpec("row", ROW), *(_panel(f, matchers) for f in shown)]
