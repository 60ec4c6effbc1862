"""The Helm chart (deploy/helm/poolwatch): rendered by Helm's own engine for both engines, valid for
Kubernetes 1.29-1.33 and the prometheus-operator CRDs as the kustomizations are; its pod is the
kustomize component's, its rules, dashboards and AlertmanagerConfig the generated ones; a user's own
engine chart adds the sidecar with its named templates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from tests.deploy.helm import CHART, built_example, render, render_files
from tests.deploy.k8s import (
    VERSIONS,
    Doc,
    container,
    core,
    engine_pods,
    env_of,
    operator_objects,
    validate_operator_object,
)
from tests.helpers import REPO

from poolwatch.settings.sidecar import Settings
from rigs.stack.manifests import of_kind

ENGINES = ["sglang", "vllm"]
KUSTOMIZE_OF = {"sglang": "base", "vllm": "vllm"}  # the kustomization whose workload runs the same engine


def with_workload(engine: str, **more: Any) -> dict[str, Any]:
    return {"engine": engine, "workload": {"enabled": True}, **more}


@pytest.fixture(scope="module", params=ENGINES)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[Doc]]:
    return request.param, render(with_workload(request.param))


def test_the_chart_renders_every_object_for_each_engine(rendered: tuple[str, list[Doc]]) -> None:
    engine, docs = rendered
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["AlertmanagerConfig", "ConfigMap", "Deployment", "PodMonitor", "PrometheusRule"]
    ((_, _, spec),) = [(e, m, s) for e, m, s in engine_pods(docs)]
    assert [c["name"] for c in spec["containers"]] == [engine]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_rendered_object_is_valid_for_kubernetes(rendered: tuple[str, list[Doc]], version: str) -> None:
    _, docs = rendered
    for doc in core(docs):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_operator_objects_match_their_crds(rendered: tuple[str, list[Doc]]) -> None:
    _, docs = rendered
    kinds = set()
    for doc in operator_objects(docs):
        validate_operator_object(doc)
        kinds.add(doc["kind"])
    assert kinds == {"PodMonitor", "PrometheusRule", "AlertmanagerConfig"}


def _pod_parts(metadata: Doc, spec: Doc, engine: str) -> dict[str, Any]:
    """What poolwatch adds to a pod, comparable between the chart and the kustomize component."""
    sidecar = container(spec, "poolwatch", init=True)
    main = container(spec, engine, init=False)
    names = {"poolwatch-probe", "poolwatch-tmp", f"{engine}-logs"}
    return {
        "sidecar": {k: v for k, v in sidecar.items() if k not in ("env", "image")},
        "sidecar_env": env_of(sidecar, metadata),
        "engine_env": {
            k: v for k, v in env_of(main, metadata).items() if k.startswith(("POOLWATCH", "SGLANG"))
        },
        "engine_mounts": [m for m in main["volumeMounts"] if m["name"] in names],
        "volumes": sorted((v for v in spec["volumes"] if v["name"] in names), key=lambda v: v["name"]),
        "security": spec["securityContext"],
        "sidecar_label": metadata["labels"]["poolwatch.io/sidecar"],
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_the_charts_pod_is_the_kustomize_components(engine: str, builds: dict[str, list[Doc]]) -> None:
    """One pod, two ways to deploy it: the chart's named templates and the component agree field by field."""
    ((_, md, spec),) = engine_pods(render(with_workload(engine)))
    ((_, k_md, k_spec),) = [p for p in engine_pods(builds[KUSTOMIZE_OF[engine]]) if p[0] == engine]
    chart, kustomized = _pod_parts(md, spec, engine), _pod_parts(k_md, k_spec, engine)
    for part in chart:
        if part == "sidecar":  # kustomize writes the mounts in patch order, the chart in its own
            assert sorted(json.dumps(m, sort_keys=True) for m in chart[part].pop("volumeMounts")) == sorted(
                json.dumps(m, sort_keys=True) for m in kustomized[part].pop("volumeMounts")
            )
        assert chart[part] == kustomized[part], part
    assert (
        container(spec, "poolwatch", init=True)["image"] == container(k_spec, "poolwatch", init=True)["image"]
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_the_sidecar_the_chart_configures_starts_with_the_engines_sources(engine: str) -> None:
    ((_, md, spec),) = engine_pods(render(with_workload(engine)))
    settings = Settings.from_env(env_of(container(spec, "poolwatch", init=True), md))
    assert settings.targets.engine == engine
    assert settings.targets.probe_dir == "/var/run/poolwatch/probe"
    port = 8000 if engine == "vllm" else 30000
    assert settings.targets.metrics_urls == (f"http://127.0.0.1:{port}",)
    assert settings.targets.log_paths == (f"/var/log/{engine}/{engine}.log",)


def test_the_rules_dashboards_and_routes_are_the_generated_ones() -> None:
    docs = render({})
    (rule,) = of_kind(docs, "PrometheusRule")
    generated = yaml.safe_load((REPO / "deploy/prometheus/poolwatch-rules.yml").read_text())
    assert rule["spec"] == generated
    (config_map,) = of_kind(docs, "ConfigMap")
    for name in ("poolwatch-fleet.json", "poolwatch-worker.json"):
        assert json.loads(config_map["data"][name]) == json.loads((REPO / "dashboards" / name).read_text())
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "poolwatch"}
    (route,) = of_kind(docs, "AlertmanagerConfig")
    shipped = yaml.safe_load((REPO / "deploy/kubernetes/examples/pd/alertmanagerconfig.yaml").read_text())
    assert route["spec"] == shipped["spec"]
    assert not of_kind(docs, "Deployment")  # no workload unless asked for


