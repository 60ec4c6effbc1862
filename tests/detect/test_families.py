"""The registry of detector families: every module of ``poolwatch.detect.families`` is found, each
declares one family of one mode with the judge of that mode, no alert belongs to two families, and
a family's declared metrics are exactly the catalogued ones its rules read."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
from tests.artifacts.promql_names import metric_names

from poolwatch.detect import families as package
from poolwatch.detect.config import DetectorConfig, MixinConfig
from poolwatch.detect.family import Family, uses
from poolwatch.detect.judges import Judges
from poolwatch.detect.rules import ALERTS, FAMILIES, discover, family_of
from poolwatch.detect.schema import AlertDef, Mode, PromRule, Scope, Severity

MODULES = sorted(p.stem for p in Path(package.__file__).parent.glob("*.py") if p.stem != "__init__")


def test_every_module_of_the_package_is_a_family_in_the_registry() -> None:
    assert sorted(f.name for f in FAMILIES) == MODULES


def test_no_alert_belongs_to_two_families_and_every_alert_has_one() -> None:
    owners = Counter(name for family in FAMILIES for name in family.names)
    assert [a for a, n in owners.items() if n > 1] == []
    assert set(owners) == {a.name for a in ALERTS}
    assert all(family_of(a.name).names.count(a.name) == 1 for a in ALERTS)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_familys_metrics_are_exactly_the_catalogued_ones_its_rules_read(family: Family) -> None:
    read = {
        name
        for a in family.alerts(MixinConfig())
        for rule in a.prometheus
        for name in metric_names(rule.expr)
    }
    prometheus_own = {"up"} if family.mode is Mode.PROMETHEUS else set()
    assert read - prometheus_own == {m.name for m in family.metrics}


def test_the_detector_runs_one_judge_per_family_that_has_one_of_its_mode() -> None:
    judges = Judges(DetectorConfig())
    by_mode = Counter(f.mode for f in FAMILIES)
    assert len(judges.sampled) == by_mode[Mode.SAMPLED]
    assert len(judges.events) == by_mode[Mode.EVENT]
    assert len(judges.timed) == by_mode[Mode.TIMED]
    timed = {name for names, _ in judges.timed for name in names}
    assert timed == {a.name for a in ALERTS if a.mode is Mode.TIMED}


def _alerts(config: MixinConfig) -> tuple[AlertDef, ...]:
    del config
    rule = PromRule(Severity.WARNING, "poolwatch_snapshot_stale == 1", "1m", "stale")
    return (AlertDef("PoolwatchMadeUp", Scope.RANK, Mode.TIMED, "summary", "meaning", (rule,)),)


def test_a_family_without_the_judge_of_its_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="need a judge of that mode"):
        Family("made_up", "Made up", "about", uses("poolwatch_snapshot_stale"), _alerts)


def test_an_uncatalogued_metric_or_a_badly_named_alert_is_refused() -> None:
    with pytest.raises(KeyError, match="poolwatch_made_up"):
        uses("poolwatch_made_up")
    with pytest.raises(ValueError, match="Poolwatch prefix"):
        AlertDef("MadeUpAlert", Scope.RANK, Mode.TIMED, "s", "m", (PromRule(Severity.INFO, "up", "0s", "d"),))


def test_a_module_without_a_family_is_an_error_not_skipped() -> None:
    with pytest.raises(TypeError, match=r"stray_families\.stray must define FAMILY"):
        discover("tests.detect.stray_families")


@pytest.mark.parametrize("module", MODULES)
def test_a_family_imports_no_other_family(module: str) -> None:
    """Families share words through detect/evidence.py and detect/outcome.py, never each other."""
    tree = ast.parse((Path(package.__file__).parent / f"{module}.py").read_text(encoding="utf-8"))
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m for m in imported if m.startswith(package.__name__)} == set()
