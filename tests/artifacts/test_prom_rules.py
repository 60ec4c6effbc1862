"""The generated Prometheus rules: promtool accepts them, unit tests cover every alert, only
catalogued metrics appear, every alert has its runbook, and the files match the definitions."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.artifacts.promql_names import metric_names, uncatalogued
from tests.helpers import REPO, require_tool

from poolwatch.artifacts import rules as generated
from poolwatch.detect.config import FLEET_DASHBOARD_UID, RUNBOOK_BASE_URL, WORKER_DASHBOARD_UID, MixinConfig
from poolwatch.detect.rules import ALERTS, FAMILIES
from poolwatch.detect.schema import ALERT_NAME, Mode, Severity, dashboard_path

RULES = REPO / generated.RULES_PATH
UNIT_TESTS = sorted((REPO / "deploy/prometheus/tests").glob("*.yml"))
SECTIONS = ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation")


def test_the_committed_rule_files_are_what_the_definitions_generate() -> None:
    for path, content in generated.artifacts(REPO, MixinConfig()).items():
        assert (REPO / path).read_text(encoding="utf-8") == content, (
            f"{path} is stale: run `poolwatch generate`"
        )


def test_promtool_accepts_the_rules_file() -> None:
    promtool = require_tool("promtool")
    result = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rules = sum(len(alert.prometheus) for alert in ALERTS)
    assert f"SUCCESS: {rules} rules found" in result.stdout


def test_the_prometheus_rule_object_holds_the_same_groups(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    obj = yaml.safe_load((REPO / generated.K8S_PATH).read_text())
    assert (obj["apiVersion"], obj["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert obj["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    extracted = tmp_path / "groups.yml"
    extracted.write_text(yaml.safe_dump({"groups": obj["spec"]["groups"]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(extracted)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_passes_its_promtool_unit_tests() -> None:
    promtool = require_tool("promtool")
    result = subprocess.run(
        [promtool, "test", "rules", *(p.name for p in UNIT_TESTS)],
        cwd=UNIT_TESTS[0].parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _expectations() -> tuple[list[tuple[str, str, str]], set[str]]:
    """Every expected firing alert (name, severity, description) and every alert tested quiet."""
    firing: list[tuple[str, str, str]] = []
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        doc: dict[str, Any] = yaml.safe_load(path.read_text())
        for case in doc["tests"]:
            for check in case.get("alert_rule_test", []):
                expected = check.get("exp_alerts") or []
                if not expected:
                    quiet.add(check["alertname"])
                for alert in expected:
                    assert set(alert["exp_annotations"]) == {
                        "summary",
                        "description",
                        "runbook_url",
                        "dashboard_url",
                    }
                    severity, description = (
                        alert["exp_labels"]["severity"],
                        alert["exp_annotations"]["description"],
                    )
                    firing.append((check["alertname"], severity, description))
    return firing, quiet


def template(description: str) -> re.Pattern[str]:
    """A rule's description template as a pattern: each ``{{ ... }}`` stands for some text."""
    parts = re.split(r"\{\{.*?\}\}", description)
    return re.compile(".+?".join(re.escape(part) for part in parts), re.S)


_BRANCH = re.compile(r"\{\{ if [^}]*\}\}(.*?)\{\{ else \}\}(.*?)\{\{ end \}\}", re.S)


def branches(description: str) -> list[str]:
    """Each text a description can render: one per side of its (unnested) ``if``/``else``."""
    found = _BRANCH.search(description)
    if found is None:
        return [description]
    head, tail = description[: found.start()], description[found.end() :]
    return [b for side in found.groups() for b in branches(head + side + tail)]