def test_rules_generated_for_a_users_labels_go_in_with_set_file(tmp_path: Path) -> None:
    from poolwatch.cli import main

    (tmp_path / "sidecar.yaml").write_text('selector: job="poolwatch"\n')
    out = tmp_path / "mine"
    assert (
        main(
            [
                "generate",
                "--root",
                str(tmp_path),
                "--config",
                str(tmp_path / "sidecar.yaml"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    mine = (out / "deploy/prometheus/poolwatch-rules.yml").read_text()
    (rule,) = of_kind(render({"prometheusRule": {"rules": mine}}), "PrometheusRule")
    assert 'job="poolwatch"' in rule["spec"]["groups"][0]["rules"][0]["expr"]
    assert (out / "deploy/helm/poolwatch/files/poolwatch-rules.yml").read_text() == mine


def test_labels_for_kube_prometheus_stack_reach_each_selected_object() -> None:
    release = {"release": "kube-prometheus-stack"}
    values = {k: {"labels": release} for k in ("podMonitor", "prometheusRule", "alertmanagerConfig")}
    docs = render(values)
    for kind in ("PodMonitor", "PrometheusRule", "AlertmanagerConfig"):
        (doc,) = of_kind(docs, kind)
        assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_a_value_the_schema_refuses_fails_the_render() -> None:
    with pytest.raises(Exception, match="engine"):
        render({"engine": "tgi"})


def test_helm_lint_finds_no_error() -> None:
    import helm_python as helm

    found = helm.lint(str(CHART))
    assert found["errors"] == []
    assert not [m for m in found["messages"] if m["severity"] > 1], found["messages"]  # info only (an icon)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_users_own_engine_chart_adds_the_sidecar_with_the_named_templates(
    engine: str, tmp_path: Path
) -> None:
    example = built_example(tmp_path)
    docs = [d for d in render({"poolwatch": {"engine": engine}}, chart=example) if d]
    ((_, md, spec),) = engine_pods(docs)
    ((_, c_md, c_spec),) = engine_pods(render(with_workload(engine)))
    mine, charted = _pod_parts(md, spec, engine), _pod_parts(c_md, c_spec, engine)
    assert mine == charted
    for doc in core(docs):
        kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)
    assert {d["kind"] for d in operator_objects(docs)} == {
        "PodMonitor",
        "PrometheusRule",
        "AlertmanagerConfig",
    }
    assert render_files(example, {"poolwatch": {"engine": engine}})  # the example renders as shipped


@pytest.mark.parametrize("engine", ENGINES)
def test_the_rendered_chart_is_clean_yaml(engine: str) -> None:
    """What Helm renders passes the same yamllint as the committed manifests (the generated
    rules and dashboards inside it excepted: their lines are PromQL and JSON)."""
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    config = YamlLintConfig(
        "extends: default\nrules: {line-length: {max: 120}, document-start: disable, "
        "truthy: {check-keys: false}, comments-indentation: disable}\n"
    )
    rendered = render_files(CHART, with_workload(engine))
    for path, text in sorted(rendered.items()):
        if path.endswith(("NOTES.txt", "prometheusrule.yaml", "dashboards.yaml", "alertmanagerconfig.yaml")):
            continue
        problems = list(linter.run(text, config))
        assert not problems, f"{path}: " + "; ".join(f"{p.line}:{p.column} {p.message}" for p in problems)
