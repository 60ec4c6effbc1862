"""Rendering the Helm chart with Helm's own engine, offline: ``helm-python-sdk`` binds Helm 4's Go SDK
(no ``helm`` binary is packaged for PyPI, npm or Debian).  ``render(values)`` is ``helm template``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml
from tests.deploy.k8s import Doc
from tests.helpers import REPO

CHART = REPO / "deploy/helm/poolwatch"
EXAMPLE = REPO / "deploy/helm/examples/my-engine"
RELEASE, NAMESPACE = "poolwatch", "inference"


def render_files(chart: Path, values: dict[str, Any], name: str = RELEASE) -> dict[str, str]:
    """``helm template NAME CHART -n inference --values <values>``: template path -> its text."""
    import helm_python as helm  # imported here: a few MB of native library, paid by these tests only

    with helm.Chart.load(str(chart)) as loaded:
        rendered: dict[str, str] = loaded.render(values, name=name, namespace=NAMESPACE)
    return rendered


def documents(rendered: dict[str, str]) -> list[Doc]:
    """The manifests (``helm template`` prints no NOTES.txt)."""
    texts = [text for path, text in sorted(rendered.items()) if not path.endswith("NOTES.txt")]
    return [doc for text in texts for doc in yaml.safe_load_all(text) if doc]


def render(values: dict[str, Any] | None = None, chart: Path = CHART) -> list[Doc]:
    return documents(render_files(chart, values or {}))


def built_example(where: Path) -> Path:
    """The example engine chart with its dependencies built (``helm dependency build``: the poolwatch
    chart from this repository copied into its ``charts/``)."""
    import helm_python as helm

    copy = where / "deploy/helm"
    shutil.copytree(CHART, copy / "poolwatch")
    shutil.copytree(EXAMPLE, copy / "examples/my-engine")
    helm.dependency_build(str(copy / "examples/my-engine"))
    return copy / "examples/my-engine"
