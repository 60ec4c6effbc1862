"""The release path: ``python -m build`` makes clean sdists and wheels of both distributions (what
``scripts/release`` ships); the README's install block works line by line from a fresh clone with
torch's CPU build (no CUDA), and so does what ``poolwatch demo`` says to run with only the
``poolwatch`` wheel installed (:mod:`tests.release_env`: a new user's pip)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from poolwatch import __version__
from poolwatch.cli import TORCH_CPU_INSTALL
from tests.helpers import REPO
from tests.install_lines import marked_blocks
from tests.release_env import clone, cpu_torch_index, localise, user_env, venv_report

PTH = "poolwatch-probe.pth"
VENV_BOUND = 2 << 30  # bytes: torch's CPU build and the rest (with CUDA's: 5.5 GB)


def run(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, cwd=cwd, env=env)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def cpu_index(tmp_path_factory: pytest.TempPathFactory) -> str:
    """PyTorch's CPU index, or its local stand-in (tests/release_env.py)."""
    return cpu_torch_index(tmp_path_factory.mktemp("cpu-index"))


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
    assert shipped == (REPO / "service" / "poolwatch" / "probe" / PTH).read_bytes()
    for needed in (
        "poolwatch/sidecar/app.py",
        "poolwatch/probe/lifecycle.py",
        "poolwatch/probe/sglang/engine.py",
        "poolwatch/probe/vllm/engine.py",
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
    assert "[sglang.srt.plugins]\npoolwatch = poolwatch.probe.sglang.engine:sglang_plugin" in entry_points
    assert "[vllm.general_plugins]\npoolwatch = poolwatch.probe.vllm.engine:vllm_plugin" in entry_points
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
    pth = f"service/poolwatch/probe/{PTH}"
    for needed in ("setup.py", "pyproject.toml", "LICENSE", "CHANGELOG.md", pth):
        assert needed in names


def install_block() -> list[str]:
    """The README's install blocks a new user runs in one shell from a clone: the wheel, then the
    emulator (tests/install_lines.py reads the marked blocks)."""
    blocks = marked_blocks()
    return [*blocks["wheel"], *blocks["emulator"]]


def test_the_readme_install_block_starts_from_a_clone_and_installs_the_built_wheels() -> None:
    lines = install_block()
    assert lines[0] == "git clone https://github.com/poolwatch/poolwatch && cd poolwatch"
    assert f"pip install dist/poolwatch-{__version__}-py3-none-any.whl" in lines
    assert f"pip install dist/poolwatch_emulator-{__version__}-py3-none-any.whl" in lines
    assert not [line for line in lines if "pip install -e" in line]


def test_the_readme_makes_and_activates_a_venv_before_the_first_install() -> None:
    lines = install_block()
    first_install = next(i for i, line in enumerate(lines) if line.startswith("pip install"))
    assert "python3 -m venv .venv && . .venv/bin/activate" in lines[:first_install]


def test_the_readme_the_demo_hint_and_bootstrap_install_torch_cpu_build_before_the_emulator() -> None:
    lines = install_block()
    emulator = lines.index(f"pip install dist/poolwatch_emulator-{__version__}-py3-none-any.whl")
    assert [line for line in lines if "torch" in line] == [TORCH_CPU_INSTALL]
    assert lines.index(TORCH_CPU_INSTALL) < emulator
    bootstrap = (REPO / "scripts" / "bootstrap").read_text(encoding="utf-8")
    index = TORCH_CPU_INSTALL.split("--index-url ")[1]
    torch_step = bootstrap.index('-c scripts/constraints.txt "${torch_index[@]}" torch')
    assert f'--index-url "${{POOLWATCH_TORCH_INDEX:-{index}}}"' in bootstrap[:torch_step]
    assert torch_step < bootstrap.index("-e service/poolwatch_emulator")


@pytest.mark.slow
def test_the_readme_install_block_works_line_by_line_in_a_fresh_clone_with_cpu_torch(
    tmp_path: Path, cpu_index: str
) -> None:
    """Cold: a few minutes (the wheels' builds, deps from the index, torch's CPU build)."""
    repo = clone(tmp_path)  # the README's clone, of this checkout
    lines = [localise(line, cpu_index, repo) for line in install_block()[1:]]
    script = "\n".join(["set -euxo pipefail", f"cd {repo}", *lines])
    env = user_env()
    out = run(["bash", "-c", script], cwd=tmp_path, env=env)
    assert f"poolwatch {__version__}" in out.stdout
    venv = repo / ".venv"
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert (site / PTH).is_file()
    assert (site / "poolwatch" / "sidecar" / "app.py").is_file(), "installed, not linked to the clone"
    demo = run([str(venv / "bin" / "poolwatch"), "demo", "--help"], env=env)
    assert "--guard" in demo.stdout  # the emulator's own command
    torch, listed, size = venv_report(venv)
    print(f"\nREADME install, torch {torch}: venv {size / 2**30:.2f} GiB, {len(listed)} distributions")
    assert torch.endswith("+cpu")
    assert not [d for d in listed if d.lower().startswith("nvidia")]
    assert size < VENV_BOUND
    # the installed package renders rules, dashboards and the chart's files for a user's labels,
    # outside any clone
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "sidecar.yaml").write_text('selector: job="poolwatch"\n', encoding="utf-8")
    poolwatch = str(venv / "bin" / "poolwatch")
    run([poolwatch, "generate", "--config", "sidecar.yaml", "--out", "mine"], cwd=elsewhere, env=env)
    rules = (elsewhere / "mine/deploy/helm/poolwatch/files/poolwatch-rules.yml").read_text(encoding="utf-8")
    assert 'job="poolwatch"' in rules
    doctor = subprocess.run(
        [poolwatch, "doctor", "--side", "sidecar"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert doctor.returncode in (0, 1), doctor.stderr
    assert "verdict:" in doctor.stdout
    # the README's git line, as written, in a clean venv of its own: the same wheel, .pth included
    (git_line,) = marked_blocks()["git"]
    other = tmp_path / "git-venv"
    run([sys.executable, "-m", "venv", str(other)])
    run(["bash", "-c", localise(git_line, cpu_index, repo)], cwd=tmp_path, env=user_env(other / "bin"))
    other_site = next((other / "lib").glob("python3*/site-packages"))
    assert (other_site / PTH).is_file()
    run([str(other / "bin" / "poolwatch"), "--version"], env=env)


@pytest.mark.slow
def test_with_only_the_poolwatch_wheel_the_demo_hint_installs_the_emulator_with_cpu_torch(
    dist: Path, tmp_path: Path, cpu_index: str
) -> None:
    repo = clone(tmp_path)  # what the hint's git URL names
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    bindir = venv / "bin"
    env = user_env(bindir)  # the venv is active
    run(
        [str(bindir / "pip"), "install", "-q", str(dist / f"poolwatch-{__version__}-py3-none-any.whl")],
        env=env,
    )
    poolwatch = str(bindir / "poolwatch")
    missing = subprocess.run(
        [poolwatch, "demo"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert missing.returncode == 2, missing.stderr
    commands = [line.strip() for line in missing.stderr.splitlines() if line.startswith("  pip install")]
    assert len(commands) == 2, missing.stderr
    for command in commands:
        run(["bash", "-c", localise(command, cpu_index, repo)], cwd=tmp_path, env=env)
    demo = run([poolwatch, "demo", "--help"], env=env)
    assert "--guard" in demo.stdout
    torch, listed, size = venv_report(venv)
    print(f"\nwheel + the demo's hint, torch {torch}: venv {size / 2**30:.2f} GiB")
    assert torch.endswith("+cpu")
    assert not [d for d in listed if d.lower().startswith("nvidia")]
    assert f"poolwatch-emulator=={__version__}" in listed
