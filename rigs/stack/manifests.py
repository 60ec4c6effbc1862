"""The Kubernetes manifests as a user renders them (``kubectl kustomize``), read by plain PyYAML."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import yaml

from rigs.venv import ROOT, tool

__all__ = ["Doc", "container", "kustomize", "load_all", "of_kind", "render", "workloads"]

Doc = dict[str, Any]


def load_all(text: str) -> list[Doc]:
    """Every document, read by plain PyYAML (YAML 1.1): what kubectl reads, other tools must too."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render(path: str) -> str:
    """``kubectl kustomize PATH`` (relative to the checkout): the manifests as a user renders them."""
    result = subprocess.run(
        [tool("kubectl"), "kustomize", str(ROOT / path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path} failed:\n{result.stderr}")
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


def container(pod: Doc, name: str, *, init: bool) -> Doc:
    """The container ``name`` of a pod spec (``init``: among its init containers, as native sidecars are)."""
    key = "initContainers" if init else "containers"
    found: list[Doc] = [c for c in pod.get(key, []) if c["name"] == name]
    (one,) = found
    return one
