"""Pullable images everywhere: every kustomization (and the sidecar component added to a pod of
one's own) renders only images with a registry and a tag, and poolwatch's image is the name and
tag that ``scripts/build_image.sh`` builds."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.helpers import REPO, require_tool

from poolwatch import __version__
from rigs.stack.manifests import Doc, load_all

KUBERNETES = REPO / "deploy" / "kubernetes"
COMPONENT = KUBERNETES / "components" / "sidecar"
# A registry host is the first path component when it has a dot or a port, or is localhost.
REGISTRY = r"([a-z0-9-]+\.[a-z0-9.-]+(:\d+)?|localhost(:\d+)?)"
REFERENCE = re.compile(rf"^{REGISTRY}/[a-z0-9._/-]+(:[\w.-]+)?(@sha256:[0-9a-f]{{64}})?$")


def pullable(image: str) -> bool:
    """A registry, a repository and a tag (not ``latest``) or a digest."""
    pinned = re.search(r":[\w.-]+$|@sha256:", image) is not None and not image.endswith(":latest")
    return REFERENCE.match(image) is not None and pinned


def kustomizations() -> list[Path]:
    return sorted(p.parent for p in KUBERNETES.rglob("kustomization.yaml"))


def render(directory: Path) -> list[Doc]:
    result = subprocess.run(
        [require_tool("kubectl"), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return load_all(result.stdout)


def own_pod_with_component(tmp_path: Path) -> Path:
    """The README's recipe: a user's own SGLang Deployment, labelled, with the component added."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "mine", "labels": {"poolwatch.io/sidecar": "enabled"}},
        "spec": {
            "selector": {"matchLabels": {"app": "mine"}},
            "template": {
                "metadata": {"labels": {"app": "mine"}},
                "spec": {"containers": [{"name": "sglang", "image": "registry.example/sglang:mine"}]},
            },
        },
    }
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(deployment))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["mine.yaml"],
        "components": [os.path.relpath(COMPONENT, tmp_path)],  # kustomize wants it relative
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return tmp_path


def images(docs: list[Doc]) -> dict[str, str]:
    """``{"<kind>/<name>/<container>": image}`` of every container and init container."""
    out: dict[str, str] = {}
    for doc in docs:
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            out[f"{doc['kind']}/{doc['metadata']['name']}/{container['name']}"] = container["image"]
    return out


def rendered(tmp_path: Path) -> dict[str, dict[str, str]]:
    out = {}
    for directory in kustomizations():
        kind = yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))["kind"]
        target = own_pod_with_component(tmp_path) if kind == "Component" else directory
        out[str(directory.relative_to(REPO))] = images(render(target))
    return out


def test_every_kustomization_and_the_component_render_only_images_with_a_registry_and_a_tag(
    tmp_path: Path,
) -> None:
    found = rendered(tmp_path)
    assert set(found) >= {
        "deploy/kubernetes/base",
        "deploy/kubernetes/examples/pd",
        "deploy/kubernetes/examples/vllm",
        "deploy/kubernetes/components/sidecar",
    }
    bad = {
        f"{where}: {container}": image
        for where, containers in found.items()
        for container, image in containers.items()
        if not pullable(image)
    }
    assert bad == {}
    assert all(containers for containers in found.values()), found


@pytest.mark.parametrize(
    ("image", "ok"),
    [
        ("ghcr.io/poolwatch/poolwatch:0.1.0", True),
        ("localhost:5000/poolwatch@sha256:" + "0" * 64, True),
        ("poolwatch", False),
        ("lmsysorg/sglang:v0.5.12", False),  # Docker Hub, implied: not pullable from every runtime's config
        ("docker.io/lmsysorg/sglang", False),
        ("docker.io/lmsysorg/sglang:latest", False),
    ],
)
def test_an_image_is_pullable_with_a_registry_and_a_tag_or_digest(image: str, ok: bool) -> None:
    assert pullable(image) is ok


def test_the_sidecar_image_everywhere_is_the_name_and_tag_the_build_produces(tmp_path: Path) -> None:
    script = (REPO / "scripts" / "build_image.sh").read_text(encoding="utf-8")
    (default,) = re.findall(r"^IMAGE=\$\{POOLWATCH_IMAGE:-(\S+)\}$", script, flags=re.M)
    built = default.replace("$VERSION", __version__)
    assert built == f"ghcr.io/poolwatch/poolwatch:{__version__}"
    sidecars = {
        f"{where}: {container}": image
        for where, containers in rendered(tmp_path).items()
        for container, image in containers.items()
        if container.endswith("/poolwatch")
    }
    assert len(sidecars) >= 5, sidecars  # base, PD prefill + decode, vLLM, the component on one's own pod
    assert set(sidecars.values()) == {built}


PLACEHOLDERS = ("poolwatch", "sglang", "vllm")


@pytest.mark.parametrize("name", PLACEHOLDERS)
def test_manifests_name_images_only_through_placeholders_that_kustomize_rewrites(name: str) -> None:
    raw = [
        line.strip()
        for path in KUBERNETES.rglob("*.yaml")
        if path.name != "kustomization.yaml"
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip().startswith("image:")
    ]
    assert raw, "the manifests name their images"
    assert all(line in {f"image: {p}" for p in PLACEHOLDERS} for line in raw), raw
    assert f"image: {name}" in raw
