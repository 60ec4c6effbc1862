"""The container image: a hadolint-clean, multi-stage, non-root, torch-free Dockerfile whose build
stage installs the released wheel for the target platform, and (marked ``image``) a real
daemonless amd64 + arm64 build with labels, SBOMs and digests whose images serve ``/metrics``
(arm64 under qemu emulation)."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from tests.deploy.k8s import hadolint
from tests.helpers import REPO, require_tool

from poolwatch import __version__
from poolwatch.settings.sidecar import Settings

DOCKERFILE = REPO / "Dockerfile"
BUILD_SCRIPT = REPO / "scripts" / "build_image.sh"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def test_the_dockerfile_is_hadolint_clean() -> None:
    result = subprocess.run(
        [hadolint(), "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, json.dumps(json.loads(result.stdout or "[]"), indent=1)


def test_the_build_stage_runs_natively_and_the_runtime_stage_is_the_target_base() -> None:
    steps = instructions()
    froms = [args for op, args in steps if op == "FROM"]
    assert froms == ["--platform=$BUILDPLATFORM ${BUILD_BASE} AS build", "${BASE}"]
    defaults = {
        args.split("=")[0]: args.split("=")[1] for op, args in steps if op == "ARG" and "BASE=" in args
    }
    assert defaults == {"BASE": "python:3.11-slim-bookworm", "BUILD_BASE": "python:3.11-slim-bookworm"}
    script = BUILD_SCRIPT.read_text(encoding="utf-8")
    assert '--build-arg "BASE=$(base_name "$arch")" --build-arg "BUILD_BASE=$(base_name "$NATIVE")"' in script
    assert ("COPY", "--from=build /opt/poolwatch /opt/poolwatch") in final_stage()
    assert not [op for op, _ in final_stage() if op == "RUN"], "nothing runs on the target architecture"


def test_the_build_stage_installs_the_released_wheel_with_the_target_platforms_wheels() -> None:
    (run,) = [args for op, args in instructions() if op == "RUN"]
    assert ("COPY", "dist/poolwatch-${VERSION}-py3-none-any.whl /wheels/") in instructions()
    for needed in ("${TARGETARCH}", "--only-binary=:all:", "--python-version 3.11", '--target "$site"'):
        assert needed in run
    assert "amd64) m=x86_64" in run
    assert "arm64) m=aarch64" in run


def test_the_build_script_makes_both_architectures_an_sbom_each_and_prints_the_digests() -> None:
    script = BUILD_SCRIPT.read_text(encoding="utf-8")
    assert "PLATFORMS=linux/amd64,linux/arm64" in script
    assert 'cyclonedx-py" environment' in script
    assert 'manifest push --quiet --all --format oci "$IMAGE"' in script
    assert 'cat "$OUT/poolwatch-$VERSION-image.digests"' in script


def test_the_runtime_stage_runs_poolwatch_serve_as_a_non_root_user_on_the_metrics_port() -> None:
    runtime = dict(final_stage())
    user, _, group = runtime["USER"].partition(":")
    assert int(user) != 0
    assert int(group) != 0
    assert runtime["EXPOSE"] == str(Settings().server.port) == "9464"
    assert json.loads(runtime["CMD"]) == ["poolwatch", "serve"]
    assert "HEALTHCHECK" not in runtime, "Kubernetes probes /healthz and /readyz instead"


def test_the_image_carries_oci_labels_from_build_arguments() -> None:
    labels = dict(re.findall(r"(org\.opencontainers\.image\.\w+)=\"([^\"]*)\"", dict(final_stage())["LABEL"]))
    names = {k.rsplit(".", 1)[1] for k in labels}
    assert {"title", "description", "version", "revision", "licenses", "source"} <= names
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    script = BUILD_SCRIPT.read_text(encoding="utf-8")
    assert '--build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION"' in script


def test_the_image_installs_no_torch_and_copies_only_what_the_wheel_needs() -> None:
    runs = [args for op, args in instructions() if op == "RUN"]
    assert runs
    assert not [r for r in runs if "torch" in r or "[" in r], "no torch, no extras"
    ignore = [line for line in (REPO / ".dockerignore").read_text(encoding="utf-8").split("\n") if line]
    rules = [line for line in ignore if not line.startswith("#")]
    assert rules[0] == "*", "everything is excluded unless listed"
    copied = [
        args.split()[0] for op, args in instructions() if op == "COPY" and not args.startswith("--from")
    ]
    assert copied == ["dist/poolwatch-${VERSION}-py3-none-any.whl"]
    for path in copied:
        allowed = path.replace("${VERSION}", __version__)
        assert any(fnmatch.fnmatch(allowed, rule[1:]) for rule in rules if rule.startswith("!")), path


def test_the_build_script_is_valid_bash() -> None:
    result = subprocess.run(["bash", "-n", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert os.access(BUILD_SCRIPT, os.X_OK)


def head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout.strip()


def skopeo_inspect(archive: Path, arch: str) -> dict[str, Any]:
    result = subprocess.run(
        [require_tool("skopeo"), "--override-arch", arch, "inspect", f"oci-archive:{archive}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    inspected: dict[str, Any] = json.loads(result.stdout)
    return inspected


@pytest.mark.image
@pytest.mark.slow
def test_the_image_builds_for_amd64_and_arm64_with_labels_sboms_and_digests_and_both_serve_metrics(
    tmp_path: Path,
) -> None:
    """Cold: ~15 min (debootstrap of both bases, arm64's under qemu); warm (bases cached in
    $POOLWATCH_CACHE): ~5 min on 2 cores, most of it the arm64 smoke run under emulation."""
    for tool in ("buildah", "debootstrap", "curl", "qemu-aarch64-static", "skopeo"):
        require_tool(tool)
    if os.geteuid() != 0:
        pytest.skip("the image build needs root (debootstrap, buildah chroot isolation, binfmt)")
    env = {**os.environ, "POOLWATCH_SMOKE_PORT": "19465"}
    revisions = {head()}  # the label is HEAD at build time (a shared tree may commit meanwhile)
    result = subprocess.run(
        [str(BUILD_SCRIPT), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
        env=env,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64")):
        assert f"{arch} {arch} 65532:65532 [poolwatch serve] map[9464/tcp:{{}}]" in result.stdout
        served = rf'^{arch} {machine} poolwatch_pool_conservation_gap_slots\{{.*pool="mamba".*\}} -1\.0$'
        assert re.search(served, result.stdout, flags=re.M), result.stdout
        assert (
            f"the {arch} image serves /metrics, /readyz and the status page; it has no torch" in result.stderr
        )
    archive = tmp_path / f"poolwatch-{__version__}-image.oci.tar"
    assert archive.stat().st_size > 10_000_000
    image = f"ghcr.io/poolwatch/poolwatch:{__version__}"
    digests = (tmp_path / f"poolwatch-{__version__}-image.digests").read_text().splitlines()
    assert [line.split("  ")[1] for line in digests] == ["index", "linux/amd64", "linux/arm64"]
    assert all(re.fullmatch(rf"{re.escape(image)}@sha256:[0-9a-f]{{64}}  \S+", line) for line in digests)
    revisions.add(head())
    for arch in ("amd64", "arm64"):
        inspected = skopeo_inspect(archive, arch)
        assert inspected["Architecture"] == arch
        labels = inspected["Labels"]
        assert labels["org.opencontainers.image.version"] == __version__
        assert labels["org.opencontainers.image.revision"] in revisions
        assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
        assert labels["org.opencontainers.image.source"].startswith("https://")
        sbom = json.loads((tmp_path / f"poolwatch-{__version__}-image-{arch}.cdx.json").read_text())
        assert sbom["bomFormat"] == "CycloneDX"
        components = {c["name"].lower().replace("_", "-"): c for c in sbom["components"]}
        assert {"poolwatch", "fastapi", "uvicorn", "pydantic-core", "pyyaml", "prometheus-client"} <= set(
            components
        )
        assert components["poolwatch"]["version"] == __version__
        assert "torch" not in components
        debian = {c["name"] for c in sbom["components"] if c.get("purl", "").startswith("pkg:deb/debian/")}
        assert {"python3.11-minimal", "libc6", "ca-certificates"} <= debian
        assert sbom["metadata"]["component"]["name"] == "ghcr.io/poolwatch/poolwatch"
        errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(sbom))
        assert errors is None, errors
