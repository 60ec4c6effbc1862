"""What the kustomize builds say about the sidecar: native, hardened, probed on real routes, wired
to its engine (SGLang, or vLLM for a workload labelled ``poolwatch.io/engine: vllm``) through shared
volumes and environment, and configured with settings poolwatch accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.deploy.k8s import KUSTOMIZATIONS, engine_pods, env_of, pods, read

from poolwatch import __version__
from poolwatch.artifacts.dashboards import artifacts
from poolwatch.detect.config import MixinConfig
from poolwatch.engines import engine_entry, load
from poolwatch.model.rank import Role
from poolwatch.probe.core.config import ProbeConfig
from poolwatch.settings.sidecar import Settings
from rigs.stack.manifests import Doc, container, load_all, of_kind, workloads

BUILDS = sorted(KUSTOMIZATIONS)
# what each engine's container must say beyond the shared wiring: its own consent variables and flags
ENGINE_ENV = {
    "sglang": {"POOLWATCH_PROBE": "1", "SGLANG_PLUGINS": "poolwatch"},
    "vllm": {"POOLWATCH_PROBE": "1"},
}
ENGINE_COMMAND = {"sglang": ("sglang.launch_server", "--enable-metrics"), "vllm": ("vllm serve",)}


def mounts(c: Doc) -> dict[str, Any]:
    return {m["name"]: m for m in c["volumeMounts"]}


@pytest.mark.parametrize("build", BUILDS)
def test_poolwatch_runs_as_a_native_sidecar_exactly_once_per_pod(
    builds: dict[str, list[Doc]], build: str
) -> None:
    for _, spec in pods(builds[build]):
        names = [c["name"] for c in spec["initContainers"]]
        assert names.count("poolwatch") == 1
        assert container(spec, "poolwatch", init=True)["restartPolicy"] == "Always"
        volumes = [v["name"] for v in spec["volumes"]]
        assert len(volumes) == len(set(volumes))


@pytest.mark.parametrize("build", BUILDS)
def test_the_sidecar_is_hardened_and_bounded(builds: dict[str, list[Doc]], build: str) -> None:
    for _, spec in pods(builds[build]):
        sidecar = container(spec, "poolwatch", init=True)
        sc = sidecar["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert sc["seccompProfile"]["type"] == "RuntimeDefault"
        assert {"cpu", "memory"} <= set(sidecar["resources"]["requests"])
        assert "memory" in sidecar["resources"]["limits"]
        assert all(m.get("readOnly") for n, m in mounts(sidecar).items() if n != "poolwatch-tmp")


@pytest.mark.parametrize("build", BUILDS)
def test_the_sidecar_serves_metrics_on_9464_and_is_probed_on_real_routes(
    builds: dict[str, list[Doc]], build: str
) -> None:
    for metadata, spec in pods(builds[build]):
        sidecar = container(spec, "poolwatch", init=True)
        assert sidecar["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
        probes = {k: sidecar[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
        assert probes["livenessProbe"] == {"path": "/healthz", "port": "metrics"}
        assert probes["startupProbe"] == {"path": "/healthz", "port": "metrics"}
        assert probes["readinessProbe"] == {"path": "/readyz", "port": "metrics"}
        settings = Settings.from_env(env_of(sidecar, metadata))
        assert settings.server.port == 9464


def test_every_example_is_built_and_the_vllm_example_is_one_of_them() -> None:
    assert {"base", "pd", "vllm"} <= set(BUILDS)


@pytest.mark.parametrize("build", BUILDS)
def test_the_engine_activates_the_probe_and_shares_its_directory_and_log_with_the_sidecar(
    builds: dict[str, list[Doc]], build: str
) -> None:
    for engine, metadata, spec in engine_pods(builds[build]):
        server, sidecar = container(spec, engine, init=False), container(spec, "poolwatch", init=True)
        server_env = env_of(server, metadata)
        assert ENGINE_ENV[engine].items() <= server_env.items()
        assert load(engine_entry(engine).probe).consent(server_env)  # the engine's plugin acts
        settings = Settings.from_env(env_of(sidecar, metadata))
        assert settings.targets.engine == engine  # the formats of its /metrics and log
        probe_dir = server_env["POOLWATCH_PROBE_DIR"]
        assert settings.targets.probe_dir == probe_dir
        assert ProbeConfig.from_env(server_env).directory == probe_dir
        shared = mounts(server)["poolwatch-probe"]["mountPath"]
        assert mounts(sidecar)["poolwatch-probe"]["mountPath"] == shared
        assert probe_dir.startswith(
            shared + "/"
        )  # a directory the probe makes, not the world-writable volume
        (log_path,) = settings.targets.log_paths
        log_dir = mounts(sidecar)[f"{engine}-logs"]["mountPath"]
        assert mounts(server)[f"{engine}-logs"]["mountPath"] == log_dir
        assert log_path.startswith(log_dir + "/")
        command = " ".join(server["args"])
        assert f"tee -a {log_path}" in command
        assert all(part in command for part in ENGINE_COMMAND[engine])
        assert settings.targets.metrics_urls == (f"http://127.0.0.1:{server['ports'][0]['containerPort']}",)


def test_no_pod_gets_a_container_of_an_engine_it_does_not_run(builds: dict[str, list[Doc]]) -> None:
    """The component patches the container named after the workload's engine only: a vLLM pod never
    gains a stray, image-less "sglang" container from SGLang's patch, nor the reverse."""
    for build, docs in builds.items():
        for engine, _, spec in engine_pods(docs):
            assert [c["name"] for c in spec["containers"]] == [engine], build
            volumes = {v["name"] for v in spec["volumes"]}
            assert {f"{e}-logs" for e in ENGINE_ENV} & volumes == {f"{engine}-logs"}, build


