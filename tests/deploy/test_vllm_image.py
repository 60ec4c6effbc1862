"""The vLLM example's image: vLLM's own with poolwatch installed, hadolint-clean, its base the image the
example deploys and its poolwatch this version, and the same text in docs/deploy.md."""

from __future__ import annotations

import re
import subprocess

import yaml
from tests.deploy.k8s import hadolint
from tests.helpers import REPO

from poolwatch import __version__

EXAMPLE = REPO / "deploy" / "kubernetes" / "examples" / "vllm"
DOCKERFILE = EXAMPLE / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def arg_defaults() -> dict[str, str]:
    return dict(args.split("=", 1) for op, args in instructions() if op == "ARG" and "=" in args)


def test_the_dockerfile_is_hadolint_clean() -> None:
    result = subprocess.run(
        [hadolint(), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_it_derives_the_vllm_image_the_example_deploys() -> None:
    kustomization = yaml.safe_load((EXAMPLE / "kustomization.yaml").read_text(encoding="utf-8"))
    (image,) = [i for i in kustomization["images"] if i["name"] == "vllm"]
    assert arg_defaults()["VLLM_IMAGE"] == f"{image['newName']}:{image['newTag']}"
    assert [args for op, args in instructions() if op == "FROM"] == ["${VLLM_IMAGE}"]


def test_it_installs_this_poolwatchs_wheel_and_fails_unless_vllm_would_find_the_plugin() -> None:
    """poolwatch is not on a package index yet: the wheel built in the clone is copied in and installed."""
    assert arg_defaults()["POOLWATCH_VERSION"] == __version__
    wheel = "poolwatch-${POOLWATCH_VERSION}-py3-none-any.whl"
    assert [args for op, args in instructions() if op == "COPY"] == [f"dist/{wheel} /tmp/"]
    (run,) = [args for op, args in instructions() if op == "RUN"]
    assert f'pip install --no-cache-dir "/tmp/{wheel}"' in run
    assert "poolwatch==" not in run
    assert " -e " not in run
    assert "entry_points(group='vllm.general_plugins', name='poolwatch')" in run


def test_docs_show_the_dockerfile_as_it_is() -> None:
    docs = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    (shown,) = re.findall(r"### The vLLM image\n.*?```dockerfile\n(.*?)```", docs, re.S)
    committed = [
        line for line in DOCKERFILE.read_text(encoding="utf-8").splitlines() if not line.startswith("#")
    ]
    assert shown.splitlines() == committed
