"""A detector family's own thresholds and charts are declared in its module and reach the settings,
``--help``, the detector and the worker dashboard from there (poolwatch.detect.thresholds,
poolwatch.detect.charts): nothing else names them."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from poolwatch.detect.config import DetectorConfig
from poolwatch.detect.families.stall import StallThresholds
from poolwatch.detect.rules import FAMILIES
from poolwatch.detect.stranded import HoldThresholds
from poolwatch.detect.thresholds import help_of
from poolwatch.errors import ConfigError
from poolwatch.settings.sidecar import Settings

REPO = Path(__file__).resolve().parents[2]
OWN = [(family.name, kind) for family in FAMILIES if (kind := family.thresholds) is not None]


def test_the_families_that_page_on_what_the_gap_cannot_see_declare_their_own_thresholds() -> None:
    assert {kind for _, kind in OWN} >= {HoldThresholds, StallThresholds}


@pytest.mark.parametrize(("family", "kind"), OWN, ids=[name for name, _ in OWN])
def test_every_threshold_of_a_family_is_a_setting_that_reaches_the_detector(family: str, kind: type) -> None:
    for f in fields(kind):
        assert help_of(f), f"{family}.{f.name} has no help line"
        doubled = f.default * 2 if f.default else 1
        settings = Settings.from_env({f"POOLWATCH_{f.name.upper()}": str(doubled)})
        assert getattr(settings.detection.of(kind), f.name) == doubled
        assert getattr(Settings().detection.of(kind), f.name) == f.default  # not given: its default


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("POOLWATCH_STALL_FREE_FRACTION", "1.5", "must be in (0, 1]"),
        ("POOLWATCH_HOLD_MIN_SLOTS", "0", "must be at least 1"),
        ("POOLWATCH_STALL_STEPS", "many", "expected an integer"),
    ],
)
def test_a_family_threshold_out_of_range_is_refused_naming_its_variable(
    variable: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=rf"{variable}: .*{re.escape(message)}"):
        Settings.from_env({variable: value})


def test_the_detector_config_takes_one_value_per_family_class() -> None:
    with pytest.raises(ConfigError, match="one value per family"):
        DetectorConfig(families=(HoldThresholds(), HoldThresholds(hold_grace=1.0)))
    given = DetectorConfig(families=(HoldThresholds(hold_grace=1.0),))
    assert given.of(HoldThresholds).hold_grace == 1.0
    assert given.of(StallThresholds) == StallThresholds()


def test_every_family_chart_is_on_the_committed_worker_dashboard_reading_its_metric() -> None:
    doc = json.loads((REPO / "dashboards" / "poolwatch-worker.json").read_text())
    panels = {p["title"]: p for p in doc["panels"]}
    charts = [(family.name, chart) for family in FAMILIES for chart in family.charts]
    assert len(charts) >= 5
    for family, chart in charts:
        panel = panels.get(chart.title)
        assert panel is not None, f"{family}'s chart {chart.title!r} is not on the worker dashboard"
        exprs = [t["expr"] for t in panel["targets"]]
        assert len(exprs) == len(chart.lines)
        for line, expr in zip(chart.lines, exprs, strict=True):
            assert line.metric in expr
            assert ('pool=~"$pool"' in expr) is line.per_pool
            assert f"{line.over}({line.metric}" in expr if line.over else True


def test_untouched_family_thresholds_keep_the_settings_equal_to_the_defaults_and_bundles_list_them() -> None:
    from poolwatch.sidecar.incidents.redact import settings_summary

    assert Settings.from_env({}).detection == DetectorConfig()
    summary = settings_summary(Settings.from_env({"POOLWATCH_HOLD_GRACE": "5"}))
    shown = {name: value for group in summary.values() for name, value in group.items()}
    assert shown["hold_grace"] == 5.0
    assert shown["stall_steps"] == StallThresholds().stall_steps
    assert "families" not in shown