def test_every_rule_of_every_alert_is_unit_tested_firing_and_every_alert_not_firing() -> None:
    """Each rule, not only each severity: an alert may have a rule per engine with the same
    severity, and each one's text (each branch of a text that depends on a label) is held by a test."""
    firing, quiet = _expectations()
    for alert in ALERTS:
        for rule in alert.prometheus:
            for text in branches(rule.description):
                pattern = template(text)
                tested = [
                    d for n, s, d in firing if n == alert.name and s == rule.severity and pattern.fullmatch(d)
                ]
                assert tested, f"no promtool test fires {alert.name} ({rule.severity}): {text}"
    assert {alert.name for alert in ALERTS} - quiet == set()


def test_rules_reference_only_catalogued_metrics() -> None:
    for alert in ALERTS:
        own = {"up"} if alert.mode is Mode.PROMETHEUS else set()  # Prometheus' own scrape health
        for rule in alert.prometheus:
            assert metric_names(rule.expr), alert.name
            assert uncatalogued(rule.expr) <= own, alert.name


@pytest.mark.parametrize(
    ("expr", "unknown"),
    [
        ("sum by (pool) (rate(sglang:num_used_tokens[5m])) > 0", {"sglang:num_used_tokens"}),
        ('poolwatch_made_up{kind="x"} unless on (worker) poolwatch_target_up == 0', {"poolwatch_made_up"}),
        ("increase(poolwatch_incidents_total[15m]) > 0 or up offset 5m", {"up"}),
    ],
)
def test_the_catalogue_check_catches_a_metric_that_is_not_catalogued(expr: str, unknown: set[str]) -> None:
    assert uncatalogued(expr) == unknown


@pytest.mark.parametrize("alert", ALERTS, ids=lambda a: a.name)
def test_every_alert_has_a_runbook_with_the_four_sections_and_its_url_points_there(alert: Any) -> None:
    runbook = REPO / alert.runbook_path
    text = runbook.read_text(encoding="utf-8")
    assert text.startswith(f"# {alert.name}\n")
    positions = [text.find(f"\n{section}\n") for section in SECTIONS]
    assert all(p > 0 for p in positions), f"{runbook} lacks one of {SECTIONS}"
    assert positions == sorted(positions)
    for start, end in zip(positions, [*positions[1:], len(text)], strict=True):
        assert len(text[start:end].strip().splitlines()) > 2, f"an empty section in {runbook}"
    base = RUNBOOK_BASE_URL
    assert base.endswith("/" + str(Path(alert.runbook_path).parent))
    assert alert.runbook_url(base) == f"{base}/{alert.name}.md"
    rules = [
        r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if r["alert"] == alert.name
    ]
    assert {r["annotations"]["runbook_url"] for r in rules} == {alert.runbook_url(base)}


def test_no_runbook_is_left_without_its_alert() -> None:
    names = {alert.name for alert in ALERTS}
    pages = {p.stem for p in (REPO / "docs/runbooks").glob("*.md")} - {"README"}
    assert pages == names


def test_every_alert_name_has_one_definition() -> None:
    names = [alert.name for alert in ALERTS]
    assert len(names) == len(set(names)) == sum(len(f.names) for f in FAMILIES)
    assert all(ALERT_NAME.fullmatch(name) for name in names)
    assert {s for alert in ALERTS for s in alert.severities} <= set(Severity)


@pytest.mark.parametrize(
    ("path", "dashboard"),
    [
        (dashboard_path(WORKER_DASHBOARD_UID), WORKER_DASHBOARD_UID),
        (dashboard_path(FLEET_DASHBOARD_UID), FLEET_DASHBOARD_UID),
    ],
)
def test_dashboard_links_name_a_generated_dashboard_and_its_variables(path: str, dashboard: str) -> None:
    doc = json.loads((REPO / "dashboards" / f"{dashboard}.json").read_text())
    assert path.split("/")[2] == doc["uid"]
    variables = {v["name"] for v in doc["templating"]["list"]}
    for rule in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]:
        url = rule["annotations"]["dashboard_url"]
        if url.startswith(path):
            assert set(re.findall(r"var-(\w+)=", url)) <= variables