def test_the_vllm_example_runs_vllm_serve_in_place_of_sglang(builds: dict[str, list[Doc]]) -> None:
    ((engine, metadata, spec),) = engine_pods(builds["vllm"])
    assert engine == "vllm"
    assert [w["metadata"]["name"] for w in workloads(builds["vllm"])] == ["vllm"]
    assert metadata["labels"]["poolwatch.io/role"] == "unified"
    (port,) = container(spec, "vllm", init=False)["ports"]
    assert (port["name"], port["containerPort"]) == ("http", 8000)  # vLLM's API port, which serves /metrics
    kinds = {d["kind"] for d in builds["vllm"]}
    assert {"PodMonitor", "PrometheusRule", "ConfigMap"} <= kinds


@pytest.mark.parametrize(
    ("build", "roles"), [("base", {"unified"}), ("pd", {"prefill", "decode"}), ("vllm", {"unified"})]
)
def test_the_sidecar_takes_its_identity_from_the_downward_api(
    builds: dict[str, list[Doc]], build: str, roles: set[str]
) -> None:
    seen = set()
    for engine, metadata, spec in engine_pods(builds[build]):
        sidecar = container(spec, "poolwatch", init=True)
        by_name = {v["name"]: v for v in sidecar["env"]}
        assert by_name["POOLWATCH_WORKER"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        settings = Settings.from_env(env_of(sidecar, metadata))
        assert settings.identity.worker == "sglang-7d9f-abcde"
        assert (
            env_of(container(spec, engine, init=False), metadata)["POOLWATCH_WORKER"]
            == settings.identity.worker
        )
        assert settings.identity.namespace == "inference"
        seen.add(settings.identity.role)
    assert seen == {Role(r) for r in roles}


def test_the_pd_example_replaces_the_unified_server_by_prefill_and_decode(
    builds: dict[str, list[Doc]],
) -> None:
    names = sorted(w["metadata"]["name"] for w in workloads(builds["pd"]))
    assert names == ["sglang-decode", "sglang-prefill"]
    for w in workloads(builds["pd"]):
        role = w["spec"]["template"]["metadata"]["labels"]["llm-d.ai/role"]
        args = " ".join(container(w["spec"]["template"]["spec"], "sglang", init=False)["args"])
        assert f"--disaggregation-mode {role}" in args
    assert {d["metadata"].get("namespace") for d in builds["pd"] if d["kind"] != "Namespace"} == {
        "qwen3-next-pd"
    }


@pytest.mark.parametrize("build", BUILDS)
def test_the_pod_monitor_scrapes_the_sidecar_port_of_every_sidecar_pod(
    builds: dict[str, list[Doc]], build: str
) -> None:
    (monitor,) = of_kind(builds[build], "PodMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")
    for metadata, _ in pods(builds[build]):
        assert selector.items() <= metadata["labels"].items()


@pytest.mark.parametrize("build", BUILDS)
def test_the_rules_and_the_dashboards_ship_as_committed(builds: dict[str, list[Doc]], build: str) -> None:
    (rule,) = of_kind(builds[build], "PrometheusRule")
    (committed,) = load_all(read("deploy/kubernetes/base/prometheusrule.yaml"))
    assert rule["spec"] == committed["spec"]
    (config_map,) = of_kind(builds[build], "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    expected = {
        path.removeprefix("dashboards/"): text for path, text in artifacts(Path(), MixinConfig()).items()
    }
    assert config_map["data"] == expected
    assert all(json.loads(text)["uid"] for text in config_map["data"].values())


def test_the_base_deploys_the_image_of_this_version(builds: dict[str, list[Doc]]) -> None:
    for _, spec in pods(builds["base"]):
        image = container(spec, "poolwatch", init=True)["image"]
        assert image.endswith(f":{__version__}")


@pytest.mark.parametrize("build", BUILDS)
def test_the_shared_volumes_are_bounded_and_the_sidecar_reads_the_secret_by_group(
    builds: dict[str, list[Doc]], build: str
) -> None:
    """Issue 24 items 2 and 9: the log volume has a size limit; the pod's fsGroup is the sidecar's group."""
    for engine, _, spec in engine_pods(builds[build]):
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes[f"{engine}-logs"]["emptyDir"]["sizeLimit"]
        assert volumes["poolwatch-probe"]["emptyDir"]["sizeLimit"]
        sidecar = container(spec, "poolwatch", init=True)
        assert spec["securityContext"]["fsGroup"] == sidecar["securityContext"]["runAsGroup"]
        assert spec["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
