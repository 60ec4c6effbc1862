"""The Alertmanager examples route every poolwatch alert by its severity (checked by amtool)."""

from __future__ import annotations

import subprocess

import pytest
from tests.deploy.k8s import read, repo_path
from tests.helpers import require_tool

from rigs.stack.manifests import Doc, load_all, of_kind

CONFIG = "deploy/alertmanager/alertmanager.yaml"
RECEIVER_OF = {"critical": "poolwatch-page", "warning": "poolwatch-ticket", "info": "null"}


def rules() -> list[dict[str, str]]:
    (doc,) = load_all(read("deploy/kubernetes/base/prometheusrule.yaml"))
    return [
        {"alertname": r["alert"], "severity": r["labels"]["severity"]}
        for group in doc["spec"]["groups"]
        for r in group["rules"]
        if "alert" in r
    ]


def route(labels: dict[str, str]) -> str:
    amtool = require_tool("amtool")
    args = [f"{k}={v}" for k, v in sorted(labels.items())]
    result = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={repo_path(CONFIG)}", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_alertmanager_example_is_a_valid_configuration() -> None:
    amtool = require_tool("amtool")
    result = subprocess.run(
        [amtool, "check-config", str(repo_path(CONFIG))],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_poolwatch_alert_reaches_the_receiver_of_its_severity() -> None:
    alerts = rules()
    assert {a["severity"] for a in alerts} <= set(RECEIVER_OF)
    for labels in alerts:
        assert route(labels) == RECEIVER_OF[labels["severity"]], labels


def test_other_alerts_keep_the_default_route() -> None:
    assert route({"alertname": "KubePodCrashLooping", "severity": "critical"}) == "default"


@pytest.mark.parametrize("field", ["route", "routes"])
def test_the_alertmanager_config_object_routes_only_to_receivers_it_defines(
    builds: dict[str, list[Doc]], field: str
) -> None:
    (config,) = of_kind(builds["pd"], "AlertmanagerConfig")
    spec = config["spec"]
    defined = {r["name"] for r in spec["receivers"]}
    routes = [spec["route"]] if field == "route" else spec["route"]["routes"]
    assert routes
    assert {r["receiver"] for r in routes} <= defined
    matchers = {(m["name"], m["value"]) for m in spec["route"]["matchers"]}
    assert ("alertname", "Poolwatch.*") in matchers
