"""Helpers of the deployment tests: kustomize builds, read by plain PyYAML."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from tests.helpers import REPO, require_tool

KUSTOMIZATIONS = {"base": "deploy/kubernetes/base", "pd": "deploy/kubernetes/examples/pd"}
Doc = dict[str, Any]


def load_all(text: str) -> list[Doc]:
    """Every document, read by plain PyYAML (YAML 1.1): what kubectl reads, other tools must too."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render(path: str) -> str:
    """``kubectl kustomize PATH``: the manifests as a user renders them."""
    kubectl = require_tool("kubectl")
    result = subprocess.run(
        [kubectl, "kustomize", str(REPO / path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize {path} failed:\n{result.stderr}"
    return result.stdout


def kustomize(path: str) -> list[Doc]:
    return load_all(render(path))


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def workloads(docs: list[Doc]) -> Iterator[Doc]:
    """The Deployments and StatefulSets that carry the poolwatch sidecar."""
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet") and doc["metadata"]["labels"].get(
            "poolwatch.io/sidecar"
        ):
            yield doc


def pods(docs: list[Doc]) -> list[tuple[Doc, Doc]]:
    """(pod template metadata, pod spec) of every workload with the sidecar."""
    found = [(w["spec"]["template"]["metadata"], w["spec"]["template"]["spec"]) for w in workloads(docs)]
    assert found, "no workload carries the sidecar"
    return found


def env_of(c: Doc, metadata: Doc) -> dict[str, str]:
    """The container's environment as the kubelet would set it (downward API resolved)."""
    fields = {"metadata.name": "sglang-7d9f-abcde", "metadata.namespace": "inference"}
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


def container(pod: Doc, name: str, *, init: bool) -> Doc:
    key = "initContainers" if init else "containers"
    (found,) = [c for c in pod.get(key, []) if c["name"] == name]
    return found


def read(path: str) -> str:
    return (REPO / path).read_text(encoding="utf-8")


def repo_path(path: str) -> Path:
    return REPO / path
