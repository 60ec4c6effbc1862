"""The kube-prometheus-stack component: one file sets the selector label on every operator object,
points the sidecar's direct path at the chart's Alertmanager and gives its alerts the chart's
Prometheus external label."""

from __future__ import annotations

import os
from pathlib import Path

from tests.deploy.k8s import pods, repo_path, sidecar_settings

from poolwatch.sidecar.alerting import alert_labels
from rigs.stack.manifests import container, kustomize, of_kind

COMPONENT = "deploy/kubernetes/components/kube-prometheus-stack"


def overlay(tmp_path: Path) -> list[dict[str, object]]:
    """The PD example with the component, as a user's overlay would add it."""
    pd = os.path.relpath(repo_path("deploy/kubernetes/examples/pd"), tmp_path)
    component = os.path.relpath(repo_path(COMPONENT), tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {pd}\ncomponents:\n  - {component}\n"
    )
    return kustomize(str(tmp_path))


def test_every_operator_object_carries_the_charts_selector_label(tmp_path: Path) -> None:
    docs = overlay(tmp_path)
    for kind in ("PodMonitor", "PrometheusRule", "AlertmanagerConfig"):
        (doc,) = of_kind(docs, kind)
        assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack", kind


def test_the_sidecars_direct_path_goes_to_the_charts_alertmanager_with_its_external_label(
    tmp_path: Path,
) -> None:
    docs = overlay(tmp_path)
    settings = sidecar_settings(docs)
    assert len(settings) == 2  # prefill and decode
    for s in settings:
        assert s.alerting.alertmanager_urls == ("http://alertmanager-operated.monitoring.svc:9093",)
        assert alert_labels(s.alerting.alert_labels) == {
            "prometheus": "monitoring/kube-prometheus-stack-prometheus"
        }
    for _, spec in pods(docs):
        names = [v["name"] for v in container(spec, "poolwatch", init=True)["env"]]
        assert len(names) == len(set(names)), names  # patched in place, not appended twice
