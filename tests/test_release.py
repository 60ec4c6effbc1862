"""The release path: ``python -m build`` makes clean sdists and wheels of both distributions (what
``scripts/release`` ships), and the README's install block works line by line in a fresh venv."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from poolwatch import __version__
from tests.helpers import REPO

PTH = "poolwatch-probe.pth"


def run(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, cwd=cwd, env=env)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)])
    run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO / "service" / "poolwatch_emulator")])
    return out


def wheel_names(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()


def wheel_metadata(path: Path) -> tuple[list[str], str]:
    with zipfile.ZipFile(path) as zf:
        info = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(info).decode()
        entry_points = zf.read(info.replace("METADATA", "entry_points.txt")).decode()
    return text.splitlines(), entry_points


@pytest.mark.slow
def test_twine_check_strict_and_check_wheel_contents_pass_on_both_distributions(dist: Path) -> None:
    files = sorted(dist.iterdir())
    assert [f.name for f in files] == [
        f"poolwatch-{__version__}-py3-none-any.whl",
        f"poolwatch-{__version__}.tar.gz",
        f"poolwatch_emulator-{__version__}-py3-none-any.whl",
        f"poolwatch_emulator-{__version__}.tar.gz",
    ]
    bindir = Path(sys.executable).parent
    twine = run([str(bindir / "twine"), "check", "--strict", *map(str, files)])
    assert twine.stdout.count("PASSED") == 4
    contents = run([str(bindir / "check-wheel-contents"), *(str(f) for f in files if f.suffix == ".whl")])
    assert contents.stdout.count(": OK") == 2


@pytest.mark.slow
def test_the_base_wheel_carries_the_sidecar_the_probe_and_its_pth_but_not_the_emulator(dist: Path) -> None:
    wheel = dist / f"poolwatch-{__version__}-py3-none-any.whl"
    names = wheel_names(wheel)
    assert PTH in names, "at the root of site-packages, where site processes it"
    assert [n for n in names if n.endswith(".pth")] == [PTH]
    with zipfile.ZipFile(wheel) as zf:
        shipped = zf.read(PTH)
    assert shipped == (REPO / "service" / "poolwatch" / "probe" / "sglang" / PTH).read_bytes()
    for needed in (
        "poolwatch/sidecar/app.py",
        "poolwatch/probe/sglang/activate.py",
        "poolwatch/static/index.html",
    ):
        assert needed in names
    assert "poolwatch/py.typed" in names
    assert not [n for n in names if n.startswith(("poolwatch_emulator", "tests/"))]
    assert f"poolwatch-{__version__}.dist-info/licenses/LICENSE" in names
    metadata, entry_points = wheel_metadata(wheel)
    requires = [line for line in metadata if line.startswith("Requires-Dist:")]
    assert not [r for r in requires if "torch" in r and "extra ==" not in r], "torch only with an extra"
    assert any(r.startswith("Requires-Dist: poolwatch-emulator") and "extra == " in r for r in requires)
    assert "[sglang.srt.plugins]\npoolwatch = poolwatch.probe.sglang.activate:sglang_plugin" in entry_points
    assert "[console_scripts]\npoolwatch = poolwatch.cli:main" in entry_points


@pytest.mark.slow
def test_the_emulator_wheel_pins_this_poolwatch_and_registers_its_commands(dist: Path) -> None:
    wheel = dist / f"poolwatch_emulator-{__version__}-py3-none-any.whl"
    names = wheel_names(wheel)
    assert "poolwatch_emulator/scheduler.py" in names
    assert not [n for n in names if n.startswith("poolwatch/") or n.endswith(".pth")]
    metadata, entry_points = wheel_metadata(wheel)
    assert f"Requires-Dist: poolwatch=={__version__}" in metadata
    assert "[poolwatch.commands]" in entry_points


@pytest.mark.slow
def test_the_sdist_builds_the_same_wheel_files(dist: Path) -> None:
    with tarfile.open(dist / f"poolwatch-{__version__}.tar.gz") as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    for needed in ("setup.py", "pyproject.toml", "LICENSE", "CHANGELOG.md", f"service/poolwatch/probe/{PTH}"):
        assert needed in names


def install_block() -> list[str]:
    """The README's "Today, from a clone" shell block, one command per line."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("\n## Install\n") : readme.index("\n## Install the probe into SGLang")]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    (today,) = [b for b in blocks if b.startswith("git clone ")]
    return [line.split("  #")[0].strip() for line in today.splitlines() if line.strip()]


def test_the_readme_install_block_starts_from_a_clone_and_installs_the_built_wheels() -> None:
    lines = install_block()
    assert lines[0] == "git clone https://github.com/poolwatch/poolwatch && cd poolwatch"
    assert f"pip install dist/poolwatch-{__version__}-py3-none-any.whl" in lines
    assert f"pip install dist/poolwatch_emulator-{__version__}-py3-none-any.whl" in lines
    assert not [line for line in lines if "pip install -e" in line]


@pytest.mark.slow
def test_the_readme_install_block_works_line_by_line_in_a_fresh_venv(tmp_path: Path) -> None:
    """Cold: ~2 min (deps and the CPU torch wheel from the package index)."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    lines = install_block()
    clone = f"git clone --quiet {REPO} poolwatch && cd poolwatch"  # the clone, of this checkout
    script = "\n".join(["set -euxo pipefail", clone, *lines[1:]])
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    out = run(["bash", "-c", script], cwd=tmp_path, env=env)
    assert f"poolwatch {__version__}" in out.stdout
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert (site / PTH).is_file()
    assert (site / "poolwatch" / "sidecar" / "app.py").is_file(), "installed, not linked to the clone"
    demo = run([str(venv / "bin" / "poolwatch"), "demo", "--help"], env=env)
    assert "usage" in demo.stdout.lower()
    # the git route builds the same wheel, .pth included
    (site / PTH).unlink()
    url = f"git+file://{tmp_path / 'poolwatch'}@main"  # (PEP 508's "name @ url" wants a host in the URL)
    run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--force-reinstall", url], env=env)
    assert (site / PTH).is_file()
