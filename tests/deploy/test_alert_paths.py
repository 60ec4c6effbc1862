"""What the manifests say about the two alert paths and readiness: the direct Alertmanager path is
on by default with an address that fits prometheus-operator, the documented patches change it and
opt in to the readiness gate, and the sidecar names the pod and namespace of its own alerts."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from tests.deploy.k8s import KUSTOMIZATIONS, env_of, pods, read, repo_path, sidecar_settings

from poolwatch.settings.sidecar import Settings
from rigs.stack.manifests import Doc, container, kustomize, workloads

BUILDS = sorted(KUSTOMIZATIONS)
DEFAULT_URL = "http://alertmanager-operated.monitoring.svc:9093"


def documented_patch(name: str) -> str:
    """The YAML block after ``<!-- patch:<name> ... -->`` in docs/deploy.md."""
    found = re.search(rf"<!-- patch:{name}\b[^>]*-->\n```yaml\n(.*?)```", read("docs/deploy.md"), re.S)
    assert found is not None, f"docs/deploy.md has no patch:{name} block"
    return found[1]


def overlay(tmp_path: Path, name: str) -> list[Doc]:
    """The base with the documented patch applied, as a user's overlay would."""
    base = os.path.relpath(repo_path("deploy/kubernetes/base"), tmp_path)
    head = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
    (tmp_path / "kustomization.yaml").write_text(f"{head}  - {base}\n{documented_patch(name)}")
    return kustomize(str(tmp_path))


@pytest.mark.parametrize("build", BUILDS)
def test_every_manifest_turns_the_direct_alertmanager_path_on_with_the_operators_service(
    builds: dict[str, list[Doc]], build: str
) -> None:
    for settings in sidecar_settings(builds[build]):
        assert settings.alerting.alertmanager_urls == (DEFAULT_URL,)


@pytest.mark.parametrize("build", BUILDS)
def test_the_sidecar_labels_its_alerts_with_the_pod_and_namespace_prometheus_gives_the_rules(
    builds: dict[str, list[Doc]], build: str
) -> None:
    for metadata, spec in pods(builds[build]):
        env = {v["name"]: v for v in container(spec, "poolwatch", init=True)["env"]}
        assert env["POOLWATCH_POD"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["POOLWATCH_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        identity = Settings.from_env(env_of(container(spec, "poolwatch", init=True), metadata)).identity
        assert (identity.pod, identity.namespace) == ("sglang-7d9f-abcde", "inference")


def test_the_documented_patch_points_the_direct_path_at_another_alertmanager(tmp_path: Path) -> None:
    docs = overlay(tmp_path, "alertmanager-url")
    assert list(workloads(docs))
    for settings in sidecar_settings(docs):
        assert settings.alerting.alertmanager_urls == ("http://alertmanager-operated.observability.svc:9093",)


@pytest.mark.parametrize("build", BUILDS)
def test_readiness_never_gates_sglang_by_default(builds: dict[str, list[Doc]], build: str) -> None:
    for settings in sidecar_settings(builds[build]):
        assert settings.server.ready_requires_data is False


def test_the_documented_opt_in_readiness_gate_builds(tmp_path: Path) -> None:
    for settings in sidecar_settings(overlay(tmp_path, "ready-requires-data")):
        assert settings.server.ready_requires_data is True
