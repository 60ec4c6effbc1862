"""The container image: a hadolint-clean, multi-stage, non-root, torch-free Dockerfile, and (marked
``image``) a real daemonless build whose result serves ``/metrics``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import REPO, require_tool

from poolwatch import __version__
from poolwatch.settings import Settings

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


def hadolint() -> str:
    beside_python = Path(sys.executable).with_name("hadolint")
    return str(beside_python) if beside_python.is_file() else require_tool("hadolint")


def test_the_dockerfile_is_hadolint_clean() -> None:
    result = subprocess.run(
        [hadolint(), "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, json.dumps(json.loads(result.stdout or "[]"), indent=1)


def test_the_image_is_built_in_two_stages_from_the_base_the_build_script_makes() -> None:
    steps = instructions()
    froms = [args for op, args in steps if op == "FROM"]
    assert froms == ["${BASE} AS build", "${BASE}"]
    (base,) = [args for op, args in steps if op == "ARG" and args.startswith("BASE=")]
    script = BUILD_SCRIPT.read_text(encoding="utf-8")
    assert f"BASE=docker.io/library/{base.removeprefix('BASE=')}" in script
    assert ("COPY", "--from=build /opt/poolwatch /opt/poolwatch") in final_stage()


def test_the_runtime_stage_runs_poolwatch_serve_as_a_non_root_user_on_the_metrics_port() -> None:
    runtime = dict(final_stage())
    user, _, group = runtime["USER"].partition(":")
    assert int(user) != 0
    assert int(group) != 0
    assert runtime["EXPOSE"] == str(Settings().server.port) == "9464"
    assert json.loads(runtime["CMD"]) == ["poolwatch", "serve"]
    assert "HEALTHCHECK" not in runtime, "Kubernetes probes /healthz and /readyz instead"


def test_the_image_carries_oci_labels() -> None:
    labels = dict(re.findall(r"(org\.opencontainers\.image\.\w+)=\"([^\"]*)\"", dict(final_stage())["LABEL"]))
    assert {"title", "description", "version", "licenses", "source"} <= {k.rsplit(".", 1)[1] for k in labels}
    (version,) = [args for op, args in final_stage() if op == "ARG" and args.startswith("VERSION=")]
    assert version == f"VERSION={__version__}"


def test_the_image_installs_no_torch_and_copies_only_what_the_wheel_needs() -> None:
    runs = [args for op, args in instructions() if op == "RUN"]
    assert runs
    assert not [r for r in runs if "torch" in r or "[" in r], "no torch, no extras"
    ignore = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    assert ignore[ignore.index("*") :][:1] == ["*"], "everything is excluded unless listed"
    copied = [
        args.split()[0] for op, args in instructions() if op == "COPY" and not args.startswith("--from")
    ]
    for path in copied:
        assert f"!{path.rstrip('/')}" in ignore or f"!{path}" in ignore, path


def test_the_build_script_is_valid_bash() -> None:
    result = subprocess.run(["bash", "-n", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert os.access(BUILD_SCRIPT, os.X_OK)


@pytest.mark.image
@pytest.mark.slow
def test_the_image_builds_without_a_daemon_and_serves_metrics(tmp_path: Path) -> None:
    """Cold: ~3 min (debootstrap); warm (base cached in $POOLWATCH_CACHE): ~1.5 min."""
    for tool in ("buildah", "debootstrap", "curl"):
        require_tool(tool)
    if os.geteuid() != 0:
        pytest.skip("the image build needs root (debootstrap, buildah chroot isolation)")
    archive = tmp_path / "poolwatch.oci.tar"
    env = {**os.environ, "POOLWATCH_SMOKE_PORT": "19465"}
    result = subprocess.run(
        [str(BUILD_SCRIPT), "--save", str(archive)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env=env,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert re.search(r'poolwatch_pool_conservation_gap_slots\{.*pool="mamba".*\} -1\.0', result.stdout)
    assert "65532:65532 [poolwatch serve] map[9464/tcp:{}]" in result.stdout
    assert "has no torch" in result.stderr
    assert archive.stat().st_size > 10_000_000
    if shutil.which("skopeo"):
        inspect = subprocess.run(
            ["skopeo", "inspect", f"oci-archive:{archive}"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert json.loads(inspect.stdout)["Labels"]["org.opencontainers.image.version"] == __version__
