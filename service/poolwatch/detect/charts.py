"""What a detector family charts on the worker dashboard: its figures over every rank of the
worker, declared as data in the family's module (:attr:`poolwatch.detect.family.Family.charts`).  Pure.

:mod:`poolwatch.artifacts.worker_panels` renders every family's charts into one row of the worker
dashboard, in family order, with the dashboard's own selectors: a new family's figures reach the
dashboard with ``poolwatch generate``, never by editing the dashboard code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Chart", "Line"]


@dataclass(frozen=True, slots=True)
class Line:
    """One query of a chart: a catalogue metric over the selected worker's ranks.

    ``legend``    Grafana's legend format; ``$ranks`` stands for the rank's labels;
    ``per_pool``  filtered by the dashboard's pool variable (the metric has a ``pool`` label);
    ``over``      a counter's change per interval (``rate`` or ``increase``); "" for a gauge.
    """

    metric: str
    legend: str
    per_pool: bool = True
    over: Literal["", "rate", "increase"] = ""


@dataclass(frozen=True, slots=True)
class Chart:
    """One time-series panel: its lines, unit (``slots``, ``seconds``, ``short`` or Grafana's own
    ``suffix: ...``), what it shows, and whether it is drawn as bars (counts per interval)."""

    title: str
    lines: tuple[Line, ...]
    unit: str
    description: str
    bars: bool = False
