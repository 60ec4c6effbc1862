"""The release workflow (.github/workflows/release.yml) builds with the script the tests run
(scripts/release), installs the Debian tools that script needs, refuses a tag that is not the
package's version (its check run here for real), and publishes with the commands scripts/release
documents."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import yaml

from poolwatch import __version__
from tests.helpers import REPO

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


def workflow() -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return doc


def steps() -> list[dict[str, Any]]:
    (job,) = workflow()["jobs"].values()
    found: list[dict[str, Any]] = job["steps"]
    return found


def step(name: str) -> dict[str, Any]:
    (found,) = [s for s in steps() if s.get("name") == name]
    return found


def test_a_version_tag_triggers_it_and_nothing_else() -> None:
    triggers = workflow().get("on", workflow().get(True))  # YAML 1.1 reads a bare `on` as true
    assert triggers == {"push": {"tags": ["v*"]}}


def test_it_builds_with_scripts_release_alone() -> None:
    runs = [s.get("run", "") for s in steps()]
    assert [r for r in runs if "scripts/release" in r] == [step("scripts/release")["run"]]
    assert not [r for r in runs if re.search(r"python3? -m build|docker build|buildah bud", r)]


def test_it_installs_every_debian_tool_the_image_build_needs() -> None:
    header = (REPO / "scripts" / "build_image.sh").read_text(encoding="utf-8")
    needed = re.search(r"Needs root and the Debian packages ([a-z0-9 -]+), plus", header.replace("\n#", ""))
    assert needed is not None
    installed = step("the image tools (scripts/build_image.sh)")["run"]
    for package in needed.group(1).split():
        assert re.search(rf"\b{re.escape(package)}\b", installed), package


def test_the_tag_check_passes_for_this_version_and_refuses_another() -> None:
    script = step("the tag is the package's version")["run"]
    for tag, code in ((f"v{__version__}", 0), ("v9.9.9", 1), (__version__, 1)):
        result = subprocess.run(
            ["bash", "-eo", "pipefail", "-c", script],
            cwd=REPO, env={**os.environ, "GITHUB_REF_NAME": tag}, capture_output=True, text=True, timeout=30,
            check=False,
        )  # fmt: skip
        assert result.returncode == code, (tag, result.stdout, result.stderr)


def test_it_publishes_as_scripts_release_says_to() -> None:
    release = (REPO / "scripts" / "release").read_text(encoding="utf-8")
    assert "twine upload dist/*.whl dist/*.tar.gz" in release
    assert "twine upload dist/*.whl dist/*.tar.gz" in step("publish the distributions")["run"]
    image = step("publish the image")["run"]
    assert "skopeo copy --all" in image
    assert (
        '"oci-archive:dist/poolwatch-${version}-image.oci.tar" "docker://ghcr.io/poolwatch/poolwatch:${version}"'
        in image
    )
    assert (
        "skopeo copy --all oci-archive:dist/poolwatch-<v>-image.oci.tar docker://ghcr.io/poolwatch/poolwatch:<v>"
        in release
    )


def test_the_workflow_is_clean_yaml() -> None:
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    config = YamlLintConfig(
        "extends: default\nrules: {line-length: {max: 120}, document-start: disable, truthy: disable}\n"
    )
    problems = list(linter.run(WORKFLOW.read_text(encoding="utf-8"), config))
    assert not problems, [f"{p.line}:{p.column} {p.message}" for p in problems]
