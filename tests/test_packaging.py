from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

import poolwatch
from tests.helpers import FIXTURES, REPO, free_port, require_tool, serve_argv


def test_the_top_level_package_is_a_signpost() -> None:
    # every name is imported from the module that defines it (tests/test_layout.py)
    assert poolwatch.__all__ == ["__version__"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", poolwatch.__version__)


def test_the_package_is_imported_from_the_installed_location_not_the_checkout_root() -> None:
    assert (REPO / "service" / "poolwatch") in [
        p.parent for p in [__import__("pathlib").Path(poolwatch.__file__)]
    ]
    assert not (REPO / "poolwatch").exists()


def test_a_bad_setting_prints_one_line_and_exits_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "poolwatch.cli", "serve", "--port", "http"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "poolwatch: configuration error: POOLWATCH_PORT: expected an integer, got 'http'"
    )


def test_serve_on_the_seed_fixture_exports_the_mamba_gap_that_promtool_accepts() -> None:
    promtool = require_tool("promtool")
    port = free_port()
    cmd = serve_argv(port, "--snapshot-files", str(FIXTURES / "seed-snapshot.json"), "--log-level", "warning")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        body = poll_metrics(f"http://127.0.0.1:{port}/metrics", 'pool="mamba"')
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    gap = [
        ln
        for ln in body.splitlines()
        if ln.startswith("poolwatch_pool_conservation_gap_slots") and 'pool="mamba"' in ln
    ]
    assert len(gap) == 1
    assert gap[0].endswith(" -1.0")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=body.encode(), capture_output=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


def poll_metrics(url: str, needle: str, deadline_s: float = 20.0) -> str:
    """Poll until the server answers with ``needle`` (bounded; the server needs a moment to start)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            body = httpx.get(url, timeout=1.0).text
            if needle in body:
                return body
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never showed {needle!r}")


def pyproject(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def test_the_version_lives_in_one_place_the_package() -> None:
    project = pyproject(REPO / "pyproject.toml")
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "poolwatch.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?", poolwatch.__version__)
    assert metadata.version("poolwatch") == poolwatch.__version__


def test_the_emulator_version_and_its_poolwatch_pin_follow_the_package_version() -> None:
    emulator = pyproject(REPO / "service" / "poolwatch_emulator" / "pyproject.toml")["project"]
    assert emulator["version"] == poolwatch.__version__
    assert f"poolwatch=={poolwatch.__version__}" in emulator["dependencies"]
    extra = pyproject(REPO / "pyproject.toml")["project"]["optional-dependencies"]["emulator"]
    assert "poolwatch-emulator" in extra


def test_the_changelog_has_a_section_for_this_version() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## \[{re.escape(poolwatch.__version__)}\]", changelog, flags=re.M)
    assert changelog.index("## [Unreleased]") < changelog.index(f"## [{poolwatch.__version__}]")


def test_the_image_build_and_the_dockerfile_take_the_version_from_the_package() -> None:
    script = (REPO / "scripts" / "build_image.sh").read_text(encoding="utf-8")
    assert "VERSION=$(sed -n 's/^__version__ = " in script
    assert poolwatch.__version__ not in (REPO / "Dockerfile").read_text(encoding="utf-8")


def test_the_probe_pth_line_imports_nothing_without_its_variable() -> None:
    pth = REPO / "service" / "poolwatch" / "probe" / "poolwatch-probe.pth"
    line = pth.read_text(encoding="utf-8")
    assert line.startswith("import "), "site runs a .pth line only if it starts so"
    assert line.count("\n") == 1
    code = f"import sys; exec({line!r}); print(sorted(m for m in sys.modules if m.startswith('poolwatch')))"
    for value in (None, "", "0", "true"):
        env = {k: v for k, v in os.environ.items() if k != "POOLWATCH_PROBE"}
        if value is not None:
            env["POOLWATCH_PROBE"] = value
        result = subprocess.run(
            [sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, check=True
        )
        assert result.stdout.strip() == "[]", (value, result.stderr)
