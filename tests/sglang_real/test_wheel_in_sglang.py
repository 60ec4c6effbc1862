"""The built wheel (not the checkout) inside real SGLang releases: the probe activates in spawned
processes from ``poolwatch-probe.pth`` (0.5.4.post1) and from the plugin entry point (0.5.23).

The wheel is built with ``python -m build`` (sdist, then the wheel from the sdist, as a release
is).  Each case hard-links a copy of a cached release venv (``scripts/sglang_venv.py``; the cache
is never written), replaces the poolwatch installed there with the built wheel, and runs
``wheel_probe.py`` with that venv's Python from a directory outside the checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rigs.sglang.releases import Tier, release, tier
from tests.helpers import source_tree

HERE = Path(__file__).parent
# how the probe activates there: SGLang's plugin entry point where the release loads plugins
CASES = {v: "plugin" if release(v).plugins else "pth" for v in tier(Tier.WHEEL)}


def cached_venv(version: str) -> Path:
    venv = release(version).venv()
    venv.need()
    return venv.path


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    source = source_tree(tmp_path_factory.mktemp("source"))  # (each xdist worker builds its own)
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = out.glob("poolwatch-*-py3-none-any.whl")
    return wheel


def fingerprint(venv: Path) -> str:
    """The cached venv's own poolwatch install (it must be the same after the test)."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    digest = hashlib.sha256()
    for path in [*sorted(site.glob("poolwatch-*.dist-info/**/*")), site / "poolwatch-probe.pth"]:
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def venv_copy(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A hard-linked copy of the cached release venv (seconds, no disk): installs write new files."""
    source = cached_venv(request.param)
    before = fingerprint(source)
    copy = tmp_path / "venv"
    if subprocess.run(["cp", "-al", str(source), str(copy)], check=False).returncode != 0:
        shutil.rmtree(copy, ignore_errors=True)
        subprocess.run(["cp", "-a", str(source), str(copy)], check=True)  # another filesystem
    yield copy
    shutil.rmtree(copy, ignore_errors=True)
    assert fingerprint(source) == before, f"the cached venv {source} was modified"


def pip(venv: Path, *args: str) -> None:
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.parametrize(("venv_copy", "mode"), list(CASES.items()), indirect=["venv_copy"])
def test_the_built_wheel_activates_the_probe_in_spawned_sglang_processes_only_when_asked(
    venv_copy: Path, mode: str, built_wheel: Path, tmp_path: Path
) -> None:
    pip(venv_copy, "uninstall", "--yes", "poolwatch")
    pip(venv_copy, "install", "--no-deps", "--no-index", str(built_wheel))
    workdir = tmp_path / "run"
    workdir.mkdir()
    shutil.copy(HERE / "wheel_probe.py", workdir)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POOLWATCH_PROBE", "SGLANG_PLUGINS"))}
    env.pop("PYTHONPATH", None)
    out = subprocess.run(
        [str(venv_copy / "bin" / "python"), "-W", "ignore", "wheel_probe.py", mode],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=workdir,
        env={**env, "HF_HUB_OFFLINE": "1"},
        check=False,
    )
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    failed = [r for r in results if not r["ok"]]
    assert failed == [], json.dumps(failed, indent=1)[:8000]
    assert len(results) >= 5, out.stderr[-4000:]
    assert out.returncode == 0
