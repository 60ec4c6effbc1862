"""From a fresh clone, as a release and a user build them: ``scripts/release`` (the script the release
workflow runs) makes the wheels and the sidecar image, and the engine images the docs show install
that wheel: the vLLM example's Dockerfile and the SGLang image of docs/deploy.md.

No registry is reachable here, so the engine images are built on a stand-in for vLLM's and SGLang's
images (the image build's own Debian base with a Python venv first on PATH, where ``python3 -m pip``
installs, as in theirs); the Dockerfiles themselves are built as committed and shown."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers import REPO, free_port, require_tool
from tests.install_lines import marked_blocks
from tests.release_env import clone

from poolwatch import __version__

pytestmark = [pytest.mark.image, pytest.mark.slow]

CACHE = Path(os.environ.get("POOLWATCH_CACHE", Path.home() / ".cache" / "poolwatch"))
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BASE = "localhost/poolwatch-base:bookworm-python3.11-amd64"  # scripts/build_image.sh's amd64 base
STANDIN = "localhost/poolwatch-engine-standin:test"
TEST_IMAGE = f"localhost/poolwatch-install-test:{__version__}"  # not the name the manifests use


def buildah() -> list[str]:
    return [require_tool("buildah"), "--storage-driver", "vfs", "--root", str(CACHE / "containers/storage"),
            "--runroot", str(CACHE / "containers/run")]  # fmt: skip


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 1800) -> str:
    result = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh clone in which ``scripts/release`` ran (amd64 only: the arm64 build is test_image.py's)."""
    for tool in ("buildah", "debootstrap", "curl", "skopeo"):
        require_tool(tool)
    if os.geteuid() != 0:
        pytest.skip("the image build needs root (debootstrap, buildah chroot isolation)")
    repo = clone(tmp_path_factory.mktemp("fresh"))
    env = {
        **os.environ,
        # the tools (build, twine, cyclonedx) come from this checkout's venv; the clone's code is built
        "POOLWATCH_VENV": str(REPO / ".venv"),
        "POOLWATCH_PLATFORMS": "linux/amd64",
        "POOLWATCH_IMAGE": TEST_IMAGE,
        "POOLWATCH_SMOKE_PORT": str(free_port()),
    }
    out = run(["scripts/release"], cwd=repo, env=env, timeout=2400)
    print(out[-2000:])
    yield repo
    subprocess.run(
        [*buildah(), "rmi", "--force", TEST_IMAGE, f"{TEST_IMAGE}-amd64"], capture_output=True, check=False
    )


def test_scripts_release_makes_the_wheels_and_the_image_from_a_fresh_clone(released: Path) -> None:
    dist = released / "dist"
    for name in (
        f"poolwatch-{__version__}-py3-none-any.whl",
        f"poolwatch_emulator-{__version__}-py3-none-any.whl",
        f"poolwatch-{__version__}.tar.gz",
        f"poolwatch-{__version__}-image.oci.tar",
        f"poolwatch-{__version__}-image-amd64.cdx.json",
        "SHA256SUMS",
    ):
        assert (dist / name).is_file(), name
    digests = (dist / f"poolwatch-{__version__}-image.digests").read_text().splitlines()
    assert [line.split("  ")[1] for line in digests] == ["index", "linux/amd64"]
    run(["sha256sum", "--check", "SHA256SUMS"], cwd=dist)


@pytest.fixture(scope="module")
def standin(released: Path) -> Iterator[str]:
    """An engine image's stand-in: the Debian base with a venv's python3 and pip first on PATH."""
    containerfile = released / "standin.Containerfile"
    containerfile.write_text(
        f"FROM {BASE}\nRUN python3 -m venv /opt/engine\nENV PATH=/opt/engine/bin:$PATH\n", encoding="utf-8"
    )
    run([*buildah(), "bud", "--isolation", "chroot", "--pull-never", "--layers=false", "--quiet",
         "-f", str(containerfile), "-t", STANDIN, str(released)], cwd=released)  # fmt: skip
    yield STANDIN
    subprocess.run([*buildah(), "rmi", "--force", STANDIN], capture_output=True, check=False)


def build_engine_image(repo: Path, dockerfile: Path, arg: str, base: str, tag: str) -> None:
    """``docker build -f DOCKERFILE .`` from the clone's root, with buildah, on ``base``."""
    try:
        run([*buildah(), "bud", "--isolation", "chroot", "--pull-never", "--layers=false", "--quiet",
             "--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro", "--build-arg", f"{arg}={base}",
             "-f", str(dockerfile), "-t", tag, "."], cwd=repo)  # fmt: skip
        ctr = run([*buildah(), "from", "--pull-never", "--quiet", tag], cwd=repo).strip().splitlines()[-1]
        try:
            version = "import importlib.metadata as m; print(m.version('poolwatch'))"
            shown = run(
                [*buildah(), "run", "--isolation", "chroot", ctr, "--", "python3", "-c", version], cwd=repo
            )
            assert shown.strip().splitlines()[-1] == __version__
        finally:
            subprocess.run([*buildah(), "rm", ctr], capture_output=True, check=False)
    finally:
        subprocess.run([*buildah(), "rmi", "--force", tag], capture_output=True, check=False)


def test_the_vllm_examples_dockerfile_installs_the_clones_wheel(released: Path, standin: str) -> None:
    dockerfile = released / "deploy/kubernetes/examples/vllm/Dockerfile"
    build_engine_image(released, dockerfile, "VLLM_IMAGE", standin, "localhost/vllm-poolwatch:test")


def test_the_sglang_image_of_the_deploy_docs_installs_the_clones_wheel(released: Path, standin: str) -> None:
    (block,) = [b for name, b in marked_blocks(released / "docs/deploy.md").items() if name == "sglang-image"]
    dockerfile = released / "sglang.Dockerfile"
    dockerfile.write_text(re.sub(r"\\\n", "\\\n", "\n".join(block)) + "\n", encoding="utf-8")
    build_engine_image(released, dockerfile, "SGLANG_IMAGE", standin, "localhost/sglang-poolwatch:test")
