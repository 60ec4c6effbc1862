"""Grafana's provisioning files load the dashboards from files into the folder the ConfigMap names."""

from __future__ import annotations

from typing import Any

import yaml
from tests.helpers import REPO

PROVISIONING = REPO / "deploy/grafana/provisioning"


def load(path: str) -> dict[str, Any]:
    doc = yaml.safe_load((PROVISIONING / path).read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def test_the_dashboard_provider_reads_files_into_the_poolwatch_folder() -> None:
    doc = load("dashboards/poolwatch.yaml")
    assert doc["apiVersion"] == 1
    (provider,) = doc["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards/poolwatch"
    kustomization = yaml.safe_load((REPO / "dashboards/kustomization.yaml").read_text(encoding="utf-8"))
    assert kustomization["generatorOptions"]["annotations"]["grafana_folder"] == provider["folder"]
    (generator,) = kustomization["configMapGenerator"]
    assert sorted(generator["files"]) == sorted(p.name for p in (REPO / "dashboards").glob("*.json"))


def test_the_datasource_is_a_prometheus_one() -> None:
    doc = load("datasources/prometheus.yaml")
    (source,) = doc["datasources"]
    assert source["type"] == "prometheus"
    assert source["access"] == "proxy"
    assert source["url"].startswith("http")
