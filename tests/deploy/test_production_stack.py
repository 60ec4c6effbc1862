"""vLLM's production-stack Helm chart with poolwatch, as docs/deploy.md tells its users: the documented
values give the chart's Deployment the labels the sidecar component selects and the image with poolwatch
installed (checked against a render of the chart's template, ``fixtures/production-stack-vllm.yaml``), and
the documented kustomization over ``helm template``'s output adds the sidecar beside the chart's
container ``vllm``, switches the probe on in it, copies its stdout to the log the sidecar reads, and ships
the PodMonitor, the rules and the dashboards."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from tests.deploy.k8s import engine_pods, env_of, read, repo_path

from poolwatch.probe.core.config import ProbeConfig
from poolwatch.settings.sidecar import Settings
from rigs.stack.manifests import Doc, container, kustomize, of_kind, workloads

FIXTURE = Path(__file__).parent / "fixtures" / "production-stack-vllm.yaml"


def documented(kind: str) -> str:
    """The YAML block after ``<!-- <kind>:production-stack ... -->`` in docs/deploy.md."""
    found = re.search(
        rf"<!-- {kind}:production-stack\b[^>]*-->\n```yaml\n(.*?)```", read("docs/deploy.md"), re.S
    )
    assert found is not None, f"docs/deploy.md has no {kind}:production-stack block"
    return found[1]


def chart_deployment() -> Doc:
    (deployment,) = yaml.safe_load_all(FIXTURE.read_text(encoding="utf-8"))
    return dict(deployment)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:
    """The documented kustomization, ``<poolwatch>`` being this checkout, over the chart's render."""
    where = tmp_path_factory.mktemp("production-stack")
    shutil.copy(FIXTURE, where / "vllm-stack.yaml")
    poolwatch = os.path.relpath(repo_path("."), where)
    (where / "kustomization.yaml").write_text(documented("kustomization").replace("<poolwatch>", poolwatch))
    return kustomize(str(where))


def test_the_documented_values_are_what_the_charts_deployment_carries() -> None:
    values = yaml.safe_load(documented("values"))
    (model,) = values["servingEngineSpec"]["modelSpec"]
    deployment = chart_deployment()
    pod = deployment["spec"]["template"]
    assert model["labels"].items() <= deployment["metadata"]["labels"].items()
    assert model["podLabels"].items() <= pod["metadata"]["labels"].items()
    (vllm,) = pod["spec"]["containers"]
    assert vllm["name"] == "vllm"  # the chart's fixed name: the one the component's vLLM patch merges into
    assert vllm["image"] == f"{model['repository']}:{model['tag']}"
    assert vllm["command"][:3] == ["vllm", "serve", model["modelURL"]]
    assert "v0" not in model["vllmConfig"]  # v0: "1" would run vLLM V0, whose pool the probe does not read
    # the chart's selector never holds modelSpec labels: adding them is no change of an immutable field
    assert not set(model["labels"]) & set(deployment["spec"]["selector"]["matchLabels"])


def test_the_sidecar_runs_beside_the_charts_vllm_container_with_the_probe_switched_on(
    built: list[Doc],
) -> None:
    assert [w["metadata"]["name"] for w in workloads(built)] == ["vllm-llama3-deployment-vllm"]
    ((engine, metadata, spec),) = engine_pods(built)
    assert engine == "vllm"
    assert [c["name"] for c in spec["containers"]] == ["vllm"]
    vllm, sidecar = container(spec, "vllm", init=False), container(spec, "poolwatch", init=True)
    vllm_env = env_of(vllm, metadata)
    assert vllm_env["POOLWATCH_PROBE"] == "1"
    assert vllm_env["PYTHONHASHSEED"] == "123"  # the chart's own environment kept
    settings = Settings.from_env(env_of(sidecar, metadata))
    assert settings.targets.engine == "vllm"
    assert settings.targets.probe_dir == ProbeConfig.from_env(vllm_env).directory
    (port, *_) = vllm["ports"]
    assert settings.targets.metrics_urls == (f"http://127.0.0.1:{port['containerPort']}",)
    assert str(settings.identity.role) == "unified"
    assert spec["securityContext"]["fsGroup"] == sidecar["securityContext"]["runAsGroup"]


def test_the_charts_command_is_wrapped_to_copy_stdout_to_the_log_the_sidecar_reads(built: list[Doc]) -> None:
    ((_, metadata, spec),) = engine_pods(built)
    command = container(spec, "vllm", init=False)["command"]
    (log_path,) = Settings.from_env(
        env_of(container(spec, "poolwatch", init=True), metadata)
    ).targets.log_paths
    assert command[:2] == ["bash", "-c"]
    assert f"tee -a {log_path}" in command[2]
    assert command[2].endswith('exec "$0" "$@"')  # $0 and $@: the chart's own command, unchanged
    assert command[3:] == chart_deployment()["spec"]["template"]["spec"]["containers"][0]["command"]


def test_the_pod_monitor_rules_and_dashboards_come_and_the_bases_sglang_server_does_not(
    built: list[Doc],
) -> None:
    (monitor,) = of_kind(built, "PodMonitor")
    ((_, metadata, _),) = engine_pods(built)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= metadata["labels"].items()
    assert len(of_kind(built, "PrometheusRule")) == 1
    (dashboards,) = of_kind(built, "ConfigMap")
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "sglang" not in {d["metadata"]["name"] for d in built}
    assert {d["metadata"].get("namespace") for d in built} == {"inference"}


@pytest.mark.parametrize("version", ["1.29", "1.33"])
def test_the_patched_deployment_is_valid_kubernetes(built: list[Doc], version: str) -> None:
    for deployment in workloads(built):
        kubernetes_validate.validate(deployment, version, strict=True)
